"""The vheads attention function, registered through transformers' ``AttentionInterface``.

It is set on the language model only. Layers the active plan does not touch (and every
forward with no plan) take transformers' plain sdpa path. A touched layer runs that path
too, then recomputes the (batch row, head) pairs the plan acts on, at the rows it acts on;
no ``[L, H, T, T]`` map ever exists:

- an intervention (mask, steer) acting at every row of a full forward, from the first key
  it biases on, under a causal ∧ key-padding mask (checked against the mask transformers
  passes): the key bias and the padding ride in one extra key feature, so sdpa runs with
  its causal kernel and no mask at all (:func:`_folded_rows`) — mask / steer at all rows,
  most of a study;
- any other intervention (some rows, a prefix cache, a sliding window, a bidirectional
  image block): sdpa over those rows with an fp32 additive mask, built in chunks of rows
  bounded by a logit budget (:func:`_additive_mask`);
- a capture needs the attention weights themselves: a plan that only captures reads them
  for the captured rows in one block per KV head and leaves sdpa's output as it is; with
  interventions too, every pair is recomputed with an explicit softmax (``q_sel @ Kᵀ``).

Every other pair keeps sdpa's output. Then the plan's head-output ablations replace, and
its records read, the result — the per-head slice entering ``o_proj``
(:mod:`vheads.engine._ablate`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from vheads.engine._ablate import head_outputs
from vheads.engine._plan import ProbePlan, first_biased_key
from vheads.engine._prefix import SharedPrefixLayer, owner

NAME = "vheads"
ROW_CHUNK = 512  # at most this many query rows per explicit-softmax chunk
CHUNK_ELEMENTS = 1 << 25  # and at most this many logits per chunk (P pairs · rows · Tk): 128 MB in fp32
#: attention arguments the shared-prefix path does not implement (then the full keys are built)
_OWN_KEYS = ("softcap", "position_bias", "s_aux", "sliding_window")
HIDDEN = -1e9  # a hidden key's logit in the folded path (:func:`_folded_rows`): its weight underflows to exactly 0


@dataclass
class _Active:
    plan: ProbePlan | None = None
    results: dict[str, torch.Tensor] = field(default_factory=dict)


_STATE = _Active()


@contextlib.contextmanager
def active_plan(plan: ProbePlan | None, device=None):
    """Make ``plan`` the plan of the forward passes run inside this block; its captures
    accumulate on ``device`` (the model's: no copy to the host per layer)."""
    prev = _STATE.plan, _STATE.results
    _STATE.plan, _STATE.results = plan, {}
    if plan is not None:
        for c in plan.captures:
            _STATE.results[c.name] = torch.zeros(plan.batch_size, plan.n_layers, plan.n_heads, c.groups.shape[1], device=device)
    try:
        yield _STATE.results
    finally:
        _STATE.plan, _STATE.results = prev


def swap_plan(plan: ProbePlan | None) -> ProbePlan | None:
    """Make ``plan`` the active plan inside a running forward (its results are kept) and
    return the plan it replaces (for layer-prefix sharing: a layer run on some batch rows)."""
    prev, _STATE.plan = _STATE.plan, plan
    return prev


def plain_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' sdpa attention, except on a CPU with grouped KV heads and a mask (a
    prefix cache, padding): there sdpa reads the KV heads as they are (``enable_gqa``)
    where transformers first copies each one for every query head of its group — on
    the suffix rows of a shared prefix that copy cost more than the attention itself
    (``benchmarks/bench_ablation.py``). The same sum in the same order (tests). On other
    devices, or with a position bias or a softcap, transformers' function runs as it is
    (a CUDA kernel with a mask does not take GQA and would fall back to the math kernel)."""
    groups = getattr(module, "num_key_value_groups", 1)
    if (query.device.type != "cpu" or groups <= 1 or attention_mask is None or query.shape[2] == 1
            or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def _model_mask(attention_mask, idx_abs, q_off: int, tk: int) -> torch.Tensor:
    """The model's own mask at query rows ``idx_abs`` [Qs], additive fp32 [B|1, Qs, Tk]
    (causal when the model passes none)."""
    device = idx_abs.device
    if attention_mask is None:
        k = torch.arange(tk, device=device)
        return torch.zeros(1, len(idx_abs), tk, device=device).masked_fill_(k[None, None, :] > idx_abs[None, :, None], float("-inf"))
    am = attention_mask[:, 0, idx_abs - q_off, :tk]  # [B|1, Qs, Tk]
    return torch.zeros(am.shape, device=device).masked_fill_(~am, float("-inf")) if am.dtype == torch.bool else am.float()


def _capture_rows(query, key, attention_mask, scaling, idx_abs, q_off: int, layer: int) -> None:
    """A plan that only captures: the attention weights of every (batch row, head) at query
    rows ``idx_abs`` [Qs], added to the plan's captures; sdpa's output stands as it is. The
    query heads of one KV head are read as one block (no copy of the keys)."""
    B, H, _, D = query.shape
    hkv, tk = key.shape[1], key.shape[2]
    q = _rows_of_heads(query, idx_abs - q_off).float().reshape(B, hkv, -1, D)  # [B, Hkv, g·Qs, D] (GQA: head h reads KV head h // g)
    logits = torch.matmul(q, key.float().transpose(-1, -2)).view(B, H, len(idx_abs), tk) * scaling
    probs = torch.softmax(logits + _model_mask(attention_mask, idx_abs, q_off, tk)[:, None], dim=-1)
    _add_captures(torch.nan_to_num(probs, nan=0.0), idx_abs, layer)


def _span(rows: torch.Tensor) -> slice | None:
    """``rows`` [Qs] (ascending) as a slice when they are consecutive, else None."""
    if len(rows) and int(rows[-1] - rows[0]) == len(rows) - 1:
        return slice(int(rows[0]), int(rows[0]) + len(rows))
    return None


def _rows_of_heads(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``x`` [B, H, T, D] at positions ``rows`` [Qs]: [B, H, Qs, D]."""
    span = _span(rows)
    return x[:, :, span] if span is not None else x[:, :, rows]


