"""The vision tower's output kept across forwards: a study runs the same few items' images in
many forwards (every head-set batch, every setting, every round of the controls), and the
tower's output depends on the images alone — the plan acts on the language model only.

The tower's output for a forward's U distinct images is cut into one segment per image
(:func:`segments`) and each is kept under a digest of its prompt's pixel inputs (hashed once
per prompt). A forward whose images are all kept joins their segments and runs no tower;
otherwise the tower runs on all of them, as before, and their segments are kept. An image's
tower rows do not depend on the other images of the call except through the BLAS blocking of
the call's size, so a joined output equals a fresh one to float rounding (the
tests compare them). The engine hands out copies (:func:`join`), never the kept tensors.
Kept only without autograd (a backward through the tower needs its graph), least recently
used first out, at most :data:`VISION_CACHE_BYTES` in all; ``VHEADS_VISION_CACHE=0`` (or
``Batching.vision_cache = False``) runs the tower every time, as before.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import OrderedDict

import torch

#: the most bytes of tower outputs one engine keeps (on the model's device)
VISION_CACHE_BYTES = 1 << 27


def pixel_key(prompt, pixel_keys) -> bytes:
    """A digest of ``prompt``'s pixel inputs (names, shapes, dtypes, bytes), computed once per
    prompt and kept on it."""
    key = getattr(prompt, "_pixel_key", None)
    if key is None:
        h = hashlib.blake2b(digest_size=20)
        for name in sorted(pixel_keys):
            t = prompt.inputs.get(name)
            if t is None:
                continue
            t = t.detach().cpu().contiguous().reshape(-1)
            h.update(f"{name}:{tuple(prompt.inputs[name].shape)}:{t.dtype};".encode())
            h.update(t.view(torch.uint8).numpy().tobytes())
        key = prompt._pixel_key = h.digest()
    return key


def segments(out, weights: list[int]) -> list:
    """The vision tower's output for U images cut into U outputs of the same structure:
    every tensor in ``out`` (a tensor, tuple, list, dict or ModelOutput) along dim 0, in
    proportion to ``weights`` (the images' token counts: Qwen-VL's outputs are flat over
    tokens or patches, LLaVA's have one entry per image). Each cut segment owns its storage,
    so a kept segment holds its own bytes, not the whole call's output."""
    U = len(weights)
    if isinstance(out, torch.Tensor):
        if out.dim() == 0 or U == 1:
            return [out] * U
        n, total = out.shape[0], sum(weights)
        if any(n * w % total for w in weights):
            raise ValueError(f"vision output of {n} rows cannot be split over images of {weights} tokens")
        return [x.clone() for x in out.split([n * w // total for w in weights])]
    if isinstance(out, (list, tuple)) and not hasattr(out, "keys"):
        parts = [segments(x, weights) for x in out]
        return [type(out)(p[u] for p in parts) for u in range(U)]
    if dataclasses.is_dataclass(out) and hasattr(out, "keys"):  # transformers ModelOutput
        parts = {k: segments(v, weights) for k, v in out.items()}
        return [type(out)(**{k: p[u] for k, p in parts.items()}) for u in range(U)]
    if isinstance(out, dict):
        parts = {k: segments(v, weights) for k, v in out.items()}
        return [{k: p[u] for k, p in parts.items()} for u in range(U)]
    return [out] * U


def join(segs: list, counts: list[int]):
    """The batch's tower output from per-image segments (:func:`segments`): segment u
    repeated ``counts[u]`` times, concatenated along dim 0 — new tensors, whatever is kept."""
    first = segs[0]
    if isinstance(first, torch.Tensor):
        if first.dim() == 0:
            return first
        return torch.cat([s.repeat(c, *([1] * (s.dim() - 1))) for s, c in zip(segs, counts)])
    if isinstance(first, (list, tuple)) and not hasattr(first, "keys"):
        return type(first)(join([s[i] for s in segs], counts) for i in range(len(first)))
    if dataclasses.is_dataclass(first) and hasattr(first, "keys"):
        return type(first)(**{k: join([s[k] for s in segs], counts) for k in first.keys()})
    if isinstance(first, dict):
        return {k: join([s[k] for s in segs], counts) for k in first}
    return first


def _nbytes(out) -> int:
    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    if hasattr(out, "values") and callable(out.values):
        return sum(_nbytes(v) for v in out.values())
    if isinstance(out, (list, tuple)):
        return sum(_nbytes(v) for v in out)
    return 0


class VisionCache:
    """Per-image tower segments by pixel digest, least recently used first out, at most
    ``max_bytes`` in all."""

    def __init__(self, max_bytes: int = VISION_CACHE_BYTES):
        self.max_bytes = max_bytes
        self.entries: OrderedDict[bytes, tuple[object, int]] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0

    def get_all(self, keys: list[bytes]) -> list | None:
        """The kept segments of ``keys``, or None unless every one is kept (a miss for the
        forward: its tower runs)."""
        hits = [self.entries.get(k) for k in keys]
        if any(h is None for h in hits):
            self.misses += 1
            return None
        for k in keys:
            self.entries.move_to_end(k)
        self.hits += 1
        return [h[0] for h in hits]

    def put(self, key: bytes, out) -> None:
        size = _nbytes(out)
        if size > self.max_bytes or key in self.entries:
            return
        while self.entries and self.bytes + size > self.max_bytes:
            _, (_, n) = self.entries.popitem(last=False)
            self.bytes -= n
        self.entries[key] = (out, size)
        self.bytes += size
