"""Study: the default ``vheads study`` with its speed-ups on and off.

Runs the default configuration (``vheads.study.load_config()``, the built-in tiny model)
three times into temporary folders, each in a fresh process (kept memory is set once per
process, so the arms cannot share one):

- ``on``: the defaults;
- ``off``: ``run.cross_item = false`` (one item per forward, the behaviour before
  cross-item batching), everything else on;
- ``all-off``: every speed-up of issue #13 that has a switch off — cross-item batching,
  layer-prefix sharing (``VHEADS_SHARE_LAYERS=0``), the last layer on the read rows
  (``VHEADS_LAST_LAYER_ROWS=0``), the probe memo (``VHEADS_PROBE_MEMO=0``) and kept freed
  memory (``VHEADS_KEEP_FREED=0``). Interventions on sdpa, prefix reuse and running a
  repeated head-set once have no switch and stay on, so this arm is still faster than
  the study was before #13.

It reports the time per stage (``StudyResult.seconds``) of each arm, the ratios off / on
and all-off / on, and whether the arms stored the same outcomes (same keys; largest
|difference| of the values). The report stage is skipped (its time does not depend on the
engine). ``--quick`` runs a reduced study (fewer items and controls) instead: its ratios
are smoke figures, without a target.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

QUICK = {"n_discovery": 8, "n_eval": 4, "splits": 20, "controls": {"layer-matched": 19, "any-layer": 9},
         "algebra_controls": 9, "beta_sweep": [10.0, 10000.0], "k_sweep": [1, 4]}
#: arm -> (run-table overrides, environment)
ARMS = {
    "on": ({}, {}),
    "off": ({"cross_item": False}, {}),
    "all-off": ({"cross_item": False}, {"VHEADS_SHARE_LAYERS": "0", "VHEADS_LAST_LAYER_ROWS": "0", "VHEADS_PROBE_MEMO": "0",
                                        "VHEADS_KEEP_FREED": "0"}),
}
_ARM = r"""
import json, sys, time
import vheads.study as study
cfg = study.load_config(**json.loads(sys.argv[1]))
t = time.perf_counter()
result = study.run_study(cfg, out=sys.argv[2], progress=False, report=False)
print(json.dumps({"total_s": time.perf_counter() - t, "stages_s": dict(result.seconds)}))
"""


def _outcomes(run_dir):
    from vheads.study import Store

    s = Store(run_dir)
    try:
        return s.query("SELECT setting, test, headset_id, item_id, value FROM outcomes ORDER BY 1, 2, 3, 4")
    finally:
        s.close()


def _agree(a, b) -> dict:
    same = [r[:4] for r in a] == [r[:4] for r in b]
    return {"same_keys": same, "max_abs_outcome_diff": max((abs(x[4] - y[4]) for x, y in zip(a, b)), default=0.0) if same else None}


def run(log, quick: bool = False) -> dict:
    try:
        import vheads.study  # noqa: F401
    except Exception as e:  # noqa: BLE001 - the package may be half-built
        return {"available": False, "why": f"not available yet: import vheads.study failed ({e})"}
    out = {"available": True, "config": "reduced (--quick)" if quick else "default"}
    with tempfile.TemporaryDirectory() as tmp:
        for arm, (run_table, env) in ARMS.items():
            kwargs = {**(QUICK if quick else {}), "run": run_table}
            proc = subprocess.run([sys.executable, "-c", _ARM, json.dumps(kwargs), f"{tmp}/{arm}"], capture_output=True, text=True,
                                  env={**os.environ, **env})
            if proc.returncode != 0:  # report, do not lose the other rows
                last = (proc.stderr.strip().splitlines() or ["?"])[-1]
                return {"available": False, "why": f"run_study ({arm}) failed: {last[:200]}"}
            out[arm] = json.loads(proc.stdout.strip().splitlines()[-1])
            log(f"  study, {arm}: {out[arm]['total_s']:.1f}s (" + ", ".join(f"{k} {v:.1f}s" for k, v in out[arm]["stages_s"].items()) + ")")
        ref = _outcomes(f"{tmp}/on")
        out["outcomes"] = len(ref)
        for arm in ARMS:
            if arm != "on":
                out[f"agree_{arm}"] = _agree(ref, _outcomes(f"{tmp}/{arm}"))
    return out
