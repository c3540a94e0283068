"""The causal map (DESIGN.md "Causal map"): every head alone and every whole layer, in the
``causal_tests`` on a discovery split of ``n_eval`` items, one unit per item shard
(:mod:`vheads.study._causal`); its top-k NCS heads form the ``causal-ncs`` setting."""

from __future__ import annotations

from vheads.evaluation import ABLATION_REGISTRY, HEAD_OUTPUT_TESTS
from vheads.study._stage import Key, Stage, register_stage

KEYS = (
    Key("causal_tests", ["ncs"], "exact causal map (each head alone, each whole layer) in ncs | ncs-grid | text, on n_eval items\n"
        "of a discovery split; its top-k NCS heads are the causal-ncs setting of Table 3 ([] = skip)", later=True, cont="#"),
    Key("causal_subsets", 0, "head attribution by regression: random head subsets (each head in with probability 1/2) on the\n"
        "causal map's items and tests, method 'regression' (0 = skip; configs/paper.toml: 256)", later=True, cont="#"),
    Key("causal_method", "exact", "the map whose top-k NCS heads form causal-ncs: exact | atp | regression (needs causal_subsets)",
        later=True),
)


def validate_causal(cfg, bad) -> None:
    from vheads._registry import did_you_mean
    from vheads.causal import METHOD_REGISTRY, check_causal_tests

    check_causal_tests(cfg.causal_tests)
    if cfg.causal_subsets != 0 and not 2 <= cfg.causal_subsets <= 1_000_000:
        bad("causal_subsets", f"must be 0 (no regression map) or the design's subsets (at least the heads + 1), got {cfg.causal_subsets}")
    methods = METHOD_REGISTRY.names()
    if cfg.causal_method not in methods:
        bad("causal_method", f"unknown method {cfg.causal_method!r}{did_you_mean(cfg.causal_method, methods)}; "
                             f"choose from {', '.join(methods)}")
    elif cfg.causal_method == "regression" and not cfg.causal_subsets:
        bad("causal_method", "'regression' needs a design: set causal_subsets (e.g. 256)")


def compute_causal_map(computer, unit):
    """One shard of the exact causal map: every head alone and every whole layer, per item,
    both NCS arms; its AtP estimate on the same items; and, with ``causal_subsets``, the
    regression map over a random design (per-item coefficients)."""
    from vheads.causal import atp_causal_maps, causal_item_sets, draw_design, exact_causal_map, regression_causal_maps
    from vheads.study._causal import causal_seed

    cfg = computer.cfg
    lo, hi = unit["shard"]
    sets = {k: v[lo:hi] for k, v in causal_item_sets(cfg.causal_tests, cfg.n_eval, causal_seed(cfg.seed), computer.source,
                                                     computer.templates).items()}
    rows = []
    for ablation in cfg.ablation:  # every ablation the run uses, where a one-head map is defined (no mean: no reference set)
        entry = ABLATION_REGISTRY.get(ablation)
        tests = [t for t in cfg.causal_tests if t in HEAD_OUTPUT_TESTS] if entry.head_output else cfg.causal_tests
        if entry.replacement == "mean" or not tests:
            continue
        maps = exact_causal_map(computer.engine, sets, tests, ablation=ablation, seed=cfg.seed, batch_size=cfg.run.batch_size,
                                memo=computer.memo)
        # the AtP estimate of the same map on the same items (attention: AtP*, zero: AtP; heads only, p4)
        maps |= atp_causal_maps(computer.engine, sets, tests, ablation, batch_size=min(8, cfg.run.batch_size),
                                token_budget=min(1 << 15, cfg.run.token_budget))
        if cfg.causal_subsets:  # head attribution: one design for every shard, so each item's coefficients are its own
            L, H = computer.engine.shape
            design = draw_design(L, H, cfg.causal_subsets, seed=cfg.seed, attention_layers=computer.engine.lm.attention_layers)
            maps |= regression_causal_maps(computer.engine, sets, tests, design, ablation=ablation, seed=cfg.seed,
                                           batch_size=cfg.run.batch_size, memo=computer.memo)
        rows += [r for m in maps.values() for r in m.store_rows(unit["unit_id"])]
    return {"rows": {"causal_map": rows}}


def causal_rows(ctx) -> list:
    """Every head alone and every whole layer, per test and ablation, + the baselines once."""
    from vheads.study._causal import causal_map_units
    from vheads.study._rows import ROWS_PER_ITEM, PlanStage

    cfg, n, L, H = ctx.cfg, ctx.cfg.n_eval, ctx.L, ctx.H
    cm = PlanStage("causal map", tokens_full=ctx.layout.prompt_tokens, tokens_suffix=ctx.layout.suffix_tokens, items=n)
    if causal_map_units(cfg):
        units = L * H + L
        for t in cfg.causal_tests:
            runs = sum(1 for a in map(ABLATION_REGISTRY.get, cfg.ablation)
                       if not a.head_output or (a.replacement != "mean" and t in HEAD_OUTPUT_TESTS))
            cm.full += units * runs * ROWS_PER_ITEM[t] * n
            cm.suffix += ROWS_PER_ITEM[t] * n  # the unmasked baselines
        cm.head_sets = units
    return [cm]


def _units(ctx) -> list[dict]:
    from vheads.study._causal import causal_map_units

    return causal_map_units(ctx.cfg)


STAGE = register_stage(Stage("causal map", 40, keys=KEYS, validate=validate_causal, units=_units,
                             compute={"causal-map": compute_causal_map}, rows=causal_rows, tables=("causal_map",)))