def _additive_mask(attention_mask, plan: ProbePlan, bi, hi, idx_abs, q_off: int, tk: int, layer: int) -> torch.Tensor:
    """The additive logit mask of the (batch row, head) pairs ``(bi, hi)`` [P] at query rows
    ``idx_abs`` [Qs]: the model's mask (causal when it passes none; padding, sliding window
    and bidirectional blocks otherwise) plus each intervention's key bias at the rows it acts
    on. fp32 [P, Qs, Tk], built in one pass where each pair's interventions act at every row
    of the chunk or at none (the usual case: a row group shared by the batch)."""
    device = idx_abs.device
    base = _model_mask(attention_mask, idx_abs, q_off, tk)
    if base.shape[0] > 1:
        base = base[bi]  # [P, Qs, Tk]
    bi_c, hi_c, rows_c = bi.cpu(), hi.cpu(), idx_abs.cpu()
    per_pair = torch.zeros(len(bi), tk)  # [P, Tk]: key bias of the interventions acting at every row
    by_row = []  # (on [P, Qs], bias [P, Tk]) of the others
    for iv in plan.interventions:
        heads = iv.heads[:, layer][bi_c, hi_c]  # [P]
        if not heads.any():
            continue
        on = heads[:, None] & iv.rows[:, rows_c][bi_c]  # [P, Qs]
        bias = iv.key_bias[:, :tk][bi_c]  # [P, Tk]
        if bool((on.all(1) | ~on.any(1)).all()):
            per_pair = torch.where(on[:, :1], per_pair + bias, per_pair)
        else:
            by_row.append((on.to(device), bias.to(device)))
    mask = base + per_pair.to(device)[:, None, :]
    for on, bias in by_row:
        mask = torch.where(on[..., None], mask + bias[:, None, :], mask)
    return mask


def _causal_keys(attention_mask, e: int) -> torch.Tensor | None:
    """Which keys each batch row may see, [B|1, e] bool, when the model's mask over the first
    ``e`` positions is causal ∧ key-visible (padding only: no sliding window, no bidirectional
    block) at every real row; else None. Rows at hidden positions are padding, whose output
    no real row reads, so they are not compared."""
    if attention_mask.dtype != torch.bool or attention_mask.shape[1] != 1:
        return None
    am = attention_mask[:, 0, :e, :e]  # [B|1, e, e]
    visible = am.diagonal(dim1=-2, dim2=-1)  # [B|1, e]: a real token sees itself; a padded key is hidden from every row
    causal = torch.ones(e, e, dtype=torch.bool, device=am.device).tril()
    agree = (am == (causal[None] & visible[:, None, :])).all(-1) | ~visible  # [B|1, e]
    return visible if bool(agree.all()) else None


