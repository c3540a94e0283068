"""The exact causal map: every head alone, and every whole layer, tested like any head-set.

DESIGN.md "Causal map": for a head h, ``effect[h]`` is the test's statistic with S = {h}:

- ``ncs`` — ``mean_matched drop − mean_mismatched drop``, ``drop = P_base(key) − P_masked(key)``
  with h hidden from every image token at ``rows`` (default all rows);
- ``ncs-grid`` — ``mean [P(c | hide R_d from h) − P(c | hide R_c from h)]``;
- ``text`` — the mean drop in P(key) on text-solvable items when h is hidden from the
  question and option tokens.

The L·H one-head sets and the L whole-layer sets of a test go to
:func:`vheads.evaluation.run_test` in one call, so they share forwards exactly as a
head-set's controls do: many sets per forward and several items per forward, the prefix
before the first acted row computed once per item where the rows allow it (the text arm),
and otherwise layer-prefix sharing (:mod:`vheads.engine._layers`): a head at layer l acts
on nothing below l, so its row shares layers 0 … l − 1 with every row whose heads sit at l
or above, and with the item's baseline.

Every per-item value is kept, both NCS arms apart, under every metric (p4, logprob,
logit-diff), so each effect is recomputable from what is stored
(:meth:`CausalMap.to_dict`, :func:`save_causal_map`, :meth:`CausalMap.store_rows`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vheads._errors import VheadsError
from vheads.evaluation import METRICS, TEST_SETS, HeadSet, item_sets  # torch-free: a config check reads this module

if TYPE_CHECKING:
    from vheads.evaluation import ProbeMemo

#: the tests a causal map can be taken in (the hide-S tests; CERS steers, it hides nothing)
CAUSAL_TESTS = ("ncs", "ncs-grid", "text")
#: the ``format`` of a causal-map file
FORMAT = "vheads.causal-map/1"
#: the ablation every vheads test runs (DESIGN.md "Ablation types")
DEFAULT_ABLATION = "attention"
#: the setting id of the causal setting: the top-k heads of the exact NCS map (DESIGN.md "Causal map")
CAUSAL_SETTING = "causal-ncs"
#: what NCS's per-item values are called in :attr:`CausalMap.per_item` (every other test: ``value``)
NCS_ARMS = ("matched", "mismatched")


def head_id(layer: int, head: int) -> str:
    """The id of the one-head set {(layer, head)}: ``L3H5``."""
    return f"L{layer}H{head}"


def layer_id(layer: int) -> str:
    """The id of the set of every head of ``layer``: ``L3``."""
    return f"L{layer}"


def causal_units(n_layers: int, n_heads: int, attention_layers=None, layers: bool = True) -> tuple[list[str], list[HeadSet]]:
    """The ids and head-sets a causal map tests: every head alone (layer-major), then, with
    ``layers``, every whole layer; on a hybrid model the softmax layers' heads only."""
    att = list(range(n_layers)) if attention_layers is None else sorted(int(x) for x in attention_layers)
    ids = [head_id(l, h) for l in att for h in range(n_heads)]
    sets = [HeadSet([(l, h)], n_layers, n_heads, att) for l in att for h in range(n_heads)]
    if layers:
        ids += [layer_id(l) for l in att]
        sets += [HeadSet([(l, h) for h in range(n_heads)], n_layers, n_heads, att) for l in att]
    return ids, sets


