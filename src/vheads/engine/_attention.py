"""The vheads attention function, registered through transformers' ``AttentionInterface``.

It is set on the language model only. Layers the active plan does not touch (and every
forward with no plan) take transformers' plain sdpa path. A touched layer runs that path
too, then recomputes the (batch row, head) pairs the plan acts on, at the rows it acts on;
no ``[L, H, T, T]`` map ever exists:

- an intervention (mask, steer) acting at every row of a full forward, from the first key
  it biases on, under a causal ∧ key-padding mask (the mask transformers passes is checked
  once per forward, when it is built: :func:`note_mask`): the key bias and the padding ride in one extra key feature, so sdpa runs with
  its causal kernel and no mask at all (:func:`_folded_rows`) — mask / steer at all rows,
  most of a study;
- an intervention that leaves each pair it acts on few keys with a finite bias (a mask
  hiding the image from every row it acts at: the text keys around the image), at rows of a
  full forward or of a suffix pass (each batch row its own rows: items of different lengths): those keys gathered, sdpa over them alone under the
  model's own mask at them (:func:`_gathered_rows`) — mask at question / all rows;
- any other intervention (some rows, a prefix cache, a sliding window, a bidirectional
  image block): sdpa over those rows with an fp32 additive mask, built in chunks of rows
  bounded by a logit budget (:func:`_additive_mask`);
- a capture needs the attention weights themselves: a plan that only captures reads them
  for the captured rows in one block per KV head and leaves sdpa's output as it is; with
  interventions too, every pair is recomputed with an explicit softmax (``q_sel @ Kᵀ``).

Every other pair keeps sdpa's output. Then the plan's head-output ablations replace, and
its records read, the result — the per-head slice entering ``o_proj``
(:mod:`vheads.engine._ablate`). Which pairs, rows and paths each layer takes is worked out
on the host, and the plan moved to the device, once per forward before the layers run
(:mod:`vheads.engine._schedule`): the layer loop queues device work only, with no
host–device sync. The fp32 working sets (pairs' keys and values, the folded path's
extended q / k / v, a chunk's logits) are chunked by the byte budget
:data:`vheads.engine._schedule.CHUNK_BYTES`.
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
from vheads.engine._captures import add_captures, capture_layer_rows, capture_rows, model_mask  # noqa: F401 - capture_rows re-exported
from vheads.engine._plan import ProbePlan
from vheads.engine._prefix import SharedPrefixLayer, owner
from vheads.engine._prefix import note_mask as note_prefix_mask
from vheads.engine._short_attention import applies as short_attention_applies
from vheads.engine._short_attention import MAX_KEYS as SHORT_KEYS
from vheads.engine._short_attention import short_attention, short_pairs
from vheads.engine._schedule import _F32, CHUNK_BYTES, ROW_CHUNK, Chunk, LayerWork, Schedule, on_device, pair_chunks  # noqa: F401 - re-exported

NAME = "vheads"
CHUNK_ELEMENTS = 1 << 25  # at most this many logits per chunk of the AtP pass (vheads.causal); the engine's: CHUNK_BYTES
#: attention arguments the shared-prefix path does not implement (then the full keys are built)
_OWN_KEYS = ("softcap", "position_bias", "s_aux", "sliding_window")
HIDDEN = -1e9  # a hidden key's logit in the folded path (:func:`_folded_rows`): its weight underflows to exactly 0


@dataclass
class _Active:
    plan: ProbePlan | None = None
    results: dict[str, torch.Tensor] = field(default_factory=dict)
    #: (id(plan), q_off, device) -> (plan, its :class:`Schedule`), for this forward
    schedules: dict = field(default_factory=dict)
    #: id(mask) -> (mask, which keys each row may see [B|1, T] when it is causal ∧ key-visible, else None)
    masks: dict = field(default_factory=dict)
    #: id(tensor) -> (tensor, its copy on a device): a plan's large tensors shared by cut plans, moved once
    moved: dict = field(default_factory=dict)


_STATE = _Active()


@contextlib.contextmanager
def active_plan(plan: ProbePlan | None, device=None, q_off: int | None = None):
    """Make ``plan`` the plan of the forward passes run inside this block; its captures
    accumulate on ``device`` (the model's: no copy to the host per layer). With ``q_off``
    (the absolute position of the forward's first query row: 0, or the prefix length of a
    suffix pass) the plan's work is worked out and moved to ``device`` now, before the
    layers run (:mod:`vheads.engine._schedule`); else at the first layer it touches."""
    prev = _STATE.plan, _STATE.results, _STATE.schedules, _STATE.masks, _STATE.moved
    _STATE.plan, _STATE.results, _STATE.schedules, _STATE.masks, _STATE.moved = plan, {}, {}, {}, {}
    if plan is not None:
        for c in plan.captures:
            _STATE.results[c.name] = torch.zeros(plan.batch_size, plan.n_layers, plan.n_heads, c.groups.shape[1], device=device)
        if q_off is not None and device is not None:
            prepare(plan, q_off, device)
    try:
        yield _STATE.results
    finally:
        _STATE.plan, _STATE.results, _STATE.schedules, _STATE.masks, _STATE.moved = prev


def swap_plan(plan: ProbePlan | None) -> ProbePlan | None:
    """Make ``plan`` the active plan inside a running forward (its results are kept) and
    return the plan it replaces (for layer-prefix sharing: a layer run on some batch rows)."""
    prev, _STATE.plan = _STATE.plan, plan
    return prev


def prepare(plan: ProbePlan, q_off: int, device, layers=None) -> Schedule:
    """Work out ``plan``'s work in this forward (query row 0 at absolute position ``q_off``)
    for ``layers`` (None: all) and move it to ``device``, before the layers run."""
    device = torch.empty(0, device=device).device  # "cuda" -> "cuda:0", as a tensor's device reads
    key = (id(plan), q_off, device)
    hit = _STATE.schedules.get(key)
    if hit is None or hit[0] is not plan:
        hit = _STATE.schedules[key] = (plan, Schedule(plan, q_off, device, layers, _STATE.moved))
    return hit[1]


def _schedule(plan: ProbePlan, q_off: int, device) -> Schedule:
    hit = _STATE.schedules.get((id(plan), q_off, device))
    return hit[1] if hit is not None and hit[0] is plan else prepare(plan, q_off, device, layers=())


def note_mask(attention_mask: torch.Tensor) -> torch.Tensor | None:
    """Check once per forward whether the model's mask ``attention_mask`` [B|1, 1, T, T] is
    causal ∧ key-visible (padding only) and remember it: the keys each row may see, [B|1, T],
    or None. Called when transformers builds the mask (:func:`_mask_function`), before the
    layers run, so no layer compares it again; a mask not seen there is checked at its first use."""
    hit = _STATE.masks.get(id(attention_mask))
    if hit is not None and hit[0] is attention_mask:
        return hit[1]
    visible = None
    if attention_mask.dim() == 4 and attention_mask.shape[-1] == attention_mask.shape[-2]:
        visible = _causal_keys(attention_mask, attention_mask.shape[-1])
    _STATE.masks[id(attention_mask)] = (attention_mask, visible)
    return visible


def note_rows_of(sub: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor) -> None:
    """``sub`` is ``mask`` cut to batch rows ``keep`` (layer sharing): it is causal ∧
    key-visible where ``mask`` is, row by row (no new check)."""
    hit = _STATE.masks.get(id(mask))
    if hit is None or hit[0] is not mask or sub is mask:
        return
    visible = hit[1]
    if visible is not None and visible.shape[0] > 1:
        visible = visible.index_select(0, keep)
    _STATE.masks[id(sub)] = (sub, visible)


def _may_fold() -> bool:
    """Whether a layer of this forward may take the folded path (it reads the mask's check):
    some prepared plan allows it in some layer; True when none was prepared (the check then
    runs at the first layer that needs it anyway)."""
    if not _STATE.schedules:
        return True
    return any(s.folds for _, s in _STATE.schedules.values())


def _mask_function(*args, **kwargs):
    """transformers' sdpa mask, checked once when it is built, before the layers run: a
    suffix pass's mask over its prefix (:func:`vheads.engine._prefix.note_mask`), a full
    forward's when the plan intervenes (:func:`note_mask`, for the folded path)."""
    mask = sdpa_mask(*args, **kwargs)
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.dim() == 4:
        plan = _STATE.plan
        if mask.shape[-1] != mask.shape[-2]:
            note_prefix_mask(mask)
        elif plan is not None and plan.interventions and not plan.captures and _may_fold():
            note_mask(mask)
    return mask


def plain_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' sdpa attention, except on a CPU: short fp32 prompts (the tiny model's)
    take two matmuls and a softmax (:mod:`vheads.engine._short_attention`, about 2× sdpa's
    flash kernel there); longer ones with grouped KV heads and a mask (a prefix cache,
    padding) take sdpa reading the KV heads as they are (``enable_gqa``) where transformers
    first copies each one for every query head of its group — on the suffix rows of a
    shared prefix that copy cost more than the attention itself (``benchmarks/bench_ablation.py``).
    Both agree with transformers' function to float rounding (tests). On other devices, or
    with a position bias, a softcap or sinks, transformers' function runs as it is (a CUDA
    kernel with a mask does not take GQA and would fall back to the math kernel)."""
    groups = getattr(module, "num_key_value_groups", 1)
    plain = all(kwargs.get(k) is None for k in ("position_bias", "softcap", "s_aux")) and not kwargs.get("output_attentions")
    if plain and short_attention_applies(query, key, attention_mask, dropout):
        is_causal = kwargs.get("is_causal")
        is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
        if attention_mask is not None or not is_causal or query.shape[2] == key.shape[2]:
            scale = query.shape[-1] ** -0.5 if scaling is None else scaling
            return short_attention(query, key, value, attention_mask, scale, bool(is_causal)).transpose(1, 2).contiguous(), None
    if query.device.type != "cpu" or groups <= 1 or attention_mask is None or query.shape[2] == 1 or not plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def _additive_mask(attention_mask, work: LayerWork, pairs: slice, per_pair: torch.Tensor, chunk: Chunk, q_off: int, tk: int) -> torch.Tensor:
    """The additive logit mask of the layer's pairs ``pairs`` at the chunk's query rows: the
    model's mask (causal when it passes none; padding, sliding window and bidirectional
    blocks otherwise) plus each intervention's key bias at the rows it acts on — those acting
    at every row of the layer already summed in ``per_pair`` [p, Tk] (:func:`_pair_bias`).
    fp32 [p, Qs, Tk]."""
    bi = work.bi[pairs]
    base = model_mask(attention_mask, chunk.rows, q_off, tk)
    if base.shape[0] > 1:
        base = base[bi]  # [p, Qs, Tk]
    mask = base + per_pair[:, None, :]
    for a in work.acting:
        if a.on_rows is not None:
            on = a.on_rows[pairs, chunk.start : chunk.stop]  # [p, Qs]
            mask = torch.where(on[..., None], mask + a.key_bias[bi, :tk][:, None, :], mask)
    return mask


def _pair_bias(work: LayerWork, tk: int) -> torch.Tensor:
    """The key bias of the interventions acting on each of the layer's pairs at every one of
    its rows, summed: fp32 [P, Tk] (once per layer, for every chunk)."""
    per_pair = torch.zeros(len(work.bi), tk, device=work.bi.device)
    for a in work.acting:
        if a.on_pair is not None:
            per_pair = torch.where(a.on_pair[:, None], per_pair + a.key_bias[work.bi, :tk], per_pair)
    return per_pair


def _causal_keys(attention_mask, e: int) -> torch.Tensor | None:
    """Which keys each batch row may see, [B|1, e] bool, when the model's mask over the first
    ``e`` positions is causal ∧ key-visible (padding only: no sliding window, no bidirectional
    block) at every real row; else None. Rows at hidden positions are padding, whose output
    no real row reads, so they are not compared. One host–device sync: run once per forward
    (:func:`note_mask`)."""
    if attention_mask.dtype != torch.bool or attention_mask.shape[1] != 1:
        return None
    am = attention_mask[:, 0, :e, :e]  # [B|1, e, e]
    visible = am.diagonal(dim1=-2, dim2=-1)  # [B|1, e]: a real token sees itself; a padded key is hidden from every row
    causal = torch.ones(e, e, dtype=torch.bool, device=am.device).tril()
    agree = (am == (causal[None] & visible[:, None, :])).all(-1) | ~visible  # [B|1, e]
    return visible if bool(agree.all()) else None


def _folded_bias(work: LayerWork, visible: torch.Tensor | None, e: int) -> torch.Tensor:
    """The whole additive mask of the layer's pairs over rows and keys [0, e) as one key bias
    per pair, [P, e] (hidden keys at :data:`HIDDEN`): the plan allows it (each intervention
    acting on a pair acts at every row from the first key it biases on, ``work.folded_e``)
    and the model's mask is causal ∧ key-visible (``visible`` [B|1, ≥e], None: causal)."""
    bi = work.bi
    if len(work.acting) == 1:  # every touched pair is this intervention's: one bias per batch row
        bias = work.acting[0].key_bias[bi, :e].clamp(min=HIDDEN)
    else:
        bias = torch.zeros(len(bi), e, device=bi.device)
        for a in work.acting:
            bias = torch.where(a.heads[:, None], bias + a.key_bias[bi, :e], bias)
        bias = bias.clamp(min=HIDDEN)
    if visible is not None:
        bias = bias + torch.where(visible[bi, :e] if visible.shape[0] > 1 else visible[:, :e], 0.0, HIDDEN)
    return bias


