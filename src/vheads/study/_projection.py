"""How many batch rows a study runs: the doctor's projection of a study's time, read from
the study's one plan (:func:`vheads.study._plan.study_plan`). It lives in the study (the
doctor stands below it): ``vheads doctor`` hands :func:`study_rows` to the doctor.

The probe memo (:class:`vheads.evaluation.ProbeMemo`) runs a head-set on an item once per
test however often it is drawn, so on a model with few heads (the built-in tiny model's
layer-matched pool of a three-head S has a few hundred members, for 17 settings × 249
draws) the distinct control head-sets, not the draws, set the work: with ``pool_heads`` the
plan counts each control's draws as the distinct head-sets they are expected to give over
all settings (``shared_draws``, :func:`expected_union`).
"""

from __future__ import annotations

from vheads.study._plan import (  # noqa: F401 (the pool rules, where the doctor's tests read them)
    Layout, compared_per_setting, control_pool, expected_union, spread, study_plan,
)

#: stages the doctor's "evaluation" figure leaves out: discovery is its own figure; the
#: audit (4 rows an item) and the pointing suite (its own items) as before
_LEFT_OUT = ("discovery", "audit", "pointing suite")


def study_rows(cfg, main_k: int | None = None, heads: tuple[int, int] | None = None,
               pool_heads: tuple[int, int] | None = None, sequential: bool = False) -> dict[str, int]:
    """Batch rows a study of ``cfg`` runs, ``{"discovery", "evaluation"}``, from the plan.

    ``heads`` = (attention layers, heads per layer): the causal map is counted (every head
    alone and every whole layer); without it, it is left out. ``pool_heads``: the shape whose
    control pools bound the draws, counted as the distinct head-sets of all settings (the
    memo's); without it every setting's own draws count (an upper bound). ``sequential``: each
    sequential control at its expected draws (:func:`vheads.study._plan.expected_compared`: every
    cell stopping at its h-th draw reaching S, the fewest it can run), not R_max."""
    shape = pool_heads or heads
    # no shape: pools that never bind (a layer of 10,000 heads), the causal map left out
    L, H = shape if shape is not None else (64, 10_000)
    layout = Layout("doctor", L, H, 1, 1, 1)
    plan = study_plan(cfg, layout, main_k=main_k, shared_draws=pool_heads is not None, sequential=sequential)
    skip = _LEFT_OUT + (() if heads is not None else ("causal map",))
    return {"discovery": plan.stage("discovery").rows, "evaluation": sum(s.rows for s in plan.stages if s.name not in skip)}
