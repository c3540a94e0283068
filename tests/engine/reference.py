"""An independent eager reference for DESIGN.md's mask / steer definitions.

It computes every layer's full attention with a hand-written softmax and applies the
interventions from plain Python descriptions (sets of heads, rows, keys), sharing no code
with the engine. Registered under its own attention name for the duration of a test.

Which keys a query may see is written here by hand from the modeling code of each family
(:func:`model_mask`), not read from the mask transformers passes: causal, plus — where the
family has them — bidirectional image blocks (Gemma 3: ``token_type_ids``) and sliding
windows (``k > q − sliding_window`` on ``sliding_attention`` layers).
"""

from __future__ import annotations

import contextlib
import math

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from vheads.doctor._reference import logit_scale, model_mask  # noqa: F401 - model_mask: the tests' import point

REF = "vheads_test_reference"
SPEC: dict = {}


def reference_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    B, H, T, D = query.shape
    rep = H // key.shape[1]
    k = torch.cat([key[:, i // rep : i // rep + 1] for i in range(H)], dim=1)
    v = torch.cat([value[:, i // rep : i // rep + 1] for i in range(H)], dim=1)
    scale = logit_scale(module.config, D)  # query_pre_attn_scalar where the config has one (Gemma 3)
    logits = (query.double() @ k.double().transpose(-1, -2)) * scale
    layer = module.layer_idx
    allowed = SPEC["allowed"][layer] if SPEC.get("allowed") else torch.ones(T, T, dtype=torch.bool).tril()
    logits = logits.masked_fill(~allowed, -math.inf)
    for b, actions in enumerate(SPEC.get("per_row", [])):
        for act in actions:
            rows = torch.tensor(act["rows"], dtype=torch.long)[:, None]  # [Q, 1]
            for (l, h) in act["heads"]:
                if l != layer:
                    continue
                if act["kind"] == "mask":  # every (row, key) pair of the action
                    logits[b, h, rows, torch.tensor(act["keys"], dtype=torch.long)[None, :]] = -math.inf
                else:  # steer: +beta on target keys, -beta on the other image keys
                    sign = torch.tensor([act["beta"] if t in act["target"] else -act["beta"] for t in act["image"]], dtype=logits.dtype)
                    keys = torch.tensor(act["image"], dtype=torch.long)[None, :]
                    logits[b, h, rows, keys] = logits[b, h, rows, keys] + sign
    m = logits.max(-1, keepdim=True).values
    e = torch.exp(logits - m)
    p = e / e.sum(-1, keepdim=True)
    # a row whose every key is hidden (a sliding window holding only masked keys) attends nowhere
    p = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(p), p)
    out = (p @ v.double()).to(query.dtype)
    return out.transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def reference_mode(model, per_row, allowed: dict[int, torch.Tensor] | None = None):
    AttentionInterface.register(REF, reference_attention)
    AttentionMaskInterface.register(REF, sdpa_mask)
    subs = {name: (REF if name == "text_config" else "sdpa") for name in model.config.sub_configs}
    SPEC["per_row"] = per_row
    SPEC["allowed"] = allowed
    model.set_attn_implementation(subs)
    try:
        yield
    finally:
        SPEC.clear()


def hand_gqa_attention(q, k, v, keep, scale):
    """Softmax attention written out, in float64: every query head h reads KV head h // g
    (``q [B, H, Tq, D]``, ``k``/``v [B, Hkv, Tk, D]``), softmax over the keys ``keep``
    (bool, broadcast to ``[B, H, Tq, Tk]``) allows. Returns ``[B, Tq, H, D]``."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    logits = (q.double() @ k.double().transpose(-1, -2)) * scale
    logits = logits.masked_fill(~keep, float("-inf"))
    w = torch.exp(logits - logits.amax(-1, keepdim=True))
    return ((w / w.sum(-1, keepdim=True)) @ v.double()).transpose(1, 2)
