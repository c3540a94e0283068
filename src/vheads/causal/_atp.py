"""Attribution patching (AtP, AtP*): every head's causal effect from one forward and one backward pass per item.

The exact causal map (DESIGN.md "Causal map") ablates each head alone, L·H forwards per
item. AtP estimates all of it at once. For an item, write m(α) for the metric of the key
letter at the last prompt row (``p4``, ``logprob`` or ``logit-diff``) when every head h's
attention output o_h [T, D] — what the attention function returns, the slice of the input
of ``o_proj`` — becomes ``o_h + α_h · Δ_h`` at the ablated rows, ``Δ_h = o_h^abl − o_h``:

- ``zero``: ``o_h^abl = 0``, so ``Δ_h = −o_h``;
- ``attention`` (the default, DESIGN.md "Mask"): ``o_h^abl`` is the head's output with its
  logits to the hidden keys at −∞ and the softmax renormalised over the keys left,
  computed exactly for every head in the same forward from the layer's own q, k, v (the
  AtP* form: the change of the attention pattern is exact, its effect downstream is
  linearised).

Δ is recomputed from each layer's inputs in every forward and only layers above h see a
change of h, so m(e_h) — α one at h, zero elsewhere — is exactly the metric with h alone
ablated, and ``drop_h = m(0) − m(e_h) ≈ −∂m/∂α_h = −Σ_rows ⟨∂m/∂o_h, Δ_h⟩``: one backward
gives every head's estimate. NCS: per head, the mean estimated matched drop minus the mean
estimated mismatched drop. A linear-attention layer of a hybrid model has no heads: its
entries are 0 (``AtpMap.attention_layers`` lists the layers that have heads).

Memory: a backward keeps every decoder layer's activations (sdpa's attention weights
included), about L times a forward's peak. With ``checkpoint`` the decoder layers run under
``torch.utils.checkpoint`` (non-reentrant): only each layer's input is kept and one
layer's activations are rebuilt at a time during the backward, for one more forward of
every layer (Δ included). By default it is on for forwards of at least
:data:`CHECKPOINT_FROM` positions (rows × padded length). Items share a forward
(left-padded, each with its own positions) up to ``batch_size`` items and
``token_budget`` positions.
"""

from __future__ import annotations

import contextlib
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint as _checkpoint
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from vheads.data import OPTION_LETTERS
from vheads.engine import (
    CHUNK_ELEMENTS, NAME, ROW_GROUPS, Batching, RowBatch, decoder_layers, fp32_logits, model_mask, pack, positions_mask, register,
    row_mask, split_on_oom,
)
from vheads.evaluation import METRICS, check_items, key_positions

ABLATIONS = ("attention", "zero")
#: each test's arms: (arm name, item kind of :data:`vheads.evaluation.TEST_SETS`)
ATP_TESTS: dict[str, tuple[tuple[str, str], ...]] = {
    "ncs": (("matched", "class-matched"), ("mismatched", "class-mismatched")),
    "text": (("text", "text"),),
}
CHECKPOINT_FROM = 2048  # positions per forward from which decoder layers are checkpointed by default


@dataclass
class AtpArm:
    """One arm's items: their ids, the clean metric ``base [n]`` and the estimated drop of
    every head ``drops [n, L, H]`` (``base − metric with the head ablated``, linearised)."""

    item_ids: list[str]
    base: np.ndarray
    drops: np.ndarray