def _folded_bias(attention_mask, is_causal: bool, plan: ProbePlan, bi, hi, e: int, layer: int) -> torch.Tensor | None:
    """The whole additive mask of the pairs ``(bi, hi)`` [P] over rows and keys [0, e) as one
    key bias per pair, [P, e] (hidden keys at :data:`HIDDEN`), when it is one: the model's
    mask is causal ∧ key-visible, and each intervention acting on a pair acts at every row
    from the first key it biases on (rows before it cannot see those keys). Else None."""
    visible = None
    if attention_mask is not None:
        visible = _causal_keys(attention_mask, e)
        if visible is None:
            return None
    elif not is_causal:
        return None
    q = torch.arange(e)
    acting = []  # (heads [B, H], key bias [B, e]) of each intervention acting in this layer
    for iv in plan.interventions:
        heads = iv.heads[:, layer]
        if not heads.any():
            continue
        kb = iv.key_bias[:, :e]
        first = first_biased_key(kb)  # [B]
        if not bool((iv.rows[:, :e] | (q[None] < first[:, None]) | ~heads.any(1)[:, None]).all()):
            return None
        acting.append((heads, kb))
    bi_c = bi.cpu()
    if len(acting) == 1:  # every touched pair is this intervention's: one bias per batch row
        bias = acting[0][1].clamp(min=HIDDEN)[bi_c]
    else:
        hi_c = hi.cpu()
        bias = torch.zeros(len(bi), e)
        for heads, kb in acting:
            bias = torch.where(heads[bi_c, hi_c][:, None], bias + kb[bi_c], bias)
        bias = bias.clamp(min=HIDDEN)
    bias = bias.to(bi.device)
    if visible is not None:
        bias = bias + torch.where(visible[bi] if visible.shape[0] > 1 else visible, 0.0, HIDDEN)
    return bias


