"""Study: time per stage of the default ``vheads study``.

HOOK — the study runner is built elsewhere. When ``vheads.study`` has ``run_study``
this runs the default configuration (``vheads.study.load_config()``) into a temporary
folder and reports ``StudyResult.seconds`` (discovery, overlap, controls, evaluation,
audit, report). Without it, it reports "not available yet". ``--quick`` skips it (the
default study is far longer than a few minutes on a 2-core CPU).
"""

from __future__ import annotations

import tempfile
import time


def run(log, quick: bool = False) -> dict:
    try:
        import vheads.study as study
    except Exception as e:  # noqa: BLE001 - the package may be half-built
        return {"available": False, "why": f"not available yet: import vheads.study failed ({e})"}
    run_study = getattr(study, "run_study", None)
    if run_study is None:
        return {"available": False, "why": "not available yet: vheads.study has no run_study"}
    if quick:
        return {"available": False, "why": "skipped with --quick (run: python benchmarks/run.py --only study)"}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        try:
            result = run_study(study.load_config(), out=f"{tmp}/study", progress=False)
        except Exception as e:  # noqa: BLE001 - report, do not lose the other rows
            return {"available": False, "why": f"run_study failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"}
        total = time.perf_counter() - t
    stages = dict(getattr(result, "seconds", {}) or {})
    log(f"  study: {total:.1f}s (" + ", ".join(f"{k} {v:.1f}s" for k, v in stages.items()) + ")")
    return {"available": True, "total_s": total, "stages_s": stages}
