"""The AtP estimate as a causal map (``method = "atp"``), stored beside the exact map.

:func:`vheads.causal.atp_map` estimates every head's drop per item and arm from one forward
and one backward (DESIGN.md "Causal map"): ``drop_h ≈ −Σ_rows ⟨∂p4/∂o_h, o_h^abl − o_h⟩``,
the AtP* form for the attention ablation, plain AtP for ``zero``. :func:`atp_causal_maps`
runs it on the same items as :func:`vheads.causal.exact_causal_map` and returns
:class:`~vheads.causal.CausalMap` objects with the same test ids, arms and head ids, so the
results store's ``causal_map`` table holds both and the report compares them row by row.

AtP estimates heads only (no whole-layer units) and only the metric it differentiates:
the per-item values are in p4; logprob and logit-diff would each need a backward of their
own and are NaN (NULL in the store).
"""

from __future__ import annotations

import numpy as np

from vheads.causal._atp import ABLATIONS as ATP_ABLATIONS
from vheads.causal._atp import AtpMap, atp_map
from vheads.causal._map import CAUSAL_TESTS, CausalMap, causal_units, map_key
from vheads.evaluation import METRICS

#: the causal-map tests AtP estimates (NCS_grid contrasts two regions: not one ablation to linearise)
ATP_CAUSAL_TESTS = tuple(t for t in CAUSAL_TESTS if t in ("ncs", "text"))
METHOD = "atp"
METRIC = "p4"  # the metric AtP differentiates; the other metric columns are NaN


def causal_map_of_atp(atp: AtpMap) -> CausalMap:
    """``atp``'s per-item drops as a :class:`CausalMap` (``method = "atp"``): one unit per head
    of the softmax layers, arms ``matched`` / ``mismatched`` (NCS) or ``value`` (text, as the
    exact map names it), values in p4 and NaN under the other metrics."""
    L, H = atp.arms[next(iter(atp.arms))].drops.shape[1:]
    att = list(atp.attention_layers)
    ids, _ = causal_units(L, H, att, layers=False)
    li = np.repeat(att, H)
    hi = np.tile(np.arange(H), len(att))
    per: dict[str, dict[str, np.ndarray]] = {m: {} for m in METRICS}
    items = {}
    for arm, a in atp.arms.items():
        name = "value" if atp.test == "text" else arm
        vals = a.drops[:, li, hi].T  # [n_units, n_items]
        for m in METRICS:
            per[m][name] = vals if m == atp.metric else np.full_like(vals, np.nan)
        items[name] = list(a.item_ids)
    tid = f"ncs-{atp.rows}" if atp.test == "ncs" else atp.test
    return CausalMap(tid, atp.ablation, L, H, att, ids, items, per, {"rows": atp.rows, "n": {a: len(v) for a, v in items.items()},
                                                                     **atp.meta}, method=METHOD)


def atp_causal_maps(engine, sets: dict, tests=("ncs",), ablation: str = "attention", rows: str = "all",
                    batch_size: int = 8, token_budget: int = 1 << 15) -> dict[str, CausalMap]:
    """The AtP map of each of ``tests`` that AtP estimates (:data:`ATP_CAUSAL_TESTS`; others
    are skipped) under ``ablation`` (``attention``: AtP*, ``zero``: AtP; others: ``{}``), on
    ``sets`` as :func:`vheads.causal.exact_causal_map` takes them, keyed by
    :func:`vheads.causal.map_key` with method ``atp`` (``ncs-all:atp``, ``ncs-all@zero:atp``)."""
    if ablation not in ATP_ABLATIONS:
        return {}
    out = {}
    for test in (t for t in tests if t in ATP_CAUSAL_TESTS):
        cm = causal_map_of_atp(atp_map(engine, sets, test, ablation, rows, METRIC, batch_size, token_budget))
        out[map_key(cm.test, ablation, METHOD)] = cm
    return out
