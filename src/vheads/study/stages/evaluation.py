"""Evaluation (DESIGN.md "Metric definitions"): every setting's S and its controls in each
test (CERS, NCS at each row group and head-output ablation, NCS_grid, the text arm,
grounding), after the β sweep that fixes the headline β (:mod:`vheads.study._headline`),
round by round where the controls are sequential (:mod:`vheads.study._sequential`); the
k sweep's sets and the head-set algebra's parts beside them. One unit per setting × test ×
item shard."""

from __future__ import annotations

import json

from vheads.study._ablation import DEFAULT_ABLATION, validate_ablation
from vheads.evaluation import ABLATION_REGISTRY
from vheads.study._stage import Key, Stage, register_stage

ALL_HEADS = "all-heads"  # head-set id of every head (the maximum attainable NCS_grid)
K_SWEEP_TESTS = ("cers", "ncs")  # tests the k sweep's head-sets run in
KEYS = (
    Key("tests", ["cers", "ncs", "ncs-grid", "text", "grounding"], "also: cers-sym (stored with cers anyway: same forwards);\n"
        "grounding: pointing, IoU, Acc@0.5 of each head-set's map on the grid-oracle items (one capture per item)"),
    Key("n_eval", 16, "items per evaluation set"),
    Key("beta", 1e4, 'steering strength under beta_rule = "fixed"'),
    Key("beta_rule", "controls", "headline beta of Table 3's CERS, fixed before S is looked at: controls[:TOL] (the largest\n"
        "beta_sweep point at which the sweep's layer-matched controls' CERS has RMS <= TOL, default 0.05;\n"
        "the sweep runs first; without sweep controls: beta, recorded so) | fixed (= beta)"),
    Key("steer_rows", "all", "query rows CERS steers at: all (default, as public steering code) | image | question | last"),
    Key("row_groups", ["all", "image", "question", "last"], "NCS is run at each (default mask: all rows)"),
    Key("row_group_controls", ["layer-matched"], 'controls run at the row groups other than "all"'),
    Key("ablation", DEFAULT_ABLATION, "what hiding S means: attention (every test) | zero, mean, resample "
        "(NCS at the first row group, S + row_group_controls)", later=True),
    Key("beta_sweep", [1.0, 10.0, 100.0, 1000.0, 10000.0], "CERS of S over beta ([] to skip)"),
    Key("beta_sweep_controls", 5, "layer-matched draws re-run at every beta point (the first min(this, R) main draws)"),
    Key("k_sweep", [1, 2, 4, 8], "CERS and NCS (all rows) of the top-k heads over k ([] to skip)"),
    Key("k_sweep_controls", 20, "layer-matched draws of each top-k set, run at every k point"),
    Key("k_sweep_tests", ["cers", "ncs"], "the tests the k sweep's sets run in (NCS: all rows)", later=True),
    Key("items", {}, "items per test where fewer than n_eval (the first ones of its set; at most n_eval), e.g.\n"
        "ncs-grid = 120, beta-sweep = 200; keys: the tests and beta-sweep", later=True, type=dict[str, int]),
)


