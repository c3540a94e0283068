"""The causal tests of a head-set (DESIGN.md "Metric definitions"), one function each.

Every function takes the engine, the evaluation items and a list of head-sets (the
head-set under test and its controls, all run in the same batched forwards) and returns
per-item outcomes ``[n_headsets, n_items]`` so that statistics can be taken over items.
``P(x)`` is the probability of option letter x renormalized over the four letters at the
last prompt position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from vheads.data import OPTION_LETTERS, Item
from vheads.engine import Engine
from vheads.evaluation._headsets import HeadSet
from vheads.evaluation._probe import Action, option_probs


def _check_items(items: list[Item], what: str) -> None:
    if not items:
        raise ValueError(f"{what}: the evaluation set is empty")
    for it in items:
        if it.options is None or len(it.options) != 4:
            raise ValueError(f"{what}: item {it.id!r} has {0 if it.options is None else len(it.options)} options; these tests need four lettered options")


def _letter(item: Item) -> int:
    return OPTION_LETTERS.index(item.answer)


def _cell_letter(item: Item, cell: str) -> int:
    """Option index of the class shown in ``cell`` of a 2x2 grid item."""
    cls = item.meta["cells"][int(cell.removeprefix("cell"))]
    return item.options.index(cls)


def distractor_cell(item: Item, seed: int) -> str:
    """A distractor cell ≠ the target, drawn from (seed, item id) so it is reproducible."""
    others = [c for c in sorted(item.regions) if c != item.target]
    rng = np.random.default_rng([seed, int.from_bytes(item.id.encode()[-8:].rjust(8, b"\0"), "little") % (2**32)])
    return others[int(rng.integers(len(others)))]


@dataclass
class Outcomes:
    """Per-item values ``[n_headsets, n_items]`` of one test, and the item ids."""

    test: str
    values: np.ndarray
    item_ids: list[str]
    detail: dict[str, np.ndarray]

    def means(self) -> np.ndarray:
        return self.values.mean(axis=1)


def cers(engine: Engine, items: list[Item], headsets: list[HeadSet], beta: float = 1e4, rows: str = "all",
         symmetric: bool = False, seed: int = 0, batch_size: int = 64, progress: bool = False) -> Outcomes:
    """Steerability on 2x2 grids whose four cells show the four options.

    ``CERS = mean_items [ P(c | steer S→c) − P(c | steer S→d) ]`` with c the target cell, d a
    distractor cell. Symmetric variant (seed Table 16): the average of that and
    ``P(d | steer S→d) − P(d | steer S→c)``. Steering acts at query rows ``rows`` (the
    ``steer_rows`` of a study, default ``all``: every query position, image rows included,
    as public steering code does; rows of image tokens before the target cell then also
    have their attention pushed onto it). The image keys are the image-pad tokens only.
    """
    _check_items(items, "CERS")
    if not np.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta}")
    prompts = [engine.lm.adapter.build(it, engine.lm.processor) for it in items]
    one = np.zeros((len(headsets), len(items)))  # P(c | S→c) − P(c | S→d)
    sym = np.zeros((len(headsets), len(items)))  # its average with P(d | S→d) − P(d | S→c)
    for i, (it, pr) in enumerate(tqdm(list(zip(items, prompts)), desc="CERS", disable=not progress)):
        c, d = it.target, distractor_cell(it, seed)
        lc, ld = _cell_letter(it, c), _cell_letter(it, d)
        to_c = option_probs(engine, pr, headsets, Action("steer", rows=rows, target=c, beta=beta), batch_size)
        to_d = option_probs(engine, pr, headsets, Action("steer", rows=rows, target=d, beta=beta), batch_size)
        one[:, i] = to_c[:, lc] - to_d[:, lc]
        sym[:, i] = 0.5 * (one[:, i] + to_d[:, ld] - to_c[:, ld])
    # both variants come from the same two forwards; ``detail`` carries the other one
    if symmetric:
        return Outcomes("cers-sym", sym, [it.id for it in items], {"cers": one})
    return Outcomes("cers", one, [it.id for it in items], {"cers-sym": sym})


def _drops(engine, items, headsets, action, batch_size, progress, desc, cache=None):
    """``P_base(key) − P_masked(key)`` per head-set and item.

    ``cache`` (a dict the caller keeps) holds each item's prompt and baseline P by item id,
    so NCS at several row groups builds and runs the unmasked prompt once per item."""
    cache = {} if cache is None else cache
    drops = np.zeros((len(headsets), len(items)))
    for i, it in enumerate(tqdm(items, desc=desc, disable=not progress)):
        if it.id not in cache:
            pr = engine.lm.adapter.build(it, engine.lm.processor)
            cache[it.id] = (pr, option_probs(engine, pr, [], None)[0])
        pr, base = cache[it.id]
        masked = option_probs(engine, pr, headsets, action, batch_size)
        k = _letter(it)
        drops[:, i] = base[k] - masked[:, k]
    return drops


def ncs(engine: Engine, matched: list[Item], mismatched: list[Item], headsets: list[HeadSet], rows: str = "all",
        keys: str = "image", batch_size: int = 64, progress: bool = False, cache: dict | None = None) -> Outcomes:
    """Necessity with matched and mismatched arms.

    ``drop = P_base(key) − P_masked(key)``, mask = S hidden from ``keys`` (default all image
    tokens) at ``rows`` (default all rows); ``NCS = mean drop_matched − mean drop_mismatched``
    (generic damage cancels). ``values`` holds the matched drops minus the mismatched arm's
    mean drop per head-set, so the item mean of ``values`` is NCS; both arms are in ``detail``.
    Pass the same ``cache`` dict to calls on the same items to reuse their baselines.
    """
    _check_items(matched, "NCS matched arm")
    _check_items(mismatched, "NCS mismatched arm")
    action = Action("mask", rows=rows, keys=keys)
    dm = _drops(engine, matched, headsets, action, batch_size, progress, "NCS matched", cache)
    dx = _drops(engine, mismatched, headsets, action, batch_size, progress, "NCS mismatched", cache)
    values = dm - dx.mean(axis=1, keepdims=True)
    return Outcomes(f"ncs-{rows}", values, [it.id for it in matched], {"drop_matched": dm, "drop_mismatched": dx})


def ncs_grid(engine: Engine, items: list[Item], headsets: list[HeadSet], rows: str = "all", seed: int = 0,
             batch_size: int = 64, progress: bool = False) -> Outcomes:
    """Region contrast on 2x2 grids whose question names the target cell c:
    ``P(c | hide R_d from S) − P(c | hide R_c from S)``."""
    _check_items(items, "NCS_grid")
    vals = np.zeros((len(headsets), len(items)))
    for i, it in enumerate(tqdm(items, desc="NCS_grid", disable=not progress)):
        pr = engine.lm.adapter.build(it, engine.lm.processor)
        c, d = it.target, distractor_cell(it, seed)
        lc = _cell_letter(it, c)
        hide_d = option_probs(engine, pr, headsets, Action("mask", rows=rows, keys=d), batch_size)
        hide_c = option_probs(engine, pr, headsets, Action("mask", rows=rows, keys=c), batch_size)
        vals[:, i] = hide_d[:, lc] - hide_c[:, lc]
    return Outcomes("ncs-grid", vals, [it.id for it in items], {})


def text_arm(engine: Engine, items: list[Item], headsets: list[HeadSet], batch_size: int = 64, progress: bool = False) -> Outcomes:
    """Drop in P(key) on text-solvable items when S is hidden from the question and option
    tokens at all rows: a head-set that is only generically important drops here too."""
    _check_items(items, "text arm")
    drops = _drops(engine, items, headsets, Action("mask", rows="all", keys="text"), batch_size, progress, "text arm")
    return Outcomes("text", drops, [it.id for it in items], {})


def head_attention_mass(engine: Engine, items: list[Item]) -> dict[str, np.ndarray]:
    """Baseline attention of every head from the last prompt row, averaged over ``items``:
    ``image_mass [L, H]`` = mean Σ_{t ∈ image-pad tokens} A[l,h][last, t] (for the
    attention-matched and text-heavy controls and Table 17's mass columns) and
    ``sink_mass [L, H]`` = mean A[l,h][last, 0] (the first token: sinks). No intervention."""
    import torch

    from vheads.engine import Capture, positions_mask

    if not items:
        raise ValueError("head_attention_mass needs at least one item")
    image = sink = 0.0
    for it in items:
        pr = engine.lm.adapter.build(it, engine.lm.processor)
        T = pr.layout.n_tokens
        groups = torch.stack([positions_mask(T, pr.layout.image_positions), positions_mask(T, [0])])[None]
        plan = engine.plan(1, captures=[Capture(positions_mask(T, pr.layout.spans["last"])[None], groups)])
        m = engine.forward(pr, plan, logits_at=[]).captures["capture"][0]  # [L, H, 2]
        image = image + m[..., 0].double().numpy() / len(items)
        sink = sink + m[..., 1].double().numpy() / len(items)
    return {"image_mass": image, "sink_mass": sink}


EXPECTED = {
    "oracle": (0.9, 1.0),
    "floor": (0.15, 0.35),
    "matched": (0.9, 1.0),
    "mismatched": (0.0, 0.45),
    "leak": (0.15, 0.35),
}


def baseline_audit(engine: Engine, sets: dict[str, list[Item]]) -> dict[str, dict]:
    """Mean P(key) without intervention on each evaluation set, flagged against its
    expected range: ``oracle`` (target cell named, ≈1), ``floor`` (blank image, 0.25),
    ``matched`` (high), ``mismatched`` (the keyed option is wrong: low), and ``leak`` (the
    matched questions with the image blanked: must sit at chance)."""
    report = {}
    if "matched" in sets:
        sets = dict(sets)
        sets["leak"] = [_blank(it) for it in sets["matched"]]
    for name, items in sets.items():
        _check_items(items, f"audit {name}")
        p = np.array([option_probs(engine, engine.lm.adapter.build(it, engine.lm.processor), [], None)[0][_letter(it)] for it in items])
        lo, hi = EXPECTED.get(name, (0.0, 1.0))
        m = float(p.mean())
        report[name] = {"n": len(items), "mean_p_key": m, "expected": [lo, hi], "ok": lo <= m <= hi}
    return report


def _blank(item: Item) -> Item:
    img = Image.new("RGB", item.image.size, (128, 128, 128))
    return Item(item.id + "-blank", item.kind + "-leak", img, item.question, item.answer, {}, None, item.options, item.query_span, dict(item.meta))