@dataclass
class CausalMap:
    """One test's causal map: per-item values of every unit (head or whole layer).

    ``per_item[metric][arm]`` is ``[n_units, n_items of that arm]``; the arms are
    ``matched`` / ``mismatched`` (NCS drops) or ``value`` (NCS_grid's contrast, the text
    arm's drop). ``item_ids[arm]`` names the items of each arm, ``unit_ids`` the units in
    row order (``L3H5`` a head, ``L3`` a whole layer)."""

    test: str  # 'ncs-all' (NCS at rows 'all'), 'ncs-grid', 'text'
    ablation: str
    n_layers: int
    n_heads: int
    attention_layers: list[int]
    unit_ids: list[str]
    item_ids: dict[str, list[str]]
    per_item: dict[str, dict[str, np.ndarray]]
    meta: dict = field(default_factory=dict)  # rows, seed, n: how the items were made
    method: str = "exact"  # how the values were obtained: 'exact' (every set run); an estimate names itself

    def effects(self, metric: str = "p4") -> np.ndarray:
        """Each unit's statistic ``[n_units]``: NCS = mean matched drop − mean mismatched drop,
        every other test the mean of its per-item values."""
        arms = self.per_item[_check_metric(metric)]
        if "matched" in arms:
            return arms["matched"].mean(axis=1) - arms["mismatched"].mean(axis=1)
        return arms["value"].mean(axis=1)

    def head_map(self, metric: str = "p4") -> np.ndarray:
        """The one-head effects as a layer × head map ``[L, H]`` (NaN in a layer without heads)."""
        out = np.full((self.n_layers, self.n_heads), np.nan)
        for uid, e in zip(self.unit_ids, self.effects(metric)):
            lh = _parse_unit(uid)
            if lh[1] is not None:
                out[lh] = e
        return out

    def layer_effects(self, metric: str = "p4") -> np.ndarray:
        """The whole-layer effects ``[L]`` (NaN where a layer was not tested)."""
        out = np.full(self.n_layers, np.nan)
        for uid, e in zip(self.unit_ids, self.effects(metric)):
            layer, head = _parse_unit(uid)
            if head is None:
                out[layer] = e
        return out

    def top_heads(self, k: int, metric: str = "p4") -> HeadSet:
        """The k heads of largest one-head effect (ties by (layer, head) order): the causal setting's S."""
        return HeadSet.from_scores(self.head_map(metric), k, attention_layers=self.attention_layers)

    # ---- storage -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-ready record: every per-item value (both arms, every metric), and the
        effects derived from them (p4) for a quick look."""
        return {"method": self.method, "test": self.test, "ablation": self.ablation, "n_layers": self.n_layers, "n_heads": self.n_heads,
                "attention_layers": self.attention_layers, "unit_ids": self.unit_ids, "item_ids": self.item_ids,
                "meta": self.meta,
                "per_item": {m: {a: v.tolist() for a, v in arms.items()} for m, arms in self.per_item.items()},
                "effect_p4": {"heads": _nan_none(self.head_map()), "layers": _nan_none(self.layer_effects())}}

    @classmethod
    def from_dict(cls, d: dict) -> CausalMap:
        return cls(d["test"], d["ablation"], int(d["n_layers"]), int(d["n_heads"]), [int(x) for x in d["attention_layers"]],
                   list(d["unit_ids"]), {a: list(v) for a, v in d["item_ids"].items()},
                   {m: {a: np.asarray(v, dtype=float).reshape(len(d["unit_ids"]), -1) for a, v in arms.items()}
                    for m, arms in d["per_item"].items()}, dict(d.get("meta") or {}), d.get("method", "exact"))

    def store_rows(self, unit_id: str) -> list[tuple]:
        """Rows of the results store's ``causal_map`` table: (unit_id, method, test, ablation,
        headset_id, item_id, arm, p4, logprob, logit-diff), one per unit, item and arm."""
        rows = []
        for arm, items in self.item_ids.items():
            vals = [self.per_item[m][arm] for m in METRICS]
            for j, uid in enumerate(self.unit_ids):
                rows += [(unit_id, self.method, self.test, self.ablation, uid, iid, arm, *(float(v[j, i]) for v in vals))
                         for i, iid in enumerate(items)]
        return rows

    @classmethod
    def from_store_rows(cls, rows: list[tuple], n_layers: int, n_heads: int, attention_layers=None) -> dict[str, CausalMap]:
        """The maps of ``causal_map`` table rows (as :meth:`store_rows` writes them, without
        the unit id: (method, test, ablation, headset_id, item_id, arm, p4, logprob,
        logit-diff)), keyed by :func:`map_key`."""
        att = list(range(n_layers)) if attention_layers is None else [int(x) for x in attention_layers]
        grouped: dict[tuple[str, str, str], list[tuple]] = {}
        for method, *r in rows:
            grouped.setdefault((method, r[0], r[1]), []).append(tuple(r))
        out = {}
        for (method, test, ablation), rs in grouped.items():
            units = sorted({r[2] for r in rs}, key=_unit_order)
            arms = sorted({r[4] for r in rs}, key=lambda a: NCS_ARMS.index(a) if a in NCS_ARMS else 2)
            items = {a: sorted({r[3] for r in rs if r[4] == a}) for a in arms}
            u_at = {u: i for i, u in enumerate(units)}
            at = {a: {iid: i for i, iid in enumerate(items[a])} for a in arms}
            per = {m: {a: np.full((len(units), len(items[a])), np.nan) for a in arms} for m in METRICS}
            for r in rs:
                for m, v in zip(METRICS, r[5:8]):
                    per[m][r[4]][u_at[r[2]], at[r[4]][r[3]]] = np.nan if v is None else v
            out[map_key(test, ablation, method)] = cls(test, ablation, n_layers, n_heads, att, units, items, per, method=method)
        return out


def map_key(test: str, ablation: str, method: str = "exact") -> str:
    """How maps are keyed: the test id, ``@ablation`` added for an ablation other than
    attention and ``:method`` for a map that is not the exact one (``ncs-all@zero:atp``)."""
    return test + ("" if ablation == DEFAULT_ABLATION else f"@{ablation}") + ("" if method == "exact" else f":{method}")


def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")
    return metric


def _parse_unit(uid: str) -> tuple[int, int | None]:
    """``L3H5`` -> (3, 5); ``L3`` -> (3, None)."""
    layer, _, head = uid[1:].partition("H")
    return int(layer), (int(head) if head else None)


def _unit_order(uid: str) -> tuple[int, int, int]:
    """Heads layer-major first, then whole layers (the order :func:`causal_units` gives)."""
    layer, head = _parse_unit(uid)
    return (1, layer, 0) if head is None else (0, layer, head)


def _nan_none(a: np.ndarray) -> list:
    return [None if not np.isfinite(x) else float(x) for x in a.ravel()] if a.ndim == 1 else [_nan_none(r) for r in a]


def check_ablation(ablation: str, tests=("ncs",)) -> dict:
    """The keyword arguments that pass ``ablation`` to :func:`vheads.evaluation.run_test`:
    none for ``attention`` (what every test runs); ``zero`` and ``resample`` for the tests
    that take a head-output ablation (NCS, the text arm). ``mean`` needs a reference set of
    items, which a causal map does not draw: refused, as is anything else (one line)."""
    from vheads.evaluation import check_ablation as check_test_ablation

    if ablation == DEFAULT_ABLATION:
        return {}
    if check_test_ablation(ablation, tests).replacement == "mean":
        raise VheadsError("--ablation 'mean': a causal map draws no reference set for the mean; use attention, zero or "
                          "resample (vheads evaluate --ablation mean tests a head-set with one)")
    return {"ablation": ablation}


def check_causal_request(tests, rows: str = "all", n: int = 2, batch_size: int = 1, seed: int = 0,
                         ablation: str = DEFAULT_ABLATION) -> None:
    """Validate a causal-map request before any work (the tests, the row group, ``n`` ≥ 2,
    ``batch_size`` ≥ 1, the seed's range, the ablation)."""
    from vheads.engine import ROW_GROUPS
    from vheads.evaluation import check_sizes

    for t in tests:
        if t not in CAUSAL_TESTS:
            raise VheadsError(f"--test {t!r}: a causal map is taken in {', '.join(CAUSAL_TESTS)} (tests that hide heads)")
    if not tests:
        raise VheadsError(f"--test: name at least one of {', '.join(CAUSAL_TESTS)}")
    check_sizes(n, batch_size, seed)
    if rows not in ROW_GROUPS:
        raise VheadsError(f"--rows {rows!r}: unknown row group; choose from {', '.join(ROW_GROUPS)}")
    check_ablation(ablation, tests)


def check_causal_tests(tests, key: str = "causal_tests") -> None:
    """A study's ``causal_tests``: each one of :data:`CAUSAL_TESTS`, none twice (``[]``: no causal map)."""
    for t in tests:
        if t not in CAUSAL_TESTS:
            raise VheadsError(f"config key {key!r}: unknown test {t!r}; a causal map is taken in {', '.join(CAUSAL_TESTS)}")
    if len(set(tests)) < len(tests):
        raise VheadsError(f"config key {key!r}: lists a test twice: {list(tests)}")


def causal_item_sets(tests, n: int, seed_of, source=None, templates=None) -> dict[str, list]:
    """``{kind: n items}`` of every kind the ``tests`` run on (see :data:`TEST_SETS`)."""
    return item_sets(sorted({k for t in tests for k in TEST_SETS[t]}), n, seed_of, source, templates)


def per_item_values(res, test: str, sets: dict, rows: str) -> tuple[str, dict, dict]:
    """The test id, ``per_item[metric][arm]`` ``[n_sets, n_items]`` and ``item_ids[arm]`` of
    one :func:`vheads.evaluation.run_test` result: NCS's drops per arm (``matched``,
    ``mismatched``), every other test's values as arm ``value``."""
    if test == "ncs":
        per = {m: {arm: res.under(m).detail[f"drop_{arm}"] for arm in NCS_ARMS} for m in METRICS}
        items = {arm: [it.id for it in sets[f"class-{arm}"]] for arm in NCS_ARMS}
    else:
        per = {m: {"value": res.under(m).values} for m in METRICS}
        items = {"value": list(res.item_ids)}
    return (f"ncs-{rows}" if test == "ncs" else test), per, items


def exact_causal_map(engine, sets: dict[str, list], tests=("ncs",), rows: str = "all", ablation: str = DEFAULT_ABLATION,
                     layers: bool = True, seed: int = 0, batch_size: int = 128, progress: bool = False,
                     memo: ProbeMemo | None = None, cache: dict | None = None) -> dict[str, CausalMap]:
    """The exact causal map of every head alone (and, with ``layers``, every whole layer) in
    each of ``tests`` (:data:`CAUSAL_TESTS`), on ``sets`` (``{kind: items}``, the kinds of
    :data:`vheads.evaluation.TEST_SETS`; :func:`causal_item_sets` makes them).

    ``rows``: where NCS and NCS_grid hide the heads (the text arm hides at all rows);
    ``ablation``: what hiding means (DESIGN.md "Ablation types"; default ``attention``);
    ``seed``: NCS_grid's distractor cells; ``batch_size``: rows per forward; ``memo`` /
    ``cache``: as in :func:`vheads.evaluation.ncs`. Returns ``{test id: CausalMap}``, the
    test id as the store names it (``ncs-all``, ``ncs-grid``, ``text``), ``@ablation`` added
    for an ablation other than attention."""
    check_causal_request(tests, rows, n=2, batch_size=batch_size, seed=seed, ablation=ablation)
    extra = check_ablation(ablation, tests)
    from vheads.evaluation import run_test

    L, H = engine.shape
    att = list(engine.lm.attention_layers)
    ids, hsets = causal_units(L, H, att, layers)
    out = {}
    for test in tests:
        res = run_test(engine, test, sets, hsets, 1.0, rows, seed, batch_size, progress, cache=cache if test == "ncs" else None,
                       memo=memo, **extra)
        tid, per, items = per_item_values(res, test, sets, rows)
        n = {arm: len(v) for arm, v in items.items()}
        out[map_key(tid, ablation)] = CausalMap(tid, ablation, L, H, att, ids, items, per,
                                                {"rows": rows if test != "text" else "all", "seed": seed, "n": n})
    return out


def save_causal_map(maps: dict[str, CausalMap], path: str | Path, model: dict | None = None) -> Path:
    """Write ``maps`` as one ``vheads.causal-map/1`` JSON file (every per-item value, both
    arms, every metric; ``model``: provenance, e.g. ``{"id": ...}``)."""
    from vheads._io import atomic_write, json_safe

    path = Path(path)
    doc = {"format": FORMAT, "model": model or {}, "maps": {k: m.to_dict() for k, m in maps.items()}}
    atomic_write(path, lambda fh: fh.write(json.dumps(json_safe(doc), allow_nan=False)))
    return path


def load_causal_map(path: str | Path) -> dict[str, CausalMap]:
    """The maps of a file :func:`save_causal_map` wrote."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise VheadsError(f"cannot read causal-map file {path}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise VheadsError(f"{path} is not a {FORMAT} file")
    return {k: CausalMap.from_dict(d) for k, d in doc["maps"].items()}