def validate_evaluation(cfg, bad) -> None:
    """Tests, row groups, β and the sweeps, ``[items]``: names known, numbers in range."""
    import math

    from vheads._errors import MAX_ITEMS
    from vheads.engine import ROW_GROUPS
    from vheads.evaluation import TESTS
    from vheads.study._headline import parse_beta_rule

    for t in cfg.tests:
        if t not in TESTS:
            bad("tests", f"unknown test {t!r}; choose from {', '.join(TESTS)}")
    for c in cfg.row_group_controls:
        if c not in cfg.controls:
            bad("row_group_controls", f"{c!r} is not one of the configured controls ({', '.join(cfg.controls)}); "
                "add it under [controls] or list others here")
    if cfg.steer_rows not in ROW_GROUPS:
        bad("steer_rows", f"unknown row group {cfg.steer_rows!r}; choose from {', '.join(ROW_GROUPS)}")
    for g in cfg.row_groups:
        if g not in ROW_GROUPS:
            bad("row_groups", f"unknown row group {g!r}; choose from {', '.join(ROW_GROUPS)}")
    if cfg.n_eval < 2:
        bad("n_eval", f"must be at least 2, got {cfg.n_eval}")
    if cfg.n_eval > MAX_ITEMS:
        bad("n_eval", f"{cfg.n_eval} is more than {MAX_ITEMS:,}")
    if not (math.isfinite(cfg.beta) and cfg.beta > 0):
        bad("beta", f"must be a finite number above 0 (steering adds +beta / -beta to logits), got {cfg.beta}")
    for key in ("beta_sweep_controls", "k_sweep_controls"):
        if getattr(cfg, key) < 0:
            bad(key, f"must be 0 (no controls) or positive, got {getattr(cfg, key)}")
    if cfg.beta_sweep and cfg.beta_sweep_controls and "layer-matched" not in cfg.controls:
        bad("beta_sweep_controls", "the beta sweep re-runs the first layer-matched draws at every beta, but "
            "[controls] has no layer-matched; add it or set beta_sweep_controls = 0")
    try:
        parse_beta_rule(cfg.beta_rule)
    except ValueError as e:
        bad("beta_rule", str(e))
    for kk in cfg.k_sweep:
        if kk < 1:
            bad("k_sweep", f"head-set sizes must be at least 1, got {kk}")
    if len(set(cfg.k_sweep)) < len(cfg.k_sweep):
        bad("k_sweep", f"lists a size twice: {cfg.k_sweep}")
    for b in cfg.beta_sweep:
        if not (math.isfinite(b) and b > 0):
            bad("beta_sweep", f"must hold finite numbers above 0, got {b}")
    if len(set(cfg.beta_sweep)) < len(cfg.beta_sweep):
        bad("beta_sweep", f"lists a beta twice: {cfg.beta_sweep}")
    for key in ("tests", "row_groups", "row_group_controls", "ablation"):
        values = getattr(cfg, key)
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            bad(key, f"{twice[0]!r} is listed twice")
    if not cfg.tests:
        bad("tests", f"is empty: the study would compute nothing; list some of {', '.join(TESTS)}")
    if "ncs" in cfg.tests and not cfg.row_groups:
        bad("row_groups", f"is empty but tests include 'ncs'; list some of {', '.join(ROW_GROUPS)}")
    validate_ablation(cfg, bad)  # after tests and row_groups: the head-output ablations run NCS
    item_keys = (*TESTS, "beta-sweep")
    for k, v in cfg.items.items():
        if k not in item_keys:
            bad(f"items.{k}", f"unknown test {k!r}; choose from {', '.join(item_keys)}")
        if v < 2:
            bad(f"items.{k}", f"must be at least 2 items (a test on more than n_eval runs n_eval), got {v}")
    for t in cfg.k_sweep_tests:
        if t not in ("cers", "ncs"):
            bad("k_sweep_tests", f"the k sweep runs in cers and ncs only, got {t!r}")


# ---- units ------------------------------------------------------------------------------------

def beta_sweep_units(store, cfg) -> list[dict]:
    """The β sweep, run before every other evaluation (the headline β is chosen from its
    controls, :mod:`vheads.study._headline`): per setting with an S and shard, one unit
    running S and its first ``beta_sweep_controls`` layer-matched draws at every β."""
    if not cfg.beta_sweep:
        return []
    units, n = [], cfg.n_items("beta-sweep")
    for (sid,) in store.query("SELECT DISTINCT setting FROM headsets WHERE control='S' AND setting NOT LIKE '%&%' ORDER BY setting"):
        if "cers" not in cfg.for_setting(sid).tests:
            continue
        hs = store.query("SELECT headset_id, heads FROM headsets WHERE setting=? AND (control='S' OR "
                         "(control='layer-matched' AND draw<?)) ORDER BY control != 'S', draw", sid, cfg.beta_sweep_controls)
        for lo in range(0, n, cfg.run.shard_size):
            hi = min(n, lo + cfg.run.shard_size)
            units.append({"unit_id": f"beta-sweep/{sid}/{lo}-{hi}", "kind": "eval", "setting": sid, "test": "beta-sweep",
                          "shard": [lo, hi], "headset_ids": [h for h, _ in hs], "headsets": [json.loads(x) for _, x in hs]})
    return units


