"""The vheads attention function, registered through transformers' ``AttentionInterface``.

It is set on the language model only. Layers the active plan does not touch (and every
forward with no plan) take transformers' plain sdpa path. A touched layer also runs sdpa
for all rows, then recomputes only the rows the plan acts on, and only for the (batch
row, head) pairs it acts on, with an explicit softmax (``q_sel @ Kᵀ``), in chunks of rows
bounded by a logit budget, so no ``[L, H, T, T]`` map ever exists.
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
ROW_CHUNK = 512  # at most this many query rows per explicit-softmax chunk
CHUNK_ELEMENTS = 1 << 25  # and at most this many logits per chunk (P pairs · rows · Tk): 128 MB in fp32


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


def swap_plan(plan: ProbePlan | None) -> ProbePlan | None:
    """Make ``plan`` the active plan inside a running forward (its results are kept) and
    return the plan it replaces (for layer-prefix sharing: a layer run on some batch rows)."""
    prev, _STATE.plan = _STATE.plan, plan
    return prev


def _allowed(attention_mask, bi: torch.Tensor, idx_abs: torch.Tensor, q_off: int, tk: int, device) -> torch.Tensor:
    """Bool or additive mask of the selected (pair, row)s: [P, Qs, Tk]."""
    if attention_mask is None:
        k = torch.arange(tk, device=device)
        return (k[None, :] <= idx_abs[:, None])[None]  # [1, Qs, Tk]: causal
    am = attention_mask[:, 0, idx_abs - q_off, :tk]  # [B|1, Qs, Tk]
    return am[bi] if am.shape[0] > 1 else am


def _explicit_rows(query, key, value, attention_mask, scaling, plan: ProbePlan, bi, hi, idx_abs, q_off, layer):
    """Softmax attention with the plan's biases for the (batch row, head) pairs ``(bi, hi)``
    [P] at query rows ``idx_abs`` [Qs].

    Returns (output [P, Qs, D], probs [P, Qs, Tk]).
    """
    tk = key.shape[2]
    groups = query.shape[1] // key.shape[1]
    q_sel = query[bi, hi][:, idx_abs - q_off].float()  # [P, Qs, D]
    k = key[bi, hi // groups, :tk].float()  # [P, Tk, D] (GQA: query head h reads KV head h // groups)
    v = value[bi, hi // groups, :tk].float()
    logits = torch.matmul(q_sel, k.transpose(-1, -2)) * scaling  # [P, Qs, Tk]
    allowed = _allowed(attention_mask, bi, idx_abs, q_off, tk, query.device)
    if allowed.dtype == torch.bool:
        logits = logits.masked_fill(~allowed, float("-inf"))
    else:
        logits = logits + allowed.float()
    rows_cpu = idx_abs.cpu()
    for iv in plan.interventions:
        heads = iv.heads[:, layer].to(query.device)[bi, hi]  # [P]
        if not heads.any():
            continue
        rows = iv.rows[:, rows_cpu].to(query.device)[bi]  # [P, Qs]
        on = heads[:, None] & rows  # [P, Qs]
        bias = iv.key_bias[:, :tk].to(query.device)[bi]  # [P, Tk]
        logits = torch.where(on[..., None], logits + bias[:, None, :], logits)
    probs = torch.softmax(logits, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)  # a row with every key hidden attends nowhere
    out = torch.matmul(probs, v).to(query.dtype)  # [P, Qs, D]
    return out, probs


def _pairs(plan: ProbePlan, layer: int, B: int, H: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The (batch row, head) pairs this layer recomputes: every pair when the plan captures
    (capture reads all heads), else only the heads an intervention acts on in some row.
    A pair recomputed at a row where nothing acts on it gets sdpa's output back (up to
    rounding), so recomputing only touched pairs changes no result — it only saves work:
    a head-set of ~9% of the heads recomputes ~9% of the (row, head) attention."""
    if plan.captures:
        touched = torch.ones(B, H, dtype=torch.bool)
    else:
        touched = torch.zeros(B, H, dtype=torch.bool)
        for iv in plan.interventions:
            touched |= iv.heads[:, layer]
    bi, hi = touched.nonzero(as_tuple=True)
    return bi.to(device), hi.to(device)


def vheads_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """query [B, H, Tq, D]; key/value [B, Hkv, Tk, D]; returns ([B, Tq, H, D], None)."""
    out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    plan = _STATE.plan
    layer = getattr(module, "layer_idx", None)
    if plan is None or layer is None or not plan.touches_layer(layer):
        return out, None
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    B, H, tq, _ = query.shape
    tk = key.shape[2]
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
    bi, hi = _pairs(plan, layer, B, H, query.device)
    if len(bi) == 0:
        return out, None
    out = out.clone()
    chunk = max(1, min(ROW_CHUNK, CHUNK_ELEMENTS // (len(bi) * tk)))
    for start in range(0, len(idx_all), chunk):
        idx_abs = idx_all[start : start + chunk].to(query.device)
        o, probs = _explicit_rows(query, key, value, attention_mask, scaling, plan, bi, hi, idx_abs, q_off, layer)
        out[bi[:, None], (idx_abs - q_off)[None, :], hi[:, None]] = o  # out [B, Tq, H, D] ← o [P, Qs, D]
        if not plan.captures:
            continue
        probs = probs.view(B, H, len(idx_abs), tk)  # captures recompute every pair, b-major
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
