"""Keep freed memory in the process on CPU, so a forward's tensors reuse the last forward's pages.

glibc's malloc serves large blocks (the batch's hidden states, MLP activations, attention
rows: tens of MB each) with fresh ``mmap`` calls and returns them to the system when they
are freed, so every forward faults all of its activation pages in again: the default study
spent ~15% of its CPU time in the kernel doing that (about a million page faults per
minute of evaluation). With ``mmap`` off for malloc and the heap trimmed only above
1 GiB free, freed blocks are reused in place. The peak memory does not grow (measured:
same peak RSS), only memory above the peak is given back later.

It is a process-wide setting, applied once when an engine is built for a CPU model (not on
CUDA, whose allocator caches on its own), on glibc only, unless ``VHEADS_KEEP_FREED=0``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

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