def eval_units(store, cfg, beta: float | None = None, rnd: int = 0) -> list[dict]:
    """Every evaluation unit of round ``rnd``; CERS (and its k sweep) at the headline ``beta``
    (default the config's).

    ``controls_h = 0``: round 0 holds every unit (S and every control draw). Otherwise
    (:mod:`vheads.study._sequential`) round 0 holds S, every non-exchangeable control and the
    first ``controls_batch`` draws of each exchangeable one; round r ≥ 1 the next batch of
    each control still undecided in its (setting, test), under ids ``.../r<r>``; ``[]`` once
    every comparison is decided."""
    from vheads.study._ablation import ablation_test_id
    from vheads.study._sequential import round_plan, setting_draws, store_pools, test_ids

    seq = setting_draws(store, cfg) if cfg.controls_h else {}
    pools = store_pools(store)  # how each setting's draws were chosen ([test_controls] reads it)
    if rnd and not seq:
        return []
    later = round_plan(store, cfg, rnd, seq) if rnd else {}
    units = []
    settings = [s for (s,) in store.query("SELECT DISTINCT setting FROM headsets ORDER BY setting")]
    for sid in settings:
        hs = store.query("SELECT headset_id, heads FROM headsets WHERE setting=? ORDER BY control != 'S', control, draw", sid)
        heads_of = dict(hs)
        if rnd == 0:  # S, the controls run whole and the first batch of each sequential control
            first = {h for ids in seq.get(sid, {}).values() for h in ids[:cfg.controls_batch]}
            later_ids = {h for ids in seq.get(sid, {}).values() for h in ids} - first
            ids = [h for h, _ in hs if h not in later_ids]
        algebra = "&" in sid  # shared / only-one head-sets: NCS at all rows only
        scfg = cfg.for_setting(sid)  # its [[scope]]'s tests, row groups and k sweep
        tests = [t for t in cfg.tests if t == "ncs"] if algebra else scfg.tests
        for test in tests:
            cells = None
            if rnd:
                ids, undecided = later.get((sid, test), ([], set()))
                if not ids:
                    continue
                if test == "ncs":  # only the row groups and ablations with an undecided cell run their forwards
                    cells = {"row_groups": [g for g in scfg.row_groups if f"ncs-{g}" in undecided],
                             "ablations": [a for a in cfg.ablation if ABLATION_REGISTRY.get(a).head_output
                                           and ablation_test_id(scfg.row_groups[0], a) in undecided]}
            n_items = cfg.n_items(test)
            run_ids = test_ids(cfg, sid, test, ids, pools) if scfg.test_controls and not algebra else ids
            for lo in range(0, n_items, cfg.run.shard_size):
                hi = min(n_items, lo + cfg.run.shard_size)
                unit = {"unit_id": f"eval/{sid}/{test}/{lo}-{hi}" + (f"/r{rnd}" if rnd else ""), "kind": "eval",
                        "setting": sid, "test": test, "shard": [lo, hi], "headset_ids": run_ids,
                        "headsets": [json.loads(heads_of[h]) for h in run_ids],
                        "row_groups": ["all"] if algebra else scfg.row_groups if scfg is not cfg else None,
                        "beta": cfg.beta if beta is None else beta}
                if scfg.k_sweep_tests != cfg.k_sweep_tests or cfg.k_sweep_tests != ["cers", "ncs"]:
                    unit["k_sweep_tests"] = scfg.k_sweep_tests
                if cells is not None:
                    unit["cells"] = cells
                units.append(unit)
    # test-major, then shard, then setting: every setting runs a test on the same items, so
    # consecutive units share prompts and many head-sets, and a replica's probe memo (bounded)
    # holds what the next unit asks for however large the study
    rank = {t: i for i, t in enumerate(cfg.tests)}
    units.sort(key=lambda u: (rank.get(u["test"], len(rank)), u["shard"][0]))
    return units


def evaluation_rounds(store, cfg, ctx, beta: float | None) -> int:
    """The evaluation stage, round by round (:mod:`vheads.study._sequential`): each round's
    units are planned from the rounds before it (all committed), so a resumed run plans the
    same units; records where each sequential comparison stopped. Returns the units computed."""
    from vheads.study._sequential import record_stops

    n, rnd = 0, 0
    while True:
        units = eval_units(store, cfg, beta, rnd)
        if not units:
            break
        n += ctx.run_units(units, "evaluation" + (f" (controls round {rnd})" if rnd else ""))
        if not cfg.controls_h:
            break
        rnd += 1
    if cfg.controls_h:
        record_stops(store, cfg)
    return n


