"""The baseline audit of every evaluation set (DESIGN.md "Baseline audit"): oracle (target
cell named, expect about 1), floor (blank image, expect 0.25), matched and mismatched
without intervention, and the matched items blanked (leak). One unit, after the evaluation."""

from __future__ import annotations

from vheads.study._stage import Stage, register_stage


def compute_audit(computer, unit):
    from vheads.evaluation import audit_sets, baseline_audit
    from vheads.study._data import eval_seed

    sets = audit_sets(computer.cfg.n_eval, eval_seed(computer.cfg.seed), computer.source, computer.templates)
    rep = baseline_audit(computer.engine, sets)
    return {"rows": {"audit": [(n, r["n"], r["mean_p_key"], r["expected"][0], r["expected"][1], int(r["ok"])) for n, r in rep.items()]}}


def audit_rows(ctx) -> list:
    from vheads.study._rows import PlanStage

    n = ctx.cfg.n_eval
    return [PlanStage("audit", suffix=5 * n, tokens_full=ctx.layout.prompt_tokens, tokens_suffix=ctx.layout.suffix_tokens, items=n,
                      note="oracle, floor, matched, mismatched and the matched items blanked (leak): one row each")]


STAGE = register_stage(Stage("audit", 70, units=lambda ctx: [{"unit_id": "audit", "kind": "audit"}],
                             compute={"audit": compute_audit}, rows=audit_rows, tables=("audit",)))
