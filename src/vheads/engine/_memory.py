"""Memory: keep freed memory in the process on CPU; size forwards from a device's free memory.

On a device whose backend reports its free memory (CUDA), an engine's token budget starts
at what :func:`fitting_positions` says fits (:func:`device_free_memory`, an estimate of a
forward's activations per position from the model's config); an out-of-memory error
still halves a forward and the engine remembers the size that fit (:mod:`._oom`).

Keeping freed memory on CPU, so a forward's tensors reuse the last forward's pages:

glibc's malloc serves large blocks (the batch's hidden states, MLP activations, attention
rows: tens of MB each) with fresh ``mmap`` calls and returns them to the system when they
are freed, so every forward faults all of its activation pages in again: the default study
spent ~15% of its CPU time in the kernel doing that (32 million page faults in 8
minutes). With ``mmap`` off for malloc and the heap trimmed only above 1 GiB free, freed
blocks are reused in place (0.2 million faults). The cost is memory held: freed blocks
stay in the heap, where fragmentation can raise the peak a little (the default study's
peak RSS: 706 MB before, 780–800 MB after), and up to 1 GiB of free heap is kept.

It is a process-wide setting, applied once when an engine is built for a CPU model (not on
CUDA, whose allocator caches on its own), on glibc only, unless ``VHEADS_KEEP_FREED=0``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import torch

M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
M_MMAP_MAX = -4
TRIM_ABOVE = 1 << 30

_done = False


def keep_freed_memory() -> bool:
    """Apply the setting (once per process); True when it is in force."""
    global _done
    if _done:
        return True
    if os.environ.get("VHEADS_KEEP_FREED", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to tune
        return False
    _done = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_ABOVE))
    return _done


#: of the device's free memory, the share a forward's activations may plan on (the rest:
#: the allocator's fragmentation, the attention recompute's chunks, the LM head's rows)
FREE_SHARE = 0.6


def device_free_memory(device) -> int | None:
    """Free bytes on ``device`` as its backend reports them (``torch.<type>.mem_get_info``:
    CUDA, XPU, …), or None where the backend has no such query (a CPU) or it fails."""
    backend = getattr(torch, torch.device(device).type, None)
    info = getattr(backend, "mem_get_info", None)
    if info is None:
        return None
    try:
        return int(info(device)[0])
    except (RuntimeError, AssertionError, TypeError, ValueError):
        return None


def bytes_per_position(config, dtype: torch.dtype) -> int:
    """A no-grad forward's live activations per (row, position), at their peak in one
    decoder layer: the residual stream and its normed copy, q / k / v and the attention
    output, the MLP's gate, up and activated rows (``4·D + 2·kv·d + 3·I`` values), twice
    over for the temporaries that overlap, in ``dtype``."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    D = int(text.hidden_size)
    heads = int(getattr(text, "num_attention_heads", 1))
    kv = int(getattr(text, "num_key_value_heads", None) or heads)
    d = int(getattr(text, "head_dim", None) or D // heads)
    inter = getattr(text, "intermediate_size", None) or 4 * D
    experts = int(getattr(text, "num_experts_per_tok", 0) or 0)
    if experts and getattr(text, "moe_intermediate_size", None):
        inter = max(int(inter), experts * int(text.moe_intermediate_size))
    return 2 * (4 * D + 2 * kv * d + 3 * int(inter)) * torch.finfo(dtype).bits // 8


def fitting_positions(config, dtype: torch.dtype, free: int) -> int:
    """How many (row, position) pairs one forward can hold in ``free`` bytes (at least 1)."""
    return max(1, int(free * FREE_SHARE) // bytes_per_position(config, dtype))
