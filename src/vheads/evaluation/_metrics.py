"""The causal tests of a head-set (DESIGN.md "Metric definitions"), one function each.

Every function takes the engine, the evaluation items and a list of head-sets (the
head-set under test and its controls, all run in the same batched forwards) and returns
per-item outcomes ``[n_headsets, n_items]`` so that statistics can be taken over items.
``P(x)`` is the probability of option letter x renormalized over the four letters at the
last prompt position.

Every outcome is computed under the three metrics of DESIGN.md (:data:`METRICS`, from
the same forwards: :func:`letter_metric`): ``values`` holds ``p4`` (the seed's), and
``Outcomes.metrics`` the same test under ``logprob`` and ``logit-diff``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from vheads.data import OPTION_LETTERS, Item
from vheads.engine import Engine
from vheads.evaluation._ablation import item_references
from vheads._headset import HeadSet
from vheads.evaluation._probe import Action, Probe, ProbeMemo, build_prompt, letter_p, run_probes, run_scores
from vheads.evaluation._request import METRICS


def letter_metric(scores: np.ndarray, letter: int, metric: str = "p4") -> np.ndarray:
    """Option ``letter``'s value under ``metric``, from letter scores ``[..., 5]`` (the four
    letters' logits z_A..z_D, then lse = log Σ_v exp z_v over the full vocabulary):

    - ``p4``: ``exp z_x / Σ_{y ∈ letters} exp z_y`` (P renormalised over the four letters);
    - ``logprob``: ``z_x − lse`` (log P(x) over the full vocabulary);
    - ``logit-diff``: ``z_x − mean_{y ≠ x} z_y`` (the key's logit minus the mean of the
      other three letters' logits), close to linear in the logits.

    Returns ``[...]``."""
    sc = np.asarray(scores, dtype=float)
    z = sc[..., :4]
    if metric == "p4":
        return letter_p(sc)[..., letter]
    if metric == "logprob":
        return z[..., letter] - sc[..., 4]
    if metric == "logit-diff":
        return z[..., letter] - (z.sum(axis=-1) - z[..., letter]) / 3
    raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")


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
    """Per-item values ``[n_headsets, n_items]`` of one test, and the item ids; ``values``
    and ``detail`` in ``p4``, ``metrics`` the same outcomes under the other metrics."""

    test: str
    values: np.ndarray
    item_ids: list[str]
    detail: dict[str, np.ndarray]
    metrics: dict[str, Outcomes] = field(default_factory=dict)

    def means(self) -> np.ndarray:
        return self.values.mean(axis=1)

    def under(self, metric: str) -> Outcomes:
        """These outcomes under ``metric`` (one of :data:`METRICS`)."""
        if metric == "p4":
            return self
        if metric not in self.metrics:
            raise ValueError(f"outcomes of {self.test!r} have no {metric!r} values; stored: p4, {', '.join(self.metrics)}")
        return self.metrics[metric]


def _by_metric(test: str, item_ids: list[str], make) -> Outcomes:
    """``make(metric) -> (values, detail)`` under every metric, as one :class:`Outcomes`."""
    outs = {}
    for m in METRICS:
        values, detail = make(m)
        outs[m] = Outcomes(test, values, item_ids, detail)
    main = outs.pop("p4")
    main.metrics = outs
    return main


def cers(engine: Engine, items: list[Item], headsets: list[HeadSet], beta: float = 1e4, rows: str = "all",
         symmetric: bool = False, seed: int = 0, batch_size: int = 64, progress: bool = False,
         memo: ProbeMemo | None = None) -> Outcomes:
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
    prompts = [build_prompt(engine, it, memo) for it in items]
    cells = [(it.target, distractor_cell(it, seed)) for it in items]
    probes = [Probe(pr, Action("steer", rows=rows, target=cell, beta=beta), headsets) for pr, cd in zip(prompts, cells) for cell in cd]
    sc = run_scores(engine, probes, max_rows=batch_size, progress=progress, desc="CERS", memo=memo)  # per item: steer onto c, steer onto d
    letters = [(_cell_letter(it, c), _cell_letter(it, d)) for it, (c, d) in zip(items, cells)]

    def make(metric):
        one = np.zeros((len(headsets), len(items)))  # P(c | S→c) − P(c | S→d)
        sym = np.zeros((len(headsets), len(items)))  # its average with P(d | S→d) − P(d | S→c)
        for i, (lc, ld) in enumerate(letters):
            to_c, to_d = sc[2 * i], sc[2 * i + 1]
            one[:, i] = letter_metric(to_c, lc, metric) - letter_metric(to_d, lc, metric)
            sym[:, i] = 0.5 * (one[:, i] + letter_metric(to_d, ld, metric) - letter_metric(to_c, ld, metric))
        # both variants come from the same two forwards; ``detail`` carries the other one
        return (sym, {"cers": one}) if symmetric else (one, {"cers-sym": sym})

    return _by_metric("cers-sym" if symmetric else "cers", [it.id for it in items], make)


def _drops(engine, items, headsets, action, batch_size, progress, desc, cache=None, memo=None, ablation="attention",
           reference=None, seed=0):
    """``metric_base(key) − metric_masked(key)`` per head-set and item, under every metric:
    ``{metric: [n_headsets, n_items]}`` (p4: ``P_base(key) − P_masked(key)``).

    ``cache`` (a dict the caller keeps) holds each item's prompt and baseline letter scores by
    item id, so NCS at several row groups builds and runs the unmasked prompt once per item.
    ``ablation`` other than ``attention``: S's head outputs are replaced at ``action.rows``
    instead (:mod:`vheads.evaluation._ablation`; ``reference``: the mean ablation's items)."""
    cache = {} if cache is None else cache
    for it in items:
        if it.id not in cache:
            cache[it.id] = (build_prompt(engine, it, memo), None)
    need = list(dict.fromkeys(it.id for it in items if cache[it.id][1] is None))  # baselines not run yet
    prompts = [cache[it.id][0] for it in items]
    if ablation != "attention":
        action = Action("ablate", rows=action.rows, ablation=ablation)
    refs = item_references(engine, ablation, prompts, reference, seed, f"{desc} ({ablation} ablation)")
    probes = [Probe(cache[iid][0], None) for iid in need] + [Probe(pr, action, headsets, ref) for pr, ref in zip(prompts, refs)]
    sc = run_scores(engine, probes, max_rows=batch_size, progress=progress, desc=desc, memo=memo)
    for iid, base in zip(need, sc):
        cache[iid] = (cache[iid][0], base[0])
    drops = {m: np.zeros((len(headsets), len(items))) for m in METRICS}
    for i, (it, masked) in enumerate(zip(items, sc[len(need):])):
        k = _letter(it)
        for m, d in drops.items():
            d[:, i] = letter_metric(cache[it.id][1], k, m) - letter_metric(masked, k, m)
    return drops


def ncs(engine: Engine, matched: list[Item], mismatched: list[Item], headsets: list[HeadSet], rows: str = "all",
        keys: str = "image", batch_size: int = 64, progress: bool = False, cache: dict | None = None,
        memo: ProbeMemo | None = None, ablation: str = "attention", reference: dict[str, list[Item]] | None = None,
        seed: int = 0) -> Outcomes:
    """Necessity with matched and mismatched arms.

    ``drop = P_base(key) − P_masked(key)``, mask = S hidden from ``keys`` (default all image
    tokens) at ``rows`` (default all rows); ``NCS = mean drop_matched − mean drop_mismatched``
    (generic damage cancels). ``values`` holds the matched drops minus the mismatched arm's
    mean drop per head-set, so the item mean of ``values`` is NCS; both arms are in ``detail``.
    In a study each work unit is a shard of the items, so a stored per-item value subtracts its
    *shard's* mismatched mean: the item mean over all shards is still exactly NCS (a shard
    holds as many matched as mismatched items), but the values' spread mixes shard-level
    noise, so every NCS interval and comparison (Welch, bootstrap, ``ncs_difference_t``) is
    taken from the two stored arms, never from these values' spread.
    Pass the same ``cache`` dict to calls on the same items to reuse their baselines, and a
    ``memo`` (:class:`vheads.evaluation.ProbeMemo`) to every test of a model to skip rows
    already run (every test takes one).

    ``ablation`` (DESIGN.md "Ablation types"): ``attention`` hides ``keys`` from S; ``zero``,
    ``mean``, ``resample`` replace S's head outputs at ``rows`` instead (``keys`` then plays
    no part; ``reference``: ``{kind: items}``, the mean's reference sets of each arm's kind;
    ``seed``: the resample pairing).
    """
    _check_items(matched, "NCS matched arm")
    _check_items(mismatched, "NCS mismatched arm")
    action = Action("mask", rows=rows, keys=keys)
    ref = reference or {}
    dm = _drops(engine, matched, headsets, action, batch_size, progress, "NCS matched", cache, memo, ablation,
                ref.get("class-matched"), seed)
    dx = _drops(engine, mismatched, headsets, action, batch_size, progress, "NCS mismatched", cache, memo, ablation,
                ref.get("class-mismatched"), seed)
    return _by_metric(f"ncs-{rows}", [it.id for it in matched], lambda m: (
        dm[m] - dx[m].mean(axis=1, keepdims=True), {"drop_matched": dm[m], "drop_mismatched": dx[m]}))


def ncs_grid(engine: Engine, items: list[Item], headsets: list[HeadSet], rows: str = "all", seed: int = 0,
             batch_size: int = 64, progress: bool = False, memo: ProbeMemo | None = None) -> Outcomes:
    """Region contrast on 2x2 grids whose question names the target cell c:
    ``P(c | hide R_d from S) − P(c | hide R_c from S)``."""
    _check_items(items, "NCS_grid")
    prompts = [build_prompt(engine, it, memo) for it in items]
    cells = [(it.target, distractor_cell(it, seed)) for it in items]
    # per item: hide R_d, hide R_c
    sc = run_scores(engine, [Probe(pr, Action("mask", rows=rows, keys=cell), headsets) for pr, (c, d) in zip(prompts, cells) for cell in (d, c)],
                    max_rows=batch_size, progress=progress, desc="NCS_grid", memo=memo)

    def make(metric):
        vals = np.zeros((len(headsets), len(items)))
        for i, (it, (c, d)) in enumerate(zip(items, cells)):
            lc = _cell_letter(it, c)
            vals[:, i] = letter_metric(sc[2 * i], lc, metric) - letter_metric(sc[2 * i + 1], lc, metric)
        return vals, {}

    return _by_metric("ncs-grid", [it.id for it in items], make)


def text_arm(engine: Engine, items: list[Item], headsets: list[HeadSet], batch_size: int = 64, progress: bool = False,
             memo: ProbeMemo | None = None, ablation: str = "attention", reference: dict[str, list[Item]] | None = None,
             seed: int = 0) -> Outcomes:
    """Drop in P(key) on text-solvable items when S is hidden from the question and option
    tokens at all rows: a head-set that is only generically important drops here too.
    With a head-output ``ablation``, S's outputs are replaced at all rows instead (as :func:`ncs`)."""
    _check_items(items, "text arm")
    drops = _drops(engine, items, headsets, Action("mask", rows="all", keys="text"), batch_size, progress, "text arm", memo=memo,
                   ablation=ablation, reference=(reference or {}).get("text"), seed=seed)
    return _by_metric("text", [it.id for it in items], lambda m: (drops[m], {}))


def head_attention_mass(engine: Engine, items: list[Item]) -> dict[str, np.ndarray]:
    """Baseline attention of every head from the last prompt row, averaged over ``items``:
    ``image_mass [L, H]`` = mean Σ_{t ∈ image-pad tokens} A[l,h][last, t] (for the
    attention-matched and text-heavy controls and Table 17's mass columns) and
    ``sink_mass [L, H]`` = mean A[l,h][last, 0] (the first token: sinks). No intervention."""
    import torch

    from vheads.engine import positions_mask

    if not items:
        raise ValueError("head_attention_mass needs at least one item")
    image = sink = 0.0
    requests = []
    for it in items:
        pr = engine.lm.adapter.build(it, engine.lm.processor)
        T = pr.layout.n_tokens
        groups = torch.stack([positions_mask(T, pr.layout.image_positions), positions_mask(T, [0])])  # [2, T]
        requests.append((pr, {"capture": positions_mask(T, pr.layout.spans["last"])}, groups))
    for res in engine.capture_many(requests):  # items batched across forwards
        m = res["capture"]  # [L, H, 2]
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
        probs = run_probes(engine, [Probe(engine.lm.adapter.build(it, engine.lm.processor), None) for it in items])
        p = np.array([pi[0][_letter(it)] for pi, it in zip(probs, items)])
        lo, hi = EXPECTED.get(name, (0.0, 1.0))
        m = float(p.mean())
        report[name] = {"n": len(items), "mean_p_key": m, "expected": [lo, hi], "ok": lo <= m <= hi, "p_key": p.tolist()}
    return report


def _blank(item: Item) -> Item:
    img = Image.new("RGB", item.image.size, (128, 128, 128))
    return Item(item.id + "-blank", item.kind + "-leak", img, item.question, item.answer, {}, None, item.options, item.query_span, dict(item.meta))