def _folded_rows(query, key, value, bi, hi, bias, scaling) -> torch.Tensor:
    """Attention of the pairs ``(bi, hi)`` at rows [0, e) under a causal mask and the key
    bias ``bias`` [P, e]: the bias rides in an extra feature of the keys (the queries
    carry 1 there), so sdpa runs with its causal kernel and no [e, e] mask exists.
    (Features padded by 8 keep the fused kernels' head-size rules.) fp32 [P, e, D]."""
    P, e = bias.shape
    D = query.shape[-1]
    groups = query.shape[1] // key.shape[1]
    pad = query.new_zeros(P, e, 8, dtype=torch.float32)
    q = torch.cat([query[bi, hi, :e].float(), pad], -1)
    k = torch.cat([key[bi, hi // groups, :e].float(), pad], -1)
    v = torch.cat([value[bi, hi // groups, :e].float(), pad], -1)
    q[..., D] = 1.0
    k[..., D] = bias / scaling
    out = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], is_causal=True, scale=scaling)[:, 0, :, :D]
    first = torch.where(bias > HIDDEN / 2, torch.arange(e, device=bias.device), e).amin(1)  # [P]: the first key left visible
    if bool((first > 0).any()):  # rows before it see no key: they attend nowhere
        out = out.masked_fill((torch.arange(e, device=bias.device)[None] < first[:, None])[..., None], 0.0)
    return out


def _pair_rows(x: torch.Tensor, bi, hi, rows) -> torch.Tensor:
    """``x`` [B, H, T, D] at pairs ``(bi, hi)`` [P] and positions ``rows`` [Qs]: fp32 [P, Qs, D]."""
    span = _span(rows)
    return (x[bi, hi, span] if span is not None else x[bi[:, None], hi[:, None], rows[None, :]]).float()


def _masked_rows(q_sel, k_sel, v_sel, mask, scaling) -> torch.Tensor:
    """sdpa of one head per pair: ``q_sel`` [P, Qs, D], ``k_sel``/``v_sel`` [P, Tk, D],
    ``mask`` [P, Qs, Tk] additive. A row with every key hidden attends nowhere (output 0)."""
    out = F.scaled_dot_product_attention(q_sel[:, None], k_sel[:, None], v_sel[:, None], attn_mask=mask[:, None], scale=scaling)[:, 0]
    return torch.nan_to_num(out, nan=0.0)


def _explicit_rows(q_sel, k_sel, v_sel, mask, scaling) -> tuple[torch.Tensor, torch.Tensor]:
    """The same as :func:`_masked_rows` with an explicit softmax, for captures, which read
    the attention weights: (output [P, Qs, D], probs [P, Qs, Tk])."""
    logits = torch.matmul(q_sel, k_sel.transpose(-1, -2)) * scaling + mask  # [P, Qs, Tk]
    probs = torch.nan_to_num(torch.softmax(logits, dim=-1), nan=0.0)  # a row with every key hidden attends nowhere
    return torch.matmul(probs, v_sel), probs


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


def _local_rows(plan: ProbePlan, layer: int, q_off: int, tq: int) -> torch.Tensor:
    """The absolute query rows of this forward that layer ``layer`` recomputes: where an
    intervention acts on some head of the layer, or a capture reads. [Qs] long."""
    local = torch.zeros(plan.interventions[0].rows.shape[1] if plan.interventions else plan.captures[0].rows.shape[1], dtype=torch.bool)
    for iv in plan.interventions:
        if iv.heads[:, layer].any():
            local |= (iv.rows & iv.heads[:, layer].any(1)[:, None]).any(0)
    for c in plan.captures:
        local |= c.rows.any(0)
    local[:q_off] = False
    local[q_off + tq :] = False
    return local.nonzero().flatten()


def vheads_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """query [B, H, Tq, D]; key/value [B, Hkv, Tk, D]; returns ([B, Tq, H, D], None): the
    attention under the plan's interventions and captures, then its head-output ablations
    and records (:func:`vheads.engine._ablate.head_outputs`)."""
    plan = _STATE.plan
    layer = getattr(module, "layer_idx", None)
    shared = owner(key)  # a suffix pass of prefix reuse: ``key`` holds the suffix keys only
    if shared is not None and (dropout != 0.0 or any(kwargs.get(k) is not None for k in _OWN_KEYS) or (plan is not None and plan.captures)):
        key, value = shared.full()  # a capture reads the weights over all keys, by absolute position
        shared = None
    out, weights = _attend(module, query, key, value, attention_mask, dropout, scaling, shared=shared, **kwargs)
    if plan is not None and layer is not None and (plan.ablations or plan.records):
        tk = key.shape[2] if shared is None else shared.get_seq_length()
        out = head_outputs(plan, layer, out, tk - query.shape[2], _STATE.results)
    return out, weights


def _attend(module, query, key, value, attention_mask, dropout=0.0, scaling=None, shared: SharedPrefixLayer | None = None, **kwargs):
    """The attention of every (batch row, head) under the plan's interventions and captures.
    With ``shared`` (a suffix pass of prefix reuse, no capture) ``key``/``value`` are the
    suffix keys and the prefix is read from ``shared`` (:mod:`vheads.engine._prefix`)."""
    plan = _STATE.plan
    layer = getattr(module, "layer_idx", None)
    if shared is not None:
        base = shared.attend(query, attention_mask, query.shape[-1] ** -0.5 if scaling is None else scaling)
        if base is None:  # not this path (a sliding window, another device): the full keys
            key, value = shared.full()
            shared = None

    def plain():
        if shared is not None:
            return base, None
        return plain_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)

    if plan is None or layer is None or not plan.touches_layer(layer):
        return plain()
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    B, H, tq, _ = query.shape
    tk = key.shape[2] if shared is None else shared.get_seq_length()
    q_off = tk - tq  # absolute position of query row 0 (a prefix cache sits before it)
    idx_all = _local_rows(plan, layer, q_off, tq)
    bi, hi = _pairs(plan, layer, B, H, query.device)
    if len(idx_all) == 0 or len(bi) == 0:
        return plain()
    out, _ = plain()
    if not plan.interventions:
        chunk = max(1, min(ROW_CHUNK, CHUNK_ELEMENTS // (B * H * tk)))
        for start in range(0, len(idx_all), chunk):
            _capture_rows(query, key, attention_mask, scaling, idx_all[start : start + chunk].to(query.device), q_off, layer)
        return out, None
    out = out.clone()
    if not plan.captures and q_off == 0:
        e = int(idx_all[-1]) + 1
        is_causal = kwargs.get("is_causal")
        bias = _folded_bias(attention_mask, getattr(module, "is_causal", True) if is_causal is None else is_causal, plan, bi, hi, e, layer)
        if bias is not None:
            out[bi, :e, hi] = _folded_rows(query, key, value, bi, hi, bias, scaling).to(out.dtype)  # out [B, Tq, H, D] ← [P, e, D]
            return out, None
    groups = H // key.shape[1]
    if shared is None:
        k_sel = key[bi, hi // groups].float()  # [P, Tk, D] (GQA: query head h reads KV head h // groups)
        v_sel = value[bi, hi // groups].float()
    else:
        k_sel, v_sel = (x.float() for x in shared.pair_keys(bi, hi // groups))
    rows_per_chunk = CHUNK_ELEMENTS // (len(bi) * tk)
    chunk = max(1, min(ROW_CHUNK, rows_per_chunk) if plan.captures else rows_per_chunk)
    for start in range(0, len(idx_all), chunk):
        idx_abs = idx_all[start : start + chunk].to(query.device)
        q_sel = _pair_rows(query, bi, hi, idx_abs - q_off)  # [P, Qs, D]
        mask = _additive_mask(attention_mask, plan, bi, hi, idx_abs, q_off, tk, layer)
        if not plan.captures:
            o = _masked_rows(q_sel, k_sel, v_sel, mask, scaling)
        else:
            o, probs = _explicit_rows(q_sel, k_sel, v_sel, mask, scaling)
            _add_captures(probs.view(B, H, len(idx_abs), tk), idx_abs, layer)  # captures recompute every pair, b-major
        out[bi[:, None], (idx_abs - q_off)[None, :], hi[:, None]] = o.to(out.dtype)  # out [B, Tq, H, D] ← o [P, Qs, D]
    return out, None


def capture_rows(probs: torch.Tensor, groups: torch.Tensor, norm: torch.Tensor | None = None, stat: str = "mass") -> torch.Tensor:
    """What each query row contributes to a :class:`Capture`: ``probs [B, H, Qs, Tk]``
    (post-softmax attention), ``groups [B, G, Tk]`` bool, ``norm [B, Tk]`` bool or None →
    ``[B, H, Qs, G]`` = ``Σ_{t ∈ group} A'[q,t]`` with ``A'`` as :class:`Capture` defines it
    (renormalized over ``norm``; one-hot on the first maximal key for ``stat="hit"``)."""
    if norm is not None:
        probs = probs * norm[:, None, None, :].to(probs.dtype)
        total = probs.sum(-1, keepdim=True)
        probs = torch.where(total > 0, probs / total.clamp_min(torch.finfo(probs.dtype).tiny), 0.0)
    if stat == "hit":
        probs = torch.nn.functional.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)  # ties: first max
    return torch.einsum("bhqt,bgt->bhqg", probs, groups.to(probs.dtype))


def _add_captures(probs: torch.Tensor, idx_abs: torch.Tensor, layer: int) -> None:
    """Add the region mass of ``probs`` [B, H, Qs, Tk] (query rows ``idx_abs``) to every
    capture of the active plan."""
    tk = probs.shape[-1]
    for c in _STATE.plan.captures:
        w = c.rows[:, idx_abs.cpu()].float().to(probs.device)  # [B, Qs]
        if not w.any():
            continue
        norm = None if c.norm is None else c.norm[:, :tk].to(probs.device)
        per_row = capture_rows(probs, c.groups[:, :, :tk].to(probs.device), norm, c.stat)  # [B, H, Qs, G]
        n_rows = c.rows.sum(1).float().to(probs.device)  # [B]
        mass = torch.einsum("bhqg,bq->bhg", per_row, w) / n_rows[:, None, None]
        acc = _STATE.results[c.name]
        acc[:, layer] += mass.float().to(acc.device)


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
