"""What "hide S" means in a test: the ablation types of DESIGN.md, and their reference values.

- ``attention`` (the default, the seed's): S's logits to the hidden keys are −∞ and the
  softmax renormalises (the mask of each test);
- ``zero``: S's head outputs (the per-head slice entering ``o_proj``) are 0 at the test's
  row group;
- ``mean``: they are replaced by their mean over a reference set of items of the same kind
  at the same row role (:func:`vheads.engine.row_roles`: image rows by grid position,
  text rows by span, the last row by itself) — the reference items are their own seeded
  set, recorded with the run (:func:`reference_means`);
- ``resample``: they are taken from another item of the same evaluation set at the same
  row role (the donor pairing is a seeded derangement: :func:`donors`).

A head-output ablation has no keys: it is the same whichever region a test would hide.
NCS (matched − mismatched, which cancels generic damage) and the text arm take any
ablation; NCS_grid (a contrast between two regions) and CERS (steering is not an
ablation) refuse the head-output ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import weakref

import numpy as np
import torch

from vheads._errors import VheadsError
from vheads.engine import HeadAblation, OutputRecord, RoleMeans, RowBatch, pack, pooled_means, row_roles
from vheads.evaluation._digest import prompt_digest

from vheads.evaluation._request import ABLATION_REGISTRY, ABLATIONS, HEAD_OUTPUT_TESTS, check_ablation  # noqa: F401 - torch-free, re-exported


def _digest(prompts) -> str:
    h = hashlib.blake2b(digest_size=8)
    for pr in prompts:
        h.update(prompt_digest(pr))
    return h.hexdigest()


#: the most bytes a record forward's per-role sums may hold on the device (rows per forward follow)
RECORD_BYTES = 1 << 30


def record_head_outputs(engine, prompts) -> list[tuple[list[str], torch.Tensor, torch.Tensor]]:
    """Every head's output of each prompt, unablated, summed per row role: per prompt
    ``(roles [R], sums [L, H, R, D], counts [R])``. Prompts share forwards (one row each),
    as many as keep the forward's sums ``[B, L, H, R, D]`` within :data:`RECORD_BYTES`;
    the sums accumulate on the device and reach the host once per forward."""
    out = []
    L, H = engine.shape
    # the sums [B, L, H, R, D] of a forward stay within RECORD_BYTES on the device (R ≤ the longest prompt)
    per_row = L * H * engine.lm.head_dim * 4 * max(pr.layout.n_tokens for pr in prompts)
    rows = max(1, RECORD_BYTES // per_row) if engine.cross_item else 1
    batching = dataclasses.replace(engine.batching, max_rows=min(engine.batching.max_rows, rows))
    for group in pack([(pr, 1, 0) for pr in prompts], batching):
        batch = RowBatch([prompts[i] for i in group], [1] * len(group), [0] * len(group))
        names, role = [], torch.full((len(group), batch.length), -1, dtype=torch.long)
        for u, i in enumerate(group):
            roles = row_roles(prompts[i].layout)
            vocab = list(dict.fromkeys(roles))
            at = {r: j for j, r in enumerate(vocab)}
            role[u] = batch.place(u, torch.tensor([at[r] for r in roles]), -1)
            names.append(vocab)
        R = max(len(v) for v in names)
        res = engine.run(batch, engine.plan(len(group), records=[OutputRecord(role, R)]), logits_at=[])
        sums = res.captures["outputs"]  # [B, L, H, R, D]
        for u, vocab in enumerate(names):
            counts = torch.bincount(role[u][role[u] >= 0], minlength=R)[: len(vocab)]
            out.append((vocab, sums[u][:, :, : len(vocab)], counts))
    return out


#: engine -> {reference prompts' digest: their RoleMeans}: a reference set is recorded once per engine
_REFERENCES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def reference_means(engine, items, what: str = "mean ablation") -> RoleMeans:
    """The mean head output per (layer, head, role) over the rows of ``items`` (the
    reference set): rows of one role pooled over every item. No item is a
    :class:`VheadsError`. Recorded once per engine and reference set (the same prompts give
    the same forwards): every NCS call of a study with ``mean`` reads the same values."""
    if not items:
        raise VheadsError(f"{what}: the reference set is empty; the mean ablation needs at least one reference item")
    prompts = [engine.lm.adapter.build(it, engine.lm.processor) for it in items]
    known = _REFERENCES.setdefault(engine, {})
    key = _digest(prompts)
    if key not in known:
        known[key] = _pooled_reference(engine, prompts)
    return known[key]


def _pooled_reference(engine, prompts) -> RoleMeans:
    vocab: dict[str, int] = {}
    rec = record_head_outputs(engine, prompts)
    for roles, _, _ in rec:
        for r in roles:
            vocab.setdefault(r, len(vocab))
    L, H, _, D = rec[0][1].shape
    sums, counts = torch.zeros(L, H, len(vocab), D, dtype=torch.float64), torch.zeros(len(vocab), dtype=torch.long)
    for roles, s, c in rec:
        idx = torch.tensor([vocab[r] for r in roles])
        sums[:, :, idx] += s.double()
        counts[idx] += c
    return pooled_means(sums, counts, list(vocab), f"mean over {len(prompts)} reference items {_digest(prompts)}")


def donors(n: int, seed: int) -> np.ndarray:
    """A seeded derangement of ``n ≥ 2`` items: ``donor[i] ≠ i`` (a random cyclic order,
    each item taking the next one's outputs)."""
    if n < 2:
        raise VheadsError(f"the resample ablation takes each item's head outputs from another item; it needs 2 or more items, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    donor = np.empty(n, dtype=int)
    donor[order] = np.roll(order, -1)
    return donor


def item_references(engine, ablation: str, prompts, reference_items=None, seed: int = 0, what: str = "") -> list[RoleMeans | None]:
    """The replacement head outputs of each of ``prompts`` under ``ablation``: None for
    ``zero`` (and ``attention``, which has none); the reference set's means for ``mean``;
    the donor item's own outputs for ``resample``: ``reference_items[i]`` is item i's donor
    when given, else the donors are the other prompts (:func:`donors` from ``seed``)."""
    replacement = ABLATION_REGISTRY.get(ablation).replacement
    if replacement == "":
        return [None] * len(prompts)
    if replacement == "mean":
        ref = reference_means(engine, reference_items or [], what or "mean ablation")
        return [ref] * len(prompts)
    if replacement == "donor":
        if reference_items is not None:  # the donors, one per prompt, chosen by the caller
            if len(reference_items) != len(prompts):
                raise ValueError(f"resample: {len(reference_items)} donor items for {len(prompts)} items")
            pool = [engine.lm.adapter.build(it, engine.lm.processor) for it in reference_items]
            donor = np.arange(len(pool))
        else:
            pool, donor = prompts, donors(len(prompts), seed)
        own = record_head_outputs(engine, pool)
        return [pooled_means(own[d][1], own[d][2], own[d][0], f"outputs of item {_digest([pool[d]])}") for d in donor]
    raise VheadsError(f"ablation {ablation!r}: unknown replacement {replacement!r}")


def head_ablation(batch: RowBatch, probes, heads: torch.Tensor, rows: torch.Tensor, device=None) -> HeadAblation:
    """The :class:`HeadAblation` of a forward: ``probes`` = (probe, prompt slot, n rows) per
    piece in batch order, ``heads [B, L, H]`` (the ablated heads; 0 on other rows),
    ``rows [B, T]`` (the acted rows). Zero where no probe carries reference values; else
    every distinct reference is concatenated along the role axis, with one zero role for
    the probes that zero; the values are moved to ``device`` once (not per layer)."""
    refs: dict[int, tuple[RoleMeans, int]] = {}
    for pb, _, _ in probes:
        if pb.reference is not None and id(pb.reference) not in refs:
            refs[id(pb.reference)] = (pb.reference, sum(r.means.shape[2] for r, _ in refs.values()))
    if not refs:
        return HeadAblation(heads, rows)
    first = next(iter(refs.values()))[0].means
    zero_role = sum(r.means.shape[2] for r, _ in refs.values())
    values = torch.cat([r.means for r, _ in refs.values()] + [first.new_zeros(*first.shape[:2], 1, first.shape[3])], 2)
    role = torch.full(rows.shape, -1, dtype=torch.long)
    b = 0
    for pb, u, n in probes:
        if pb.action is not None and pb.action.kind == "ablate" and pb.headsets:
            if pb.reference is None:
                idx = torch.full((pb.prompt.layout.n_tokens,), zero_role, dtype=torch.long)
            else:
                ref, off = refs[id(pb.reference)]
                idx = off + ref.index(row_roles(pb.prompt.layout), f"item {pb.prompt.item.id!r}")
            role[b : b + n] = batch.place(u, idx, -1)
        b += n
    return HeadAblation(heads, rows, values if device is None else values.to(device), role)
