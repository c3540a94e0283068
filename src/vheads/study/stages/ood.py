"""The pointing suite (seed Tables 22-27): on each ``ood_tasks`` task, its baseline audit and
every discovered setting's S with its first ``ood_controls`` layer-matched draws in CERS and
NCS (:mod:`vheads.data.ood`). One audit unit per task, one unit per task × setting × test ×
shard; last, at the headline β."""

from __future__ import annotations

import json
from pathlib import Path

from vheads.study._stage import CHECK_PATHS, Key, Stage, register_stage

KEYS = (
    Key("ood_tasks", [], "pointing suite: TASK:PATH (cvbench, mmstar, mathvista, countbenchqa, spatial457, spatialrgpt, mcq, "
        "mcq-retrieval)", later=True, type=list[str]),
    Key("n_ood", 80, "items per task (audit sets, CERS grids, NCS pairs)", later=True),
    Key("ood_controls", 1, "layer-matched draws tested with each S on every task (seed Tables 23-27: one)", later=True),
)


def validate_ood(cfg, bad) -> None:
    """Pointing-suite tasks: known task names, existing paths, one entry per task."""
    from vheads.data.ood import TASKS, is_task_spec

    seen = set()
    for spec in cfg.ood_tasks:
        if not isinstance(spec, str) or not is_task_spec(spec):
            bad("ood_tasks", f"{spec!r} is not TASK:PATH with TASK one of {', '.join(TASKS)}")
        task, _, arg = spec.partition(":")
        if task in seen:
            bad("ood_tasks", f"task {task!r} is listed twice")
        seen.add(task)
        if CHECK_PATHS.get() and not Path(arg.split(",")[0]).exists():
            bad("ood_tasks", f"{task}: path {arg.split(',')[0]!r} does not exist")
    if cfg.n_ood < 2:
        bad("n_ood", f"must be at least 2, got {cfg.n_ood}")
    if cfg.ood_controls < 0 or (cfg.ood_controls and cfg.ood_controls > cfg.controls.get("layer-matched", 0)):
        bad("ood_controls", f"must be between 0 and the layer-matched R ({cfg.controls.get('layer-matched', 0)}), got {cfg.ood_controls}")


def ood_units(store, cfg, beta: float | None = None) -> list[dict]:
    """Pointing suite: one audit unit per task, and per task x discovered setting x test
    (CERS, NCS) x shard one unit running S and its first ``ood_controls`` layer-matched draws."""
    units = []
    for spec in cfg.ood_tasks:
        task = spec.partition(":")[0]
        units.append({"unit_id": f"ood-audit/{task}", "kind": "ood-audit", "task": task, "spec": spec})
        for (sid,) in store.query("SELECT DISTINCT setting FROM headsets WHERE setting NOT LIKE '%&%' ORDER BY setting"):
            hs = store.query("SELECT headset_id, heads FROM headsets WHERE setting=? AND (control='S' OR "
                             "(control='layer-matched' AND draw<?)) ORDER BY control != 'S', draw", sid, cfg.ood_controls)
            for test in ("cers", "ncs"):
                for lo in range(0, cfg.n_ood, cfg.run.shard_size):
                    hi = min(cfg.n_ood, lo + cfg.run.shard_size)
                    units.append({"unit_id": f"ood/{task}/{sid}/{test}/{lo}-{hi}", "kind": "ood-eval", "task": task, "spec": spec,
                                  "setting": sid, "test": test, "shard": [lo, hi], "headset_ids": [h for h, _ in hs],
                                  "headsets": [json.loads(x) for _, x in hs], "beta": cfg.beta if beta is None else beta})
    return units


def _ood_sets(computer, spec):
    """A task's item sets, built once per replica."""
    from vheads.study._data import ood_sets

    if spec not in computer._ood:
        computer._ood[spec] = ood_sets(computer.cfg, spec)
    return computer._ood[spec]


def compute_ood_audit(computer, unit):
    """The baseline audit of one task (seed Table 22): oracle, floor, matched, mismatched, leak."""
    from vheads.evaluation import baseline_audit

    sets = _ood_sets(computer, unit["spec"])
    rep = baseline_audit(computer.engine, {k: sets[k] for k in ("oracle", "floor", "matched", "mismatched")})
    rows = [(unit["task"], n, r["n"], r["mean_p_key"], r["expected"][0], r["expected"][1], int(r["ok"])) for n, r in rep.items()]
    return {"rows": {"ood_audit": rows}}


def compute_ood_eval(computer, unit):
    """CERS (steer S onto the keyed cell vs a distractor) and NCS (all image tokens hidden
    at all rows, matched minus mismatched) of S and its controls on one task's shard."""
    from vheads.evaluation import METRICS, HeadSet, run_test

    eng, cfg = computer.engine, computer.cfg
    L, H = eng.shape
    ids = unit["headset_ids"]
    hsets = [HeadSet([tuple(h) for h in heads], L, H) for heads in unit["headsets"]]
    lo, hi = unit["shard"]
    sets = {k: v[lo:hi] for k, v in _ood_sets(computer, unit["spec"]).items()}
    key = (unit["unit_id"], unit["task"], unit["setting"])
    rows = []
    if unit["test"] == "cers":
        res = run_test(eng, "cers", {"grid-neutral": sets["cers"]}, hsets, unit.get("beta", cfg.beta), "all", cfg.seed, cfg.run.batch_size,
                       memo=computer.memo)
        detail = {"cers": [res.under(m).values for m in METRICS]}
    else:
        res = run_test(eng, "ncs", {"class-matched": sets["matched"], "class-mismatched": sets["mismatched"]}, hsets,
                       cfg.beta, "all", cfg.seed, cfg.run.batch_size, memo=computer.memo)
        detail = {f"ncs-{arm}": [res.under(m).detail[f"drop_{arm}"] for m in METRICS] for arm in ("matched", "mismatched")}
    for test, values in detail.items():  # each value under every metric (the store's metric columns)
        items = sets["cers"] if test == "cers" else sets[test.split("-")[1]]
        for j, hid in enumerate(ids):
            rows += [(*key, test, hid, it.id, *(float(v[j, i]) for v in values)) for i, it in enumerate(items)]
    return {"rows": {"ood_outcomes": rows}}


def ood_rows(ctx) -> list:
    """The audit sets and NCS baselines per task; CERS and NCS of every setting's S and its draws."""
    from vheads.study._rows import PlanStage

    cfg = ctx.cfg
    ood = PlanStage("pointing suite", tokens_full=ctx.layout.prompt_tokens, tokens_suffix=ctx.layout.suffix_tokens, items=cfg.n_ood)
    if cfg.ood_tasks:
        tasks, m, d = len(cfg.ood_tasks), cfg.n_ood, ctx.settings
        ood.suffix = tasks * (5 * m + 2 * m)  # the audit sets and NCS baselines
        ood.full = tasks * d * (1 + cfg.ood_controls) * (2 * m + 2 * m)  # CERS and NCS, S and its draws
        ood.head_sets = d * (1 + cfg.ood_controls)
    return [ood]


STAGE = register_stage(Stage("ood", 80, keys=KEYS, validate=validate_ood, units=lambda ctx: ood_units(ctx.store, ctx.cfg, ctx.beta),
                             compute={"ood-audit": compute_ood_audit, "ood-eval": compute_ood_eval}, rows=ood_rows,
                             tables=("ood_audit", "ood_outcomes"), desc="pointing suite"))