def _run(ctx) -> int:
    """The β sweep's units, the headline β from its controls alone (``beta_rule``, before any
    CERS of S at it; kept in ``ctx.beta`` for the later stages), then the evaluation rounds."""
    from vheads.study._headline import headline_beta

    n = ctx.run_units(beta_sweep_units(ctx.store, ctx.cfg), "beta sweep")
    ctx.beta = headline_beta(ctx.store, ctx.cfg)
    return n + evaluation_rounds(ctx.store, ctx.cfg, ctx, ctx.beta)


# ---- one unit ---------------------------------------------------------------------------------


def compute_eval(computer, unit):
    """One evaluation unit: its head-sets in its test on its item shard (``outcomes``, NCS's
    ``arms``; the β sweep's CERS at every β; grounding's maps)."""
    from vheads._ids import is_k_sweep
    from vheads.evaluation import METRICS, TEST_SETS, HeadSet, Outcomes, item_sets, run_test
    from vheads.study._ablation import ablation_rows
    from vheads.study._data import eval_seed

    cfg, eng = computer.cfg, computer.engine
    L, H = eng.shape
    ids = unit["headset_ids"]
    layers = eng.lm.attention_layers  # a hybrid model's softmax layers (all layers otherwise)
    hsets = [HeadSet([tuple(h) for h in heads], L, H, layers) for heads in unit["headsets"]]
    lo, hi = unit["shard"]
    test = unit["test"]
    if test not in TEST_SETS and test != "beta-sweep":
        raise ValueError(f"unknown test {test!r}")
    sets = {k: v[lo:hi] for k, v in item_sets(TEST_SETS["cers" if test == "beta-sweep" else test], cfg.n_eval, eval_seed(cfg.seed), computer.source, computer.templates).items()}
    bs = cfg.run.batch_size
    out: dict[str, list[tuple]] = {"outcomes": [], "arms": []}
    uid, setting = unit["unit_id"], unit["setting"]

    def put(test_id, res, which):
        """Rows of ``res`` (one per entry of ``which``, indices into ``ids``), each with its
        value under every metric (p4, logprob, logit-diff: the store's metric columns)."""
        vals = [res.under(m).values for m in METRICS]
        for jj, j in enumerate(which):
            for i, iid in enumerate(res.item_ids):
                out["outcomes"].append((uid, setting, test_id, ids[j], iid, *(float(v[jj, i]) for v in vals)))

    if test == "beta-sweep":
        return _beta_sweep(computer, sets, ids, hsets, put, out)
    if test == "ncs-grid" and "S" in ids:
        # the maximum attainable NCS_grid of the item set: every head hidden from the cell
        ids, hsets = [*ids, ALL_HEADS], [*hsets, HeadSet([(l, h) for l in layers for h in range(H)], L, H, layers)]
    # the k sweep's sets (S@k=K and its layer-matched@k=K controls) run in CERS and NCS
    # at all rows only (seed Tables 14 and 18)
    every = [j for j, h in enumerate(ids) if not is_k_sweep(h) or test in unit.get("k_sweep_tests", K_SWEEP_TESTS)]
    if test == "grounding":  # one capture per shard serves every setting (vheads.study._grounding)
        from vheads.study._grounding import grounding_rows

        return grounding_rows(computer, unit, sets, ids, [hsets[j] for j in every], every, out)
    if test == "ncs":
        cache: dict = {}  # prompts and unmasked baselines, shared by the row groups
        groups = unit["cells"]["row_groups"] if "cells" in unit else unit.get("row_groups") or cfg.row_groups
        for g in groups:
            # per-row-group NCS (beyond the default all-row mask) runs S against the
            # row_group_controls only: it locates the effect, Table 3 tests it
            keep = every if g == "all" else [
                j for j, h in enumerate(ids) if h == "S" or h.split("#")[0] in cfg.row_group_controls]
            if not keep:  # a later round of controls (vheads.study._sequential) this row group does not run
                continue
            res = run_test(eng, "ncs", sets, [hsets[j] for j in keep], cfg.beta, g, cfg.seed, bs, cache=cache, memo=computer.memo)
            put(f"ncs-{g}", res, keep)
            for jj, j in enumerate(keep):
                for arm, key in (("matched", "drop_matched"), ("mismatched", "drop_mismatched")):
                    drops = [res.under(m).detail[key] for m in METRICS]
                    for i, it in enumerate(sets[f"class-{arm}"]):
                        out["arms"].append((uid, setting, f"ncs-{g}", ids[j], it.id, arm, *(float(d[jj, i]) for d in drops)))
        if "&" not in setting:  # the head-output ablations (vheads.study._ablation)
            ablation_rows(computer, unit, sets, ids, hsets, cache, out)
        return {"rows": out}
    beta = unit.get("beta", cfg.beta)  # the headline β (vheads.study._headline)
    res = run_test(eng, test, sets, [hsets[j] for j in every], beta, cfg.steer_rows if test.startswith("cers") else "all",
                   cfg.seed, bs, memo=computer.memo)
    put(test, res, every)
    for other in ("cers", "cers-sym"):  # CERS and symmetric CERS come from the same forwards
        if other in res.detail and other not in cfg.tests:
            put(other, Outcomes(other, res.detail[other], res.item_ids, {},
                                {m: Outcomes(other, o.detail[other], o.item_ids, {}) for m, o in res.metrics.items()}), every)
    return {"rows": out}

