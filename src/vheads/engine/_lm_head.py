"""Answers in fp32: the LM head's logits computed in float32 from the final hidden state.

A model run in bfloat16 rounds its logits to 8 bits of mantissa: a step of 0.125 at
|logit| 16–32, enough to move P(option) by up to 0.05 — the size of many control effects.
While :func:`fp32_logits` runs, the output embedding's result is replaced by
``hidden.float() @ W.float()ᵀ (+ b)`` from the same input (the final hidden state after
the final norm), the weight cast in chunks of :data:`VOCAB_CHUNK` rows, so the option
logits and the log-sum-exp over the vocabulary are fp32 (a softcap, Gemma's, is then
applied by the model to fp32 logits). Differentiable: AtP reads its gradient through it.

Chosen by the weight's dtype, not the device: a head whose weight is fp32 (fp64) already
gives fp32 logits and is left alone; a bf16 / fp16 head gets the fp32 product, on a CPU as
on a GPU (tests/engine/test_lm_head.py runs a bf16 model on a CPU).
"""

from __future__ import annotations

import contextlib

import torch

#: vocabulary rows of the head's weight cast to fp32 at once (16,384 × 4,096 × 4 B = 256 MB)
VOCAB_CHUNK = 1 << 14


def fp32_product(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``hidden [..., D] @ weight [V, D]ᵀ + bias [V]`` in float32: ``[..., V]``."""
    h = hidden.to(weight.device).float()
    parts = []
    for a in range(0, weight.shape[0], VOCAB_CHUNK):
        w = weight[a : a + VOCAB_CHUNK].float()  # [v, D]
        y = h @ w.T  # [..., v]
        parts.append(y if bias is None else y + bias[a : a + VOCAB_CHUNK].float())
    return parts[0] if len(parts) == 1 else torch.cat(parts, -1)


def head_needs_fp32(head) -> bool:
    """Whether ``head``'s logits would be below fp32 precision (a bf16 / fp16 weight)."""
    w = getattr(head, "weight", None)
    return isinstance(w, torch.Tensor) and w.is_floating_point() and torch.finfo(w.dtype).bits < 32


@contextlib.contextmanager
def fp32_logits(model):
    """While the block runs, ``model``'s output embedding returns fp32 logits computed from
    its input (module docstring), when its weight is below fp32; else nothing changes."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or not head_needs_fp32(head) or not isinstance(head, torch.nn.Linear):
        yield
        return

    def recompute(module, args, out):
        return fp32_product(args[0], module.weight, module.bias)

    handle = head.register_forward_hook(recompute)
    try:
        yield
    finally:
        handle.remove()