@dataclass
class AtpMap:
    """Per-item, per-arm AtP estimates of one test; :meth:`map` is the causal map [L, H]."""

    test: str
    ablation: str
    rows: str
    metric: str
    arms: dict[str, AtpArm]
    attention_layers: tuple[int, ...]
    model_id: str = ""
    meta: dict = field(default_factory=dict)  # how it was run (batch size, checkpointing)

    def map(self) -> np.ndarray:
        """``[L, H]``: NCS = mean matched drop − mean mismatched drop; text = mean drop."""
        if self.test == "ncs":
            return self.arms["matched"].drops.mean(0) - self.arms["mismatched"].drops.mean(0)
        return self.arms["text"].drops.mean(0)

    def per_item(self) -> np.ndarray:
        """``[n, L, H]`` whose item mean is :meth:`map` (NCS: each matched drop minus the
        mismatched arm's mean drop, as :func:`vheads.evaluation.ncs` stores ``values``)."""
        if self.test == "ncs":
            return self.arms["matched"].drops - self.arms["mismatched"].drops.mean(0, keepdims=True)
        return self.arms["text"].drops

    def save(self, path: str | Path) -> Path:
        """Write an ``.npz``: ``{arm}_drops [n, L, H]``, ``{arm}_base [n]``, ``{arm}_ids``
        per arm, and ``meta`` (JSON: test, ablation, rows, metric, arms, attention_layers,
        model_id, meta). The map is recomputed from the arms (:meth:`map`)."""
        path = Path(path)
        arrays = {}
        for name, arm in self.arms.items():
            arrays[f"{name}_drops"] = arm.drops
            arrays[f"{name}_base"] = arm.base
            arrays[f"{name}_ids"] = np.array(arm.item_ids, dtype=str)
        meta = {"test": self.test, "ablation": self.ablation, "rows": self.rows, "metric": self.metric,
                "arms": list(self.arms), "attention_layers": list(self.attention_layers), "model_id": self.model_id, "meta": self.meta}
        with path.open("wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> AtpMap:
        with np.load(Path(path)) as z:
            meta = json.loads(str(z["meta"]))
            arms = {a: AtpArm([str(x) for x in z[f"{a}_ids"]], z[f"{a}_base"], z[f"{a}_drops"]) for a in meta["arms"]}
        return cls(meta["test"], meta["ablation"], meta["rows"], meta["metric"], arms, tuple(meta["attention_layers"]),
                   meta["model_id"], meta["meta"])


def metric_of_scores(scores: torch.Tensor, letters: torch.Tensor, metric: str = "p4") -> torch.Tensor:
    """The key letter's ``metric`` from letter scores ``[B, 5]`` (four letter logits, then
    the vocabulary's log-sum-exp; :func:`vheads.evaluation.letter_metric` in torch, for the
    gradient): ``[B]``."""
    z = scores[:, :4]
    zk = z.gather(1, letters[:, None])[:, 0]
    if metric == "p4":
        return torch.softmax(z, dim=-1).gather(1, letters[:, None])[:, 0]
    if metric == "logprob":
        return zk - scores[:, 4]
    if metric == "logit-diff":
        return zk - (z.sum(-1) - zk) / 3
    raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")


@dataclass
class _Ablation:
    """What the attention function does during one forward: α [B, L, H], ablated rows and
    hidden keys [B, T] bool (padded coordinates), the ablation type."""

    alpha: torch.Tensor
    rows: torch.Tensor
    keys: torch.Tensor
    kind: str


_ACTIVE: list[_Ablation] = []


def _delta(ab: _Ablation, out, query, key, value, attention_mask, scaling) -> torch.Tensor:
    """``Δ = o^abl − o`` of every head at the ablated rows (0 elsewhere): ``[B, Tq, H, D]``
    like ``out``. The attention ablation recomputes each head over the keys left, in fp32
    (or the model's dtype if wider), in chunks of rows of at most ``CHUNK_ELEMENTS`` logits."""
    B, H, tq, D = query.shape
    tk = key.shape[2]
    q_off = tk - tq
    rows = ab.rows[:, q_off : q_off + tq]  # [B, Tq]
    if ab.kind == "zero":
        return -out * rows[:, :, None, None].to(out.dtype)
    dt = torch.promote_types(query.dtype, torch.float32)
    groups = H // key.shape[1]
    k = key.repeat_interleave(groups, 1).to(dt)  # [B, H, Tk, D] (GQA: query head h reads KV head h // groups)
    v = value.repeat_interleave(groups, 1).to(dt)
    hide = torch.zeros(B, tk, dtype=dt, device=query.device).masked_fill(ab.keys[:, :tk], float("-inf"))  # [B, Tk]
    delta = torch.zeros_like(out)
    idx = rows.any(0).nonzero().flatten()  # local rows ablated in some batch row
    chunk = max(1, CHUNK_ELEMENTS // (B * H * tk))
    for start in range(0, len(idx), chunk):
        loc = idx[start : start + chunk]
        mask = model_mask(attention_mask, loc + q_off, q_off, tk).to(dt) + hide[:, None, :]  # [B, Qs, Tk]
        o = F.scaled_dot_product_attention(query[:, :, loc].to(dt), k, v, attn_mask=mask[:, None], scale=scaling)
        o = torch.nan_to_num(o, nan=0.0).transpose(1, 2)  # [B, Qs, H, D]; a row with every key hidden attends nowhere
        on = rows[:, loc][:, :, None, None].to(dt)
        delta[:, loc] = ((o - out[:, loc].to(dt)) * on).to(out.dtype)
    return delta


def _atp_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """sdpa, then ``o + α · Δ`` per head (:func:`_delta` under no_grad: at α = 0 no gradient
    flows through Δ, and a head's Δ depends only on the layers below it)."""
    out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    layer = getattr(module, "layer_idx", None)
    if not _ACTIVE or layer is None:
        return out, weights
    ab = _ACTIVE[-1]
    with torch.no_grad():
        delta = _delta(ab, out, query, key, value, attention_mask, query.shape[-1] ** -0.5 if scaling is None else scaling)
    a = ab.alpha[:, layer]  # [B, H] (fp32 or wider: the backward's Σ_rows ⟨∂m/∂o, Δ⟩ is not summed in bf16)
    return out + (a[:, None, :, None] * delta.to(a.dtype)).to(out.dtype), weights


@contextlib.contextmanager
def _ablating(model, ab: _Ablation, checkpoint: bool):
    """Run ``model``'s language-model attention through :func:`_atp_attention` under ``ab``,
    with no parameter requiring a gradient, and the decoder layers checkpointed if asked
    (and exposed); everything is restored afterwards."""
    params = [p for p in model.parameters() if p.requires_grad]
    layers = decoder_layers(model) if checkpoint else None
    AttentionInterface.register(NAME, _atp_attention)
    _ACTIVE.append(ab)
    for p in params:
        p.requires_grad_(False)
    for layer in layers or []:
        layer.forward = functools.partial(_checkpoint, layer.forward, use_reentrant=False)
    try:
        with torch.enable_grad():
            yield
    finally:
        for layer in layers or []:
            del layer.forward  # back to the class's forward
        for p in params:
            p.requires_grad_(True)
        _ACTIVE.pop()
        register()  # the engine's attention function again


def scaled_ablation(engine, prompts: list, letters: list[int], alpha: torch.Tensor, keys: str = "image", ablation: str = "attention",
                    rows: str = "all", metric: str = "p4", checkpoint: bool | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One forward of ``prompts`` (one batch row each, left-padded; consecutive repeats of
    one prompt share its image's vision pass) with every head's output ``o + α[b, l, h] · Δ``
    at ``rows`` (``ablation``: ``attention`` hides ``keys`` — image, text or a region — from
    the head; ``zero`` zeroes it). Returns the key letter's ``metric`` ``[B]`` and, when
    ``alpha`` requires a gradient, ``∂metric/∂α [B, L, H]``. α = 0 is the clean model; α one
    at h alone is h alone ablated."""
    model = engine.lm.model
    units, counts = [], []  # distinct consecutive prompts and their rows
    for pr in prompts:
        if units and units[-1] is pr:
            counts[-1] += 1
        else:
            units.append(pr)
            counts.append(1)
    if len(units) > 1 and not engine.cross_item:
        raise ValueError(f"the {engine.lm.adapter.family} adapter runs one item per forward; pass one prompt (repeated) at a time")
    batch = RowBatch(units, counts, [0] * len(units))
    inputs = engine._inputs(batch, "full")
    reps = torch.tensor(counts)
    row_m = torch.stack([batch.place(u, row_mask(pr.layout, rows), False) for u, pr in enumerate(units)]).repeat_interleave(reps, 0)  # [B, T]
    key_m = torch.stack([batch.place(u, positions_mask(pr.layout.n_tokens, key_positions(pr, keys)), False)
                         for u, pr in enumerate(units)]).repeat_interleave(reps, 0)
    dev = engine.lm.device
    ab = _Ablation(alpha.to(dev) if alpha.device != dev else alpha, row_m.to(dev), key_m.to(dev), ablation)
    if checkpoint is None:
        checkpoint = batch.n_rows * batch.length >= CHECKPOINT_FROM
    ids = engine.lm.adapter.letter_token_ids(engine.lm.processor)
    with _ablating(model, ab, checkpoint), engine._shared_vision(batch), fp32_logits(model):  # fp32 answers (vheads.engine._lm_head)
        logits = model(**inputs, use_cache=False, logits_to_keep=1).logits[:, -1]  # [B, V] fp32
        dt = torch.promote_types(logits.dtype, torch.float32)
        scores = torch.cat([logits[:, ids].to(dt), torch.logsumexp(logits.to(dt), -1, keepdim=True)], -1)  # [B, 5]
        m = metric_of_scores(scores, torch.tensor(letters, device=scores.device), metric)
        grad = torch.autograd.grad(m.sum(), ab.alpha)[0] if ab.alpha.requires_grad else None
    return m.detach(), grad


def estimate_drops(engine, prompts: list, letters: list[int], keys: str = "image", ablation: str = "attention", rows: str = "all",
                   metric: str = "p4", batch_size: int = 8, token_budget: int = 1 << 15, checkpoint: bool | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """AtP on prompts: the clean ``metric`` of each prompt's key letter ``base [n]`` and
    every head's estimated drop ``−∂metric/∂α [n, L, H]`` (see the module docstring), from
    one forward and one backward per forward of up to ``batch_size`` prompts and
    ``token_budget`` positions."""
    L, H = engine.shape
    base, drops = np.zeros(len(prompts)), np.zeros((len(prompts), L, H))
    bt = Batching(max_rows=batch_size if engine.cross_item else 1, token_budget=token_budget)
    dtype = torch.promote_types(engine.lm.model.dtype, torch.float32)

    def run(group: list[int]) -> tuple[np.ndarray, np.ndarray]:
        alpha = torch.zeros(len(group), L, H, dtype=dtype, device=engine.lm.device, requires_grad=True)
        m, g = scaled_ablation(engine, [prompts[i] for i in group], [letters[i] for i in group], alpha, keys, ablation, rows, metric, checkpoint)
        return m.double().cpu().numpy(), -g.double().cpu().numpy()

    for group in pack([(pr, 1, 0) for pr in prompts], bt):
        # out of device memory: halved and retried, the engine's later forwards at the size that fit (vheads.engine.split_on_oom)
        base[group], drops[group] = split_on_oom(run, group, len, lambda g, k: (g[:k], g[k:]),
                                                 lambda a, b: (np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])),
                                                 engine.lm.model_id, engine.memory)
    return base, drops


def check_atp_request(test: str, ablation: str, rows: str, metric: str, batch_size: int = 1) -> None:
    """Validate an AtP request before any forward (``ValueError`` naming the argument)."""
    for name, value, allowed in (("test", test, tuple(ATP_TESTS)), ("ablation", ablation, ABLATIONS),
                                 ("rows", rows, ROW_GROUPS), ("metric", metric, METRICS)):
        if value not in allowed:
            raise ValueError(f"unknown {name} {value!r} for attribution patching; choose from {', '.join(allowed)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1 item per forward, got {batch_size}")


def atp_map(engine, sets: dict, test: str = "ncs", ablation: str = "attention", rows: str = "all", metric: str = "p4",
            batch_size: int = 8, token_budget: int = 1 << 15, checkpoint: bool | None = None) -> AtpMap:
    """The AtP estimate of ``test``'s causal map for every head at once.

    ``sets``: ``{kind: items}`` as :func:`vheads.evaluation.item_sets` gives for the test
    (NCS: ``class-matched`` and ``class-mismatched``; text: ``text``). NCS hides the image
    keys at ``rows``; the text arm hides the question and option tokens at all rows (as
    :func:`vheads.evaluation.text_arm`). ``ablation``: ``attention`` (AtP*) or ``zero``
    (head output set to 0 at the rows). One forward and one backward per forward of up to
    ``batch_size`` items; ``checkpoint`` (None: from :data:`CHECKPOINT_FROM` positions)
    checkpoints the decoder layers. Every argument is checked before any forward.
    """
    check_atp_request(test, ablation, rows, metric, batch_size)
    for _, kind in ATP_TESTS[test]:
        if kind not in sets:
            raise ValueError(f"AtP of {test!r} needs items of kind {kind!r}; sets has {', '.join(sets) or 'none'}")
        check_items(sets[kind], f"AtP {test} {kind}")
    keys, act_rows = ("image", rows) if test == "ncs" else ("text", "all")
    arms = {}
    for arm, kind in ATP_TESTS[test]:
        items = sets[kind]
        prompts = [engine.lm.adapter.build(it, engine.lm.processor) for it in items]
        base, drops = estimate_drops(engine, prompts, [OPTION_LETTERS.index(it.answer) for it in items], keys, ablation, act_rows,
                                     metric, batch_size, token_budget, checkpoint)
        arms[arm] = AtpArm([it.id for it in items], base, drops)
    return AtpMap(test, ablation, act_rows, metric, arms, tuple(engine.lm.attention_layers),
                  engine.lm.model_id, {"batch_size": batch_size, "token_budget": token_budget, "checkpoint": checkpoint})


def exact_map(engine, sets: dict, test: str = "ncs", rows: str = "all", metric: str = "p4", batch_size: int = 64
              ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The exact attention-mask map the estimates are checked against: the evaluation's own
    test (:func:`vheads.evaluation.run_test`) with one head-set per head. Returns the map
    ``[L, H]`` and each arm's per-item drops ``{arm: [n, L, H]}`` (0 in layers without heads)."""
    from vheads.evaluation import HeadSet, run_test

    check_atp_request(test, "attention", rows, metric, batch_size)
    L, H = engine.shape
    heads = [(l, h) for l in engine.lm.attention_layers for h in range(H)]
    out = run_test(engine, test, sets, [HeadSet([lh], L, H) for lh in heads], 1.0, rows, 0, batch_size).under(metric)
    li, hi = np.array(heads).T

    def grid(values: np.ndarray) -> np.ndarray:  # [n_heads, ...] -> [..., L, H]
        g = np.zeros(values.shape[1:] + (L, H))
        g[..., li, hi] = np.moveaxis(values, 0, -1)
        return g

    arms = {"text": grid(out.values)} if test == "text" else {arm: grid(out.detail[f"drop_{arm}"]) for arm in ("matched", "mismatched")}
    return grid(out.means()), arms