def _beta_sweep(computer, sets, ids, hsets, put, out):
    """CERS at every β of the sweep (``cers@beta=B``) of one setting's S and its first
    ``beta_sweep_controls`` layer-matched draws, before any other evaluation: the
    headline β is chosen from these controls (:mod:`vheads.study._headline`)."""
    from vheads._ids import beta_test_id
    from vheads.evaluation import run_test

    cfg = computer.cfg
    for b in cfg.beta_sweep:
        put(beta_test_id(b), run_test(computer.engine, "cers", sets, hsets, b, cfg.steer_rows, cfg.seed, cfg.run.batch_size,
                                      memo=computer.memo), range(len(ids)))
    return {"rows": out}



# ---- the plan's rows ---------------------------------------------------------------------------


def _setting_rows(g, cfg, settings: int, k: int, L: int, H: int, compared, ev: dict, seen: set) -> float:
    """Add the rows of ``settings`` settings that run under config ``g`` (the study's own, or
    a ``[[scope]]``'s) to the evaluation stages ``ev`` (by name; ``seen`` collects the stages
    a test of the run has); the per-test items are the study's ``[items]``. Returns the
    layer-matched draws compared per setting."""
    from vheads.study._rows import SUFFIX_GROUPS

    tests = set(g.tests)

    def controls_of(test: str) -> dict[str, float]:  # each control's draws compared in ``test`` ([test_controls])
        return {name: compared(name, g.control_R(test, name), k, main=True) for name in g.controls}

    per_test = {t: controls_of(t) for t in ("cers", "ncs", "ncs-grid", "text")}
    C = per_test["cers"]
    lm = C.get("layer-matched", 0.0)
    rg = sum(per_test["ncs"][c] for c in g.row_group_controls if c in per_test["ncs"])
    k_points = [kk for kk in dict.fromkeys(g.k_sweep) if kk != k and kk <= L * H]
    k_ctrl = sum(compared("layer-matched", g.k_sweep_controls, kk) for kk in dict.fromkeys(g.k_sweep) if kk <= L * H) \
        if g.k_sweep_controls else 0.0
    main_of = {t: 1 + sum(c.values()) for t, c in per_test.items()}  # S and its controls, per test
    main = main_of["cers"]
    sweep_sets = len(k_points) + k_ctrl  # the k sweep's sets (in the k_sweep_tests; NCS at all rows)
    sweep = {t: sweep_sets if t in g.k_sweep_tests else 0.0 for t in ("cers", "ncs")}

    def add(name: str, head_sets: float, rows_per_item: int, suffix: bool, items: int) -> None:
        rows = round(head_sets * rows_per_item * items)
        st = ev[name]
        if suffix:
            st.suffix += rows
        else:
            st.full += rows
        if name in ("cers", "ncs-grid", "text"):  # these count the head-sets of every setting
            st.head_sets += round(head_sets)
        seen.add(name)

    beta_first = 0.0
    if "cers" in tests and g.beta_sweep:
        nb = cfg.n_items("beta-sweep")
        beta_first = 1 + min(g.beta_sweep_controls, lm)
        add("beta sweep", settings * beta_first * len(g.beta_sweep), 2, False, nb)
    if tests & {"cers", "cers-sym"}:
        nc = cfg.n_items("cers")
        sets = main + sweep["cers"]
        if g.beta_sweep and "cers" in tests and g.beta in g.beta_sweep:
            # S and the first draws at the main beta on the sweep's items: the sweep's rows
            sets -= beta_first * min(cfg.n_items("beta-sweep"), nc) / nc
        add("cers", settings * sets, 2, g.steer_rows in SUFFIX_GROUPS, nc)
    if "ncs" in tests:
        nn = cfg.n_items("ncs")
        for grp in g.row_groups:
            add("ncs", settings * (main_of["ncs"] + sweep["ncs"] if grp == "all" else 1 + rg), 2, grp in SUFFIX_GROUPS, nn)
        if "ncs baselines" not in seen:  # the unmasked baselines, once per model
            ev["ncs"].suffix += 2 * nn
            seen.add("ncs baselines")
        for a in g.ablation:
            if ABLATION_REGISTRY.get(a).head_output:
                add("ncs", settings * (1 + rg), 2, g.row_groups[0] in SUFFIX_GROUPS, nn)
        ev["ncs"].head_sets = max(ev["ncs"].head_sets, round(main_of["ncs"] + sweep["ncs"]))
    if "ncs-grid" in tests:  # + every head hidden: the attainable bound (once)
        add("ncs-grid", settings * main_of["ncs-grid"] + (0 if "ncs-grid" in seen else 1), 2, False, cfg.n_items("ncs-grid"))
    if "text" in tests:  # + the unmasked baseline (once)
        add("text", settings * main_of["text"] + (0 if "text" in seen else 1), 1, True, cfg.n_items("text"))
    ev["beta sweep"].head_sets = max(ev["beta sweep"].head_sets, round(beta_first))  # per setting
    return lm


