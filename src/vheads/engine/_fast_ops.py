"""Two of the built-in tiny model's per-layer ops done in fewer passes, to the same bits.

On the built-in tiny model (Qwen3-VL, hidden 128, head_dim 8) a profile of the default
study's evaluation gave RMSNorm about 8% and the rotary embedding about 8% of the forward
(``benchmarks/README.md``, "The default study with fused norms and rotary"). Transformers
writes both as chains of elementwise ops, each a pass over the activations:

- :func:`rms_norm_forward`: the hidden-size norms (``input_layernorm``,
  ``post_attention_layernorm``, the final norm) run ``torch.nn.functional.rms_norm``, one
  fused kernel, where the input is fp32 on a CPU. It computes ``x · rsqrt(mean(x²) + eps)``
  then ``weight ·`` in the same order, and gives the same bits on this build
  (``tests/engine/test_fast_ops.py`` checks it against transformers' own forward); anything
  else (another dtype or device, a head-dim norm, where the fused kernel is no faster, or
  autograd) keeps transformers' forward.
- :func:`apply_rotary_pos_emb`: ``q · cos + rotate_half(q) · sin`` without building
  ``rotate_half(q)``: ``q · cos``, then its first half minus ``q₂ · sin₁`` and its second half
  plus ``q₁ · sin₂``, in place. ``a + (−b) · c`` and ``a − b · c`` round the same in IEEE
  arithmetic, so the result is bitwise transformers'. Under autograd transformers' own runs.

:func:`install` sets both on a Qwen3-VL language model (the classes named in
:data:`NORMS`; other models are left as they are). ``VHEADS_FAST_OPS=0`` turns it off.
"""

from __future__ import annotations

import os
import sys
import types

import torch
import torch.nn.functional as F

#: RMSNorm classes whose forward is ``weight * (x * rsqrt(mean(x²) + eps))`` (no offset, no cast)
NORMS = ("Qwen3VLTextRMSNorm",)
#: the smallest normalised size sent to the fused kernel (below it, e.g. head_dim 8, it is no faster)
MIN_FUSED = 32


def enabled() -> bool:
    """Whether :func:`install` patches anything (``VHEADS_FAST_OPS``, default on)."""
    return os.environ.get("VHEADS_FAST_OPS", "1") != "0"


def rms_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """A Llama-style RMSNorm's forward: the fused kernel for fp32 on a CPU, else the class's own."""
    w = self.weight
    if (hidden_states.dtype == torch.float32 and w.dtype == torch.float32 and hidden_states.device.type == "cpu"
            and not (torch.is_grad_enabled() and (hidden_states.requires_grad or w.requires_grad))):
        return F.rms_norm(hidden_states, (w.shape[0],), w, self.variance_epsilon)
    return type(self).forward(self, hidden_states)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    out = x * cos
    out[..., :h] -= x[..., h:] * sin[..., :h]
    out[..., h:] += x[..., :h] * sin[..., h:]
    return out


def make_rotary(original):
    """``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` without the ``rotate_half`` copy;
    ``original`` (transformers' own) under autograd."""

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            return original(q, k, cos, sin, unsqueeze_dim)
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        return _rotate(q, cos, sin), _rotate(k, cos, sin)

    apply_rotary_pos_emb.vheads_original = original
    return apply_rotary_pos_emb


def install(model) -> int:
    """Patch the norms of :data:`NORMS` (hidden size ≥ :data:`MIN_FUSED`) on ``model``'s
    instances and the rotary function of their modelling module; return how many norms.
    Idempotent; nothing when :func:`enabled` is false."""
    if not enabled():
        return 0
    n = 0
    for m in model.modules():
        cls = type(m)
        if cls.__name__ not in NORMS or getattr(m, "weight", None) is None or m.weight.dim() != 1:
            continue
        mod = sys.modules.get(cls.__module__)
        rot = getattr(mod, "apply_rotary_pos_emb", None)
        if rot is not None and not hasattr(rot, "vheads_original"):
            mod.apply_rotary_pos_emb = make_rotary(rot)
        if m.weight.shape[0] >= MIN_FUSED:
            m.forward = types.MethodType(rms_norm_forward, m)
            n += 1
    return n
