"""Necessity per item kind: does S's necessity hold on every kind of question, or only some?

For each setting's discovered head-set S and each of its layer-matched controls, the mean
per-item necessity value on each item kind of the necessity tests (DESIGN.md "Metric
definitions"), in every metric the store holds:

==================  ==========  =====================================================
kind                test        per-item value x_i (stored by the evaluation stage)
==================  ==========  =====================================================
class-matched       ncs-all     drop = P_base(key) − P_masked(key), arms 'matched'
class-mismatched    ncs-all     drop, arms 'mismatched' (generic damage)
grid-oracle         ncs-grid    P(c | hide R_d from S) − P(c | hide R_c from S)
text                text        drop when S is hidden from the text tokens
==================  ==========  =====================================================

One row of ``kind_necessity`` per (setting, kind, metric, head-set): ``n`` items, ``mean``
= mean_i x_i and ``sd`` (ddof = 1); for S also its 95% t-interval ``mean ± t_{0.975, n−1} ·
sd / √n`` and the percentile bootstrap of the mean (2,000 resamples, ``boot_seed``
derived from the run's seed, the setting, kind and metric). The report's per-kind control
mean, band and rank p are taken from the control rows. No forward pass: the stage reads the
``arms`` and ``outcomes`` rows the evaluation stage stored, so it costs no model time.
"""

from __future__ import annotations

import time

import numpy as np

from vheads._ids import parse_headset_id
from vheads._seeds import derived_seed
from vheads.store import METRIC_COLUMNS, register_table
from vheads.study._stage import Stage, register_stage

TABLE = "kind_necessity"
register_table(TABLE, "setting TEXT, kind TEXT, test TEXT, metric TEXT, headset_id TEXT, control TEXT, n INTEGER, "
               "mean REAL, sd REAL, t_lo REAL, t_hi REAL, boot_lo REAL, boot_hi REAL, boot_seed INTEGER",
               "setting, kind, metric, headset_id")
#: the controls each kind's S is read against (exchangeable with S: DESIGN.md "Controls and statistics")
CONTROL = "layer-matched"
N_RESAMPLES = 2000
#: kind -> (test, where its per-item values are: an ``arms`` arm, or None for ``outcomes``)
KINDS: dict[str, tuple[str, str | None]] = {
    "class-matched": ("ncs-all", "matched"),
    "class-mismatched": ("ncs-all", "mismatched"),
    "grid-oracle": ("ncs-grid", None),
    "text": ("text", None),
}


def per_item_values(store, kind: str, metrics: list[str]) -> dict[tuple[str, str, str], np.ndarray]:
    """``{(setting, headset_id, metric): x}``, x the per-item values of ``kind`` (item_id order)
    for S and its layer-matched controls (the k sweep's sets and every other control left out)."""
    test, arm = KINDS[kind]
    cols = ", ".join(METRIC_COLUMNS[m] for m in metrics)
    if arm is None:
        got = store.query(f"SELECT setting, headset_id, {cols} FROM outcomes WHERE test = ? ORDER BY setting, headset_id, "
                          "item_id", test)
    else:
        got = store.query(f"SELECT setting, headset_id, {cols} FROM arms WHERE test = ? AND arm = ? ORDER BY setting, "
                          "headset_id, item_id", test, arm)
    out: dict[tuple[str, str, str], list[float]] = {}
    keep: dict[str, bool] = {}  # head-set id -> S or a layer-matched control (parsed once)
    for setting, hid, *values in got:
        if hid not in keep:
            h = parse_headset_id(hid)
            keep[hid] = h.k is None and h.role in ("S", CONTROL)
        if keep[hid]:
            for m, v in zip(metrics, values):
                out.setdefault((setting, hid, m), []).append(np.nan if v is None else float(v))
    return {key: np.asarray(v) for key, v in out.items()}


def kind_rows(store, seed: int) -> list[tuple]:
    """The ``kind_necessity`` rows of ``store`` (module docstring); a head-set with a non-finite
    value on a kind (a store of an older vheads lacking a metric, a diverged forward) gets no
    mean there (NULL)."""
    from vheads.evaluation import bootstrap_ci, t_interval

    metrics = [m for m in METRIC_COLUMNS if m == "p4" or store.has_metric(m, "outcomes") and store.has_metric(m, "arms")]
    rows = []
    for kind, (test, _) in KINDS.items():
        for (setting, hid, metric), x in sorted(per_item_values(store, kind, metrics).items()):
            finite = bool(np.all(np.isfinite(x)))
            mean = float(x.mean()) if finite else None
            sd = float(x.std(ddof=1)) if finite and len(x) >= 2 else None
            ci = boot = boot_seed = None
            if hid == "S" and finite and len(x) >= 2:
                ci = t_interval(x)
                boot_seed = derived_seed(seed, "kind-necessity", setting, kind, metric)
                boot = bootstrap_ci(x, N_RESAMPLES, seed=boot_seed)
            rows.append((setting, kind, test, metric, hid, "S" if hid == "S" else CONTROL, len(x), mean, sd,
                         ci and ci.low, ci and ci.high, boot and boot.low, boot and boot.high, boot_seed))
    return rows


def kinds_stage(store, cfg) -> None:
    """Compute and commit the ``kind-necessity`` unit once the evaluation is stored (once: a
    resumed run skips it)."""
    if "kind-necessity" in store.done_units():
        return
    t0 = time.time()
    rows = kind_rows(store, cfg.seed)
    store.commit_unit("kind-necessity", "kind-necessity", time.time() - t0, {TABLE: rows})


def _run(ctx) -> int:
    kinds_stage(ctx.store, ctx.cfg)
    return 0  # computed on the driver: no unit of the backend


STAGE = register_stage(Stage("necessity by kind", 65, run=_run, tables=(TABLE,)))