def evaluation_rows(ctx) -> list:
    """The evaluation's per-setting stages (beta sweep, cers, ncs, ncs-grid, text), summed over
    the groups of settings that share a config (one per ``[[scope]]``, the rest under the
    top-level keys), and the head-set algebra's parts: per pair, the shared and only-one
    parts with their controls, NCS at all rows."""
    from vheads.study._rows import PlanStage, grid_ids
    from vheads.study.stages.discovery import setting_ids
    from vheads.study.stages.controls import algebra_pairs

    cfg, layout, k, L, H = ctx.cfg, ctx.layout, ctx.k, ctx.L, ctx.H
    Tf, Ts, n = layout.prompt_tokens, layout.suffix_tokens, cfg.n_eval
    groups: dict[int, int] = {}
    for sid in setting_ids(cfg):
        i = next((j for j, sc in enumerate(cfg.scope) if sid in sc["settings"]), -1)
        groups[i] = groups.get(i, 0) + 1
    ev = {name: PlanStage(name, tokens_full=Tf, tokens_suffix=0 if name == "beta sweep" else Ts,
                          items=cfg.n_items(name.replace(" ", "-")) if name != "cers" else cfg.n_items("cers"))
          for name in ("beta sweep", "cers", "ncs", "ncs-grid", "text")}
    seen: set[str] = set()
    for i, m in sorted(groups.items()):
        g = cfg.for_setting(cfg.scope[i]["settings"][0]) if i >= 0 else cfg
        _setting_rows(g, cfg, m, k, L, H, ctx.compared, ev, seen)
    out = [ev[name] for name in ("beta sweep", "cers", "ncs", "ncs-grid", "text") if name in seen or name == "beta sweep"]
    alg = PlanStage("algebra", tokens_full=Tf, items=n)
    if cfg.algebra_controls and "ncs" in cfg.tests:
        pairs = algebra_pairs(grid_ids(cfg))
        part_sets = 1 + ctx.compared("layer-matched", cfg.algebra_controls, max(1, k // 2))
        alg.full = round(len(pairs) * 3 * part_sets * 2 * n)
        alg.head_sets = round(len(pairs) * 3 * part_sets)
        alg.note = "upper bound: every part non-empty, each part's pool that of a set of k/2 heads"
    return out + [alg]


STAGE = register_stage(Stage("evaluation", 60, keys=KEYS, validate=validate_evaluation, run=_run,
                             compute={"eval": compute_eval}, rows=evaluation_rows, tables=("outcomes", "arms", "grounding")))
