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

``python benchmarks/bench_study.py --against REV`` compares this checkout's default
``vheads study`` with revision REV's (issue 32: the study must stay within 1.15× of
cb0dfac's): REV is checked out into a temporary ``git worktree`` (removed after), and the two
studies run one after the other, each alone in a fresh process (REV first), each into a
temporary folder, the report included (``--no-report``: without it). It prints each stage's
seconds (``StudyResult.seconds``, what ``vheads study`` prints at its end) for both, the total,
and the ratio this / REV. ``--smoke`` runs a tiny study (a few items and controls) to check
the harness: its ratio is no figure. Time it only on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
result = study.run_study(cfg, out=sys.argv[2], progress=False, report=len(sys.argv) > 3 and sys.argv[3] == "report")
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


#: ``--smoke``: a study small enough to check the harness (config keys cb0dfac knows too)
SMOKE = {"n_discovery": 4, "n_eval": 2, "splits": 4, "controls": {"layer-matched": 3, "any-layer": 2},
         "algebra_controls": 2, "beta_sweep": [10000.0], "k_sweep": [1], "k_sweep_controls": 2, "run": {"shard_size": 2}}
REPO = Path(__file__).resolve().parents[1]


def study_arm(src: Path, overrides: dict, out: Path, report: bool) -> dict:
    """One study in a fresh process importing vheads from ``src``: its total and stage seconds
    (``wall_s``: the process, imports included)."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _ARM, json.dumps(overrides), str(out), "report" if report else "-"],
                          capture_output=True, text=True, env=env, cwd=out.parent)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"bench_study: the study of {src} failed: {last[:300]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "wall_s": wall}


def against(rev: str, smoke: bool = False, report: bool = True, log=print, keep: Path | None = None) -> dict:
    """This checkout's study and REV's, one after the other (REV first), each alone; the
    ratio this / REV of the total and of each stage. REV lives in a temporary worktree."""
    try:
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except subprocess.CalledProcessError:
        raise SystemExit(f"bench_study: --against {rev!r} is not a commit of {REPO}") from None
    overrides = SMOKE if smoke else {}
    with tempfile.TemporaryDirectory(prefix="vheads-bench-study-") as tmp:
        tree = Path(tmp) / "rev"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), sha], capture_output=True, text=True,
                       check=True)
        try:
            arms = {}
            for name, src in ((rev, tree / "src"), ("this", REPO / "src")):
                log(f"study of {name} ({src}) ...")
                arms[name] = study_arm(src, overrides, Path(tmp) / f"run-{len(arms)}", report)
            if keep is not None:  # this checkout's run folder, for a reader (or a test) to recompute from
                shutil.copytree(Path(tmp) / "run-1", keep, dirs_exist_ok=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)
    old, new = arms[rev], arms["this"]
    stages = list(dict.fromkeys([*old["stages_s"], *new["stages_s"]]))
    log(f"{'stage':<14} {rev[:12]:>12} {'this':>10} {'this/' + rev[:7]:>12}")
    for st in stages:
        a, b = old["stages_s"].get(st), new["stages_s"].get(st)
        ratio = f"{b / a:.2f}x" if a and b is not None else "-"
        log(f"{st:<14} {_secs(a):>12} {_secs(b):>10} {ratio:>12}")
    ratio = new["total_s"] / old["total_s"]
    log(f"{'total':<14} {_secs(old['total_s']):>12} {_secs(new['total_s']):>10} {ratio:>11.2f}x"
        + ("  (--smoke: not a figure)" if smoke else "  (issue 41: target <= 1.2x against 0b3182a)"))
    log(f"{'process wall':<14} {_secs(old['wall_s']):>12} {_secs(new['wall_s']):>10} {new['wall_s'] / old['wall_s']:>11.2f}x")
    return {"against": rev, "commit": sha, "smoke": smoke, "report": report, rev: old, "this": new, "ratio_total": ratio}


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", required=True, metavar="REV", help="the revision to compare with (e.g. cb0dfac)")
    ap.add_argument("--smoke", action="store_true", help="a tiny study: checks the harness, no figure")
    ap.add_argument("--no-report", action="store_true", help="leave the report stage out of both studies")
    ap.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    ap.add_argument("--keep", metavar="DIR", type=Path, help="copy this checkout's run folder here")
    args = ap.parse_args(argv)
    res = against(args.against, args.smoke, not args.no_report, keep=args.keep)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
