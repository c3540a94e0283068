"""A digest of what a prompt's forwards depend on (the probe memo's key, an ablation
reference set's identity)."""

from __future__ import annotations

import hashlib

import torch

from vheads.models import Prompt


def prompt_digest(prompt: Prompt) -> bytes:
    """A digest of what a prompt's forwards depend on: every model input (name, dtype, shape,
    values) and its layout's positions (image tokens, spans, regions), which actions read."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(prompt.inputs):
        v = prompt.inputs[name]
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu().contiguous()
            h.update(f"{name}:{v.dtype}:{tuple(v.shape)}".encode())
            h.update(v.view(torch.uint8).numpy().tobytes() if v.dtype != torch.bool else v.numpy().tobytes())
        else:
            h.update(f"{name}:{v!r}".encode())
    lay = prompt.layout
    h.update(repr((lay.n_tokens, lay.image_positions.tolist(), sorted(lay.spans.items()),
                   sorted((k, r.positions.tolist()) for k, r in lay.regions.items()))).encode())
    return h.digest()