def _folded_rows(query, key, value, bi, hi, bias, scaling) -> torch.Tensor:
    """Attention of the pairs ``(bi, hi)`` at rows [0, e) under a causal mask and the key
    bias ``bias`` [P, e]: the bias rides in an extra feature of the keys (the queries
    carry 1 there), so sdpa runs with its causal kernel and no [e, e] mask exists.
    (Features padded by 8 keep the fused kernels' head-size rules.) On a CPU with at most
    :data:`~vheads.engine._short_attention.MAX_KEYS` rows, two matmuls and a softmax instead
    (:func:`~vheads.engine._short_attention.short_pairs`, faster there). fp32 [P, e, D]."""
    P, e = bias.shape
    D = query.shape[-1]
    groups = query.shape[1] // key.shape[1]
    pos = torch.arange(e, device=bias.device)
    first = torch.where(bias > HIDDEN / 2, pos, e).amin(1)  # [P]
    if query.device.type == "cpu" and e <= SHORT_KEYS:  # two matmuls and a softmax (vheads.engine._short_attention)
        out = short_pairs(query[bi, hi, :e].float(), key[bi, hi // groups, :e].float(), value[bi, hi // groups, :e].float(), bias, scaling)
        return out.masked_fill((pos[None] < first[:, None])[..., None], 0.0)
    pad = query.new_zeros(P, e, 8, dtype=torch.float32)
    q = torch.cat([query[bi, hi, :e].float(), pad], -1)
    k = torch.cat([key[bi, hi // groups, :e].float(), pad], -1)
    v = torch.cat([value[bi, hi // groups, :e].float(), pad], -1)
    q[..., D] = 1.0
    k[..., D] = bias / scaling
    out = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], is_causal=True, scale=scaling)[:, 0, :, :D]
    # rows before the first key left visible see no key: they attend nowhere (not tested on the host: no sync)
    return out.masked_fill((pos[None] < first[:, None])[..., None], 0.0)


def _gathered_mask(attention_mask, bi, idx, chunk: Chunk, q_off: int, bias: torch.Tensor) -> torch.Tensor:
    """The additive mask of pairs (batch rows ``bi`` [p]) at the chunk's query rows over their
    gathered keys ``idx`` [p, n]: the model's own mask at those (row, key) cells (causal when
    it passes none) plus the keys' bias ``bias`` [p, n]. fp32 [p, Qs, n]."""
    if attention_mask is None:
        allowed = idx[:, None, :] <= chunk.rows[None, :, None]
        return torch.where(allowed, bias[:, None, :], float("-inf"))
    am = attention_mask[:, 0]  # [B|1, Tq, Tk]
    b = bi if am.shape[0] > 1 else torch.zeros_like(bi)
    cells = am[b[:, None, None], (chunk.rows - q_off)[None, :, None], idx[:, None, :]]  # [p, Qs, n]
    if cells.dtype == torch.bool:
        return torch.where(cells, bias[:, None, :], float("-inf"))
    return cells.float() + bias[:, None, :]


def _gathered_rows(query, key, value, attention_mask, work: LayerWork, shared, scaling, q_off: int, out: torch.Tensor) -> None:
    """Recompute the layer's pairs over the few keys each may see (``work.gathered``, the
    other keys' bias −inf at every row the pair is recomputed at): those keys' queries, keys
    and values gathered, sdpa over them under the model's own mask there; the same softmax as
    over every key, whose hidden keys weigh exactly 0. ``out`` [B, Tq, H, D] ← the pairs' rows."""
    D = query.shape[-1]
    hkv = key.shape[1] if shared is None else shared.suffix_keys.shape[1]
    groups = query.shape[1] // hkv
    idx_all, bias_all = work.gathered.idx, work.gathered.bias
    n = idx_all.shape[1]
    rows = max(c.stop - c.start for c in work.chunks)
    for s in pair_chunks(len(work.bi), (2 * n * D + rows * (n + 2 * D)) * _F32):  # keys and values; a chunk's logits, queries, outputs
        bi, hi, idx = work.bi[s], work.hi[s], idx_all[s]
        if shared is None:
            kh = (hi // groups)[:, None]
            k_sel, v_sel = key[bi[:, None], kh, idx].float(), value[bi[:, None], kh, idx].float()  # [p, n, D]
        else:
            k_sel, v_sel = (x.float() for x in shared.gather_keys(bi, hi // groups, idx))
        for chunk in work.chunks:
            q_sel = _pair_rows(query, bi, hi, chunk.local)  # [p, Qs, D]
            mask = _gathered_mask(attention_mask, bi, idx, chunk, q_off, bias_all[s])
            o = _masked_rows(q_sel, k_sel, v_sel, mask, scaling)
            if work.gathered.write is not None:  # rows a pair is not acted on at keep sdpa's output
                keep = ~work.gathered.write[s, chunk.start : chunk.stop, None]
                o = torch.where(keep, _out_rows(out, bi, hi, chunk.local), o)
            _put_rows(out, bi, hi, chunk.local, o)


def _pair_rows(x: torch.Tensor, bi, hi, local) -> torch.Tensor:
    """``x`` [B, H, T, D] at pairs ``(bi, hi)`` [P] and positions ``local`` (a slice, or [Qs]
    long): fp32 [P, Qs, D]."""
    return (x[bi, hi, local] if isinstance(local, slice) else x[bi[:, None], hi[:, None], local[None, :]]).float()


def _out_rows(out: torch.Tensor, bi, hi, local) -> torch.Tensor:
    """``out`` [B, Tq, H, D] at pairs ``(bi, hi)`` [P] and rows ``local``: [P, Qs, D]."""
    return out[bi, local, hi] if isinstance(local, slice) else out[bi[:, None], local[None, :], hi[:, None]]


def _put_rows(out: torch.Tensor, bi, hi, local, o: torch.Tensor) -> None:
    """``out`` [B, Tq, H, D] at pairs ``(bi, hi)`` [P] and rows ``local`` ← ``o`` [P, Qs, D]."""
    if isinstance(local, slice):
        out[bi, local, hi] = o.to(out.dtype)
    else:
        out[bi[:, None], local[None, :], hi[:, None]] = o.to(out.dtype)


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
        out = head_outputs(_schedule(plan, tk - query.shape[2], query.device), layer, out, _STATE.results)
    return out, weights


def _attend(module, query, key, value, attention_mask, dropout=0.0, scaling=None, shared: SharedPrefixLayer | None = None, **kwargs):
    """The attention of every (batch row, head) under the plan's interventions and captures.
    With ``shared`` (a suffix pass of prefix reuse, no capture) ``key``/``value`` are the
    suffix keys and the prefix is read from ``shared`` (:mod:`vheads.engine._prefix`).
    Every decision on the host was taken before the layers ran (:mod:`._schedule`): here
    only device work is queued."""
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

    if plan is None or layer is None:
        return plain()
    B, H, tq, D = query.shape
    tk = key.shape[2] if shared is None else shared.get_seq_length()
    q_off = tk - tq  # absolute position of query row 0 (a prefix cache sits before it)
    sched = _schedule(plan, q_off, query.device)
    work = sched.layer(layer)
    if work is None:
        return plain()
    if scaling is None:
        scaling = D ** -0.5
    out, _ = plain()
    if not work.acting:  # captures only: sdpa's output stands, the weights are read
        key_f32 = key.float()  # cast once per layer, read by every chunk
        for chunk in work.chunks:
            capture_layer_rows(query, key_f32, attention_mask, scaling, chunk, q_off, layer, sched, _STATE.results)
        return out, None
    if torch.is_grad_enabled():  # the fused kernel's output may be ``out`` itself, saved for its backward
        out = out.clone()
    if work.gathered is not None:
        _gathered_rows(query, key, value, attention_mask, work, shared, scaling, q_off, out)
        return out, None
    P = len(work.bi)
    if work.folded_e is not None:
        is_causal = kwargs.get("is_causal")
        is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
        visible = None if attention_mask is None else note_mask(attention_mask)  # checked once per forward
        if (is_causal if attention_mask is None else visible is not None):
            e = work.folded_e
            bias = _folded_bias(work, visible, e)  # [P, e]
            for s in pair_chunks(P, e * (4 * D + 3 * 8) * _F32):  # q, k, v with their 8 extra features, and the output
                bi, hi = work.bi[s], work.hi[s]
                out[bi, :e, hi] = _folded_rows(query, key, value, bi, hi, bias[s], scaling).to(out.dtype)  # out [B, Tq, H, D] ← [p, e, D]
            return out, None
    groups = H // key.shape[1]
    per_pair = _pair_bias(work, tk)  # [P, Tk]
    # pairs in chunks whose fp32 keys and values fit the budget (a capture: whole batch rows of H pairs)
    for s in pair_chunks(P, 2 * tk * D * _F32, H if plan.captures else 1):
        bi, hi = work.bi[s], work.hi[s]
        if shared is None:
            k_sel = key[bi, hi // groups].float()  # [p, Tk, D] (GQA: query head h reads KV head h // groups)
            v_sel = value[bi, hi // groups].float()
        else:
            k_sel, v_sel = (x.float() for x in shared.pair_keys(bi, hi // groups))
        for chunk in work.chunks:
            q_sel = _pair_rows(query, bi, hi, chunk.local)  # [p, Qs, D]
            mask = _additive_mask(attention_mask, work, s, per_pair[s], chunk, q_off, tk)
            if not plan.captures:
                o = _masked_rows(q_sel, k_sel, v_sel, mask, scaling)
            else:
                o, probs = _explicit_rows(q_sel, k_sel, v_sel, mask, scaling)
                rows = slice(s.start // H, s.stop // H)  # captures recompute every pair, b-major
                add_captures(probs.view(rows.stop - rows.start, H, chunk.stop - chunk.start, tk), chunk, layer, sched, rows, _STATE.results)
            _put_rows(out, bi, hi, chunk.local, o)  # out [B, Tq, H, D] ← o [p, Qs, D]
    return out, None


def register() -> None:
    """Register the attention function and its mask function (idempotent).

    The mask function matters: without it transformers treats an unknown attention name as
    needing no mask and runs with ``attention_mask=None`` — no causality, no padding.
    """
    AttentionInterface.register(NAME, vheads_attention)
    AttentionMaskInterface.register(NAME, _mask_function)


def install(model) -> None:
    """Use the vheads attention on the language model only; the vision tower keeps sdpa."""
    register()
    subs = {}
    for name in getattr(model.config, "sub_configs", {}) or {}:
        subs[name] = NAME if name == "text_config" else "sdpa"
    if "text_config" not in subs:
        raise ValueError(f"{type(model).__name__} has no text_config sub-config; is it a VLM?")
    model.set_attn_implementation(subs)
