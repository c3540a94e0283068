"""Study: the default ``vheads study`` with cross-item batching on and off.

Runs the default configuration (``vheads.study.load_config()``, the built-in tiny model)
twice into temporary folders — ``run.cross_item = true`` (the default) and ``false`` (one
item per forward, the behaviour before cross-item batching) — and reports the time per
stage (``StudyResult.seconds``) of each, the ratio off / on, and whether the two runs
stored the same outcomes (same keys; largest |difference| of the values). The report
stage is skipped (its time does not depend on batching). ``--quick`` runs a reduced study
(fewer items and controls) instead: its ratio is a smoke figure, without a target.
"""

from __future__ import annotations

import tempfile
import time

QUICK = {"n_discovery": 8, "n_eval": 4, "splits": 20, "controls": {"layer-matched": 19, "any-layer": 9},
         "algebra_controls": 9, "beta_sweep": [10.0, 10000.0], "k_sweep": [1, 4]}


def _outcomes(run_dir):
    from vheads.study import Store

    s = Store(run_dir)
    try:
        return s.query("SELECT setting, test, headset_id, item_id, value FROM outcomes ORDER BY 1, 2, 3, 4")
    finally:
        s.close()


def run(log, quick: bool = False) -> dict:
    try:
        import vheads.study as study
    except Exception as e:  # noqa: BLE001 - the package may be half-built
        return {"available": False, "why": f"not available yet: import vheads.study failed ({e})"}
    out = {"available": True, "config": "reduced (--quick)" if quick else "default"}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("on", "off"):
            cfg = study.load_config(**(QUICK if quick else {}), run={"cross_item": mode == "on"})
            t = time.perf_counter()
            try:
                result = study.run_study(cfg, out=f"{tmp}/{mode}", progress=False, report=False)
            except Exception as e:  # noqa: BLE001 - report, do not lose the other rows
                return {"available": False, "why": f"run_study failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"}
            out[mode] = {"total_s": time.perf_counter() - t, "stages_s": dict(result.seconds)}
            log(f"  study, cross-item {mode}: {out[mode]['total_s']:.1f}s (" + ", ".join(f"{k} {v:.1f}s" for k, v in result.seconds.items()) + ")")
        a, b = _outcomes(f"{tmp}/on"), _outcomes(f"{tmp}/off")
    out["same_keys"] = [r[:4] for r in a] == [r[:4] for r in b]
    out["outcomes"] = len(a)
    out["max_abs_outcome_diff"] = max((abs(x[4] - y[4]) for x, y in zip(a, b)), default=0.0) if out["same_keys"] else None
    return out
