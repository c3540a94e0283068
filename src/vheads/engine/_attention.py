"""The vheads attention function, registered through transformers' ``AttentionInterface``.

It is set on the language model only. Layers the active plan does not touch (and every
forward with no plan) take transformers' plain sdpa path. A touched layer also runs sdpa
for all rows, then recomputes only the rows the plan acts on with an explicit softmax
(``q_sel @ Kᵀ``), in chunks of rows, so no ``[L, H, T, T]`` map ever exists.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from vheads.engine._plan import ProbePlan

NAME = "vheads"
ROW_CHUNK = 512  # query rows per explicit-softmax chunk: bounds memory at B·H·chunk·T


@dataclass
class _Active:
    plan: ProbePlan | None = None
    results: dict[str, torch.Tensor] = field(default_factory=dict)


_STATE = _Active()


@contextlib.contextmanager
def active_plan(plan: ProbePlan | None):
    """Make ``plan`` the plan of the forward passes run inside this block."""
    prev = _STATE.plan, _STATE.results
    _STATE.plan, _STATE.results = plan, {}
    if plan is not None:
        for c in plan.captures:
            _STATE.results[c.name] = torch.zeros(plan.batch_size, plan.n_layers, plan.n_heads, c.groups.shape[1])
    try:
        yield _STATE.results
    finally:
        _STATE.plan, _STATE.results = prev


def _allowed(attention_mask, idx_abs: torch.Tensor, q_off: int, tk: int, device) -> torch.Tensor | None:
    """Bool or additive mask for the selected rows: [B|1, 1, Qs, Tk]; None means causal."""
    if attention_mask is None:
        k = torch.arange(tk, device=device)
        return (k[None, :] <= idx_abs[:, None])[None, None]  # [1, 1, Qs, Tk]
    return attention_mask[:, :, idx_abs - q_off, :tk]


def _explicit_rows(module, query, key, value, attention_mask, scaling, plan: ProbePlan, idx_abs, q_off, layer):
    """Softmax attention for query rows ``idx_abs`` with the plan's biases.

    Returns (output [B, Qs, H, D], probs [B, H, Qs, Tk]).
    """
    B, H, _, D = query.shape
    tk = key.shape[2]
    groups = H // key.shape[1]
    k = key.repeat_interleave(groups, dim=1) if groups > 1 else key  # [B, H, Tk, D]
    v = value.repeat_interleave(groups, dim=1) if groups > 1 else value
    q_sel = query[:, :, idx_abs - q_off].float()  # [B, H, Qs, D]
    logits = torch.matmul(q_sel, k.float().transpose(-1, -2)) * scaling  # [B, H, Qs, Tk]
    allowed = _allowed(attention_mask, idx_abs, q_off, tk, query.device)
    if allowed.dtype == torch.bool:
        logits = logits.masked_fill(~allowed, float("-inf"))
    else:
        logits = logits + allowed.float()
    for iv in plan.interventions:
        heads = iv.heads[:, layer].to(query.device)  # [B, H]
        if not heads.any():
            continue
        rows = iv.rows[:, idx_abs.cpu()].to(query.device)  # [B, Qs]
        on = heads[:, :, None] & rows[:, None, :]  # [B, H, Qs]
        bias = iv.key_bias[:, :tk].to(query.device)  # [B, Tk]
        logits = torch.where(on[..., None], logits + bias[:, None, None, :], logits)
    probs = torch.softmax(logits, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)  # a row with every key hidden attends nowhere
    out = torch.matmul(probs, v.float()).to(query.dtype)  # [B, H, Qs, D]
    return out.transpose(1, 2), probs


def vheads_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """query [B, H, Tq, D]; key/value [B, Hkv, Tk, D]; returns ([B, Tq, H, D], None)."""
    out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    plan = _STATE.plan
    layer = getattr(module, "layer_idx", None)
    if plan is None or layer is None or not plan.touches_layer(layer):
        return out, None
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    tq, tk = query.shape[2], key.shape[2]
    q_off = tk - tq  # absolute position of query row 0 (a prefix cache sits before it)
    local = torch.zeros(plan.interventions[0].rows.shape[1] if plan.interventions else plan.captures[0].rows.shape[1], dtype=torch.bool)
    for iv in plan.interventions:
        if iv.heads[:, layer].any():
            local |= (iv.rows & iv.heads[:, layer].any(1)[:, None]).any(0)
    for c in plan.captures:
        local |= c.rows.any(0)
    local[:q_off] = False
    local[q_off + tq :] = False
    idx_all = local.nonzero().flatten()
    if len(idx_all) == 0:
        return out, None
    out = out.clone()
    for start in range(0, len(idx_all), ROW_CHUNK):
        idx_abs = idx_all[start : start + ROW_CHUNK].to(query.device)
        o, probs = _explicit_rows(module, query, key, value, attention_mask, scaling, plan, idx_abs, q_off, layer)
        out[:, idx_abs - q_off] = o
        for c in plan.captures:
            w = c.rows[:, idx_abs.cpu()].float().to(query.device)  # [B, Qs]
            if not w.any():
                continue
            g = c.groups[:, :, :tk].float().to(query.device)  # [B, G, Tk]
            per_row = torch.einsum("bhqt,bgt->bhqg", probs, g)  # [B, H, Qs, G]
            n_rows = c.rows.sum(1).float().to(query.device)  # [B]
            mass = torch.einsum("bhqg,bq->bhg", per_row, w) / n_rows[:, None, None]
            _STATE.results[c.name][:, layer] += mass.float().cpu()
    return out, None


def register() -> None:
    """Register the attention function and its mask function (idempotent).

    The mask function matters: without it transformers treats an unknown attention name as
    needing no mask and runs with ``attention_mask=None`` — no causality, no padding.
    """
    AttentionInterface.register(NAME, vheads_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def install(model) -> None:
    """Use the vheads attention on the language model only; the vision tower keeps sdpa."""
    register()
    subs = {}
    for name in getattr(model.config, "sub_configs", {}) or {}:
        subs[name] = NAME if name == "text_config" else "sdpa"
    if "text_config" not in subs:
        raise ValueError(f"{type(model).__name__} has no text_config sub-config; is it a VLM?")
    model.set_attn_implementation(subs)
