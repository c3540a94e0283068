"""The reporting protocol: what every visual-head result should state, filled in from a run,
with a warning wherever the run falls short.

The checklist follows the seed paper's recommendations: name the query type, the
attention source and the corpus (they move the head-set more than anything else); give
k; test against layer-matched random controls with enough draws R that the rank p can
reach significance after Holm over the family of settings tested together; state β and
the row groups; audit the evaluation sets' baselines.

Why R matters: with R controls the rank p is at least ``1/(R+1)``, and Holm over a
family of m settings multiplies the smallest p by m, so **no** Holm-adjusted p can fall
below ``min(1, m/(R+1))``. The run needs ``R ≥ ceil(m/α) − 1`` (239 for m = 12, α = 0.05).
"""

from __future__ import annotations

import math

from vheads.report._data import RunData, cfg_get, control_fallbacks
from vheads.report._doc import Check
from vheads.report._tables import ALPHA, MAIN_CONTROLS, ROW_GROUP_TESTS, audit_flags, holm_family

MAIN_TESTS = ("cers", "ncs-all")


def min_holm_p(m: int, R: int) -> float:
    """Smallest Holm-adjusted p a family of m rank p's with R controls each can reach: every
    S above all its controls gives p = 1/(R+1) for all m, and Holm gives them m/(R+1)."""
    return min(1.0, m / (R + 1))


def required_R(m: int, alpha: float = ALPHA) -> int:
    """Smallest R with ``m / (R + 1) ≤ alpha``."""
    return max(1, math.ceil(m / alpha - 1e-9) - 1)


def _join(values) -> str:
    vals = [str(v) for v in values if v not in (None, "")]
    return ", ".join(dict.fromkeys(vals)) if vals else "not recorded"


def _configured_R(run: RunData, control: str) -> int | None:
    controls = cfg_get(run.config, "controls")
    if isinstance(controls, dict):
        v = controls.get(control)
        if isinstance(v, dict):
            v = cfg_get(v, "R", "draws", "n")
        try:
            return int(v) if v is not None else None
        except (TypeError, ValueError):
            return None
    return None


def _fallbacks(run: RunData) -> list[str]:
    """Every control draw's fallbacks, by setting and control label (main draws, k-sweep
    points, head-set algebra parts): ``"cm-ref-out, layer-matched@k=8: layer 3: ..."``."""
    return [f"{s}, {label}: {f}" if label else f"{s}: {f}"
            for s, by in control_fallbacks(run.meta).items() for label, fbs in by.items() for f in fbs]


def protocol_checks(run: RunData, alpha: float = ALPHA) -> list[Check]:
    """The filled-in checklist; ``Check.warning`` is set where the run falls short."""
    checks: list[Check] = []
    L, H = run.shape
    checks.append(Check("Model", f"{run.model_id}" + (f" ({L} layers × {H} heads = {L * H} heads)" if L and H else "")))

    disc = {s: d for s, d in run.discovery.items() if s not in run.score_settings}  # the grid (score points: below)
    none = "no discovery recorded in the store" if not disc else None
    checks.append(Check("Query type", _join(d["query"] for d in disc.values()), none))
    checks.append(Check("Attention source", _join(d["source"] for d in disc.values()), none))
    corpora = [f"{d['corpus']} (N={d['n_items']})" for d in disc.values()]
    checks.append(Check("Discovery corpus (items per setting)", _join(corpora), none))
    ks = sorted({d["k"] for d in disc.values() if d["k"] is not None})
    k_text = _join(ks)
    if ks and L and H:
        k_text += f" ({100 * ks[0] / (L * H):.1f}% of heads" + (")" if len(ks) == 1 else ", smallest k)")
    checks.append(Check("Head-set size k (flat top-k)", k_text, none))
    checks.append(Check("Outcome metric", f"{run.metric} in the tables (config key metric, or `vheads report --metric`); the metric robustness "
                        "table shows Table 3 under p4, logprob and logit-diff"))
    checks.append(Check("Settings", f"{len(run.settings)}: {', '.join(run.settings)}" if run.settings else "none"))
    if run.score_settings:
        from vheads.report._methods import point_text

        checks.append(Check("Score points (config key scores)", "; ".join(
            f"{s} ({point_text(run.score_points.get(s, {}))})" for s in run.score_settings)))
    checks.append(Check("Question templates ([..]: query span)", _templates_text(run.config, run.model_id)))
    checks += _prompt_checks(run)

    # evaluation items
    tests_present = [t for t in MAIN_TESTS if any((s, t) in run.cells for s in run.settings)]
    n_items = {t: sorted({len(run.cells[(s, t)].s) for s in run.settings
                          if (s, t) in run.cells and run.cells[(s, t)].s is not None}) for t in tests_present}
    few = [t for t, ns in n_items.items() if ns and ns[0] < 2]
    checks.append(Check(
        "Evaluation items N per test",
        "; ".join(f"{t}: {_join(ns)}" for t, ns in n_items.items()) or "no CERS / NCS outcomes",
        (f"{', '.join(few)} has fewer than 2 items for some setting: no t-interval" if few else
         None if tests_present else "no CERS or NCS outcome of the discovered set is stored"),
    ))

    if run.nonfinite:
        checks.append(Check("Non-finite outcomes", f"{run.nonfinite} outcome rows",
                            f"{run.nonfinite} outcome value(s) are NaN or infinite and were left out of every statistic"))

    # controls, R, rank-p floor, Holm family
    fam = holm_family(run)
    for c in MAIN_CONTROLS:
        Rs = sorted({len(run.cells[(s, t)].controls[c]) for t in tests_present for s in run.settings
                     if (s, t) in run.cells and c in run.cells[(s, t)].controls})
        want = _configured_R(run, c)
        if not Rs:
            warn = (f"no {c} controls stored" + (f" (the config asks for R={want})" if want else "")
                    + ("; S cannot be told apart from random heads of the same layers" if c == "layer-matched" else ""))
            checks.append(Check(f"Controls: {c}", "none", warn if (c == "layer-matched" or want) else None))
            continue
        R = Rs[0]
        short = f"only R={R} draws stored where the config asks for {want} (an unfinished run?)" if want and R < want else None
        checks.append(Check(f"Controls: {c}, R", _join(Rs) + (f" (config: {want})" if want else ""), short))
        checks.append(Check(f"Rank-p floor ({c})", f"1/(R+1) = {1 / (R + 1):.4f}"))
        m = max(len([s for s in run.settings if (s, t) in run.cells and c in run.cells[(s, t)].controls
                     and (fam is None or s in fam)]) for t in tests_present)
        floor = min_holm_p(m, R)
        warn = None
        if floor > alpha:
            warn = (f"R={R} is too small for any Holm-adjusted p to fall under {alpha}: over a family of {m} the "
                    f"smallest possible adjusted p is {m}/(R+1) = {floor:.3f}; use R ≥ {required_R(m, alpha)}")
        checks.append(Check(f"Holm family ({c})", f"{m} settings (per test); smallest possible adjusted p "
                            f"m/(R+1) = {floor:.4f}", warn))
    fallbacks = _fallbacks(run)
    where = sorted({f"{s} ({label})" for s, by in control_fallbacks(run.meta).items() for label in by})
    checks.append(Check("Layer-matched fallbacks", "; ".join(fallbacks) if fallbacks else
                        "none recorded (every control draw: main, row groups, k and β sweeps, algebra, pointing suite)",
                        (f"{len(fallbacks)} fallback(s) in {', '.join(where)}: those draws do not keep S's per-layer "
                         "counts (the tables that use them say so); a smaller k, or the any-layer control, avoids them"
                         if fallbacks else None)))
    checks.append(_distinct_check(run))
    checks.append(_floors_check(run, alpha))
    other = sorted({c for cell in run.cells.values() for c in cell.controls if c not in MAIN_CONTROLS})
    checks.append(Check("Other controls", _join(other) if other else "none"))

    # beta, sweeps, row groups
    beta = cfg_get(run.config, "beta")
    betas = sorted({v for (_, t) in run.cells for v in [_param(t, "beta")] if v is not None})
    checks.append(Check("Steering strength β", (str(beta) if beta is not None else "not recorded")
                        + (f"; sweep: {', '.join(f'{b:g}' for b in betas)}" if betas else "")))
    ksweep = sorted({k for cells in run.ksweep.values() for k in cells}
                    | {int(v) for (_, t) in run.cells for v in [_param(t, "k")] if v is not None})
    checks.append(Check("k sweep", ", ".join(map(str, ksweep)) if ksweep else "none"))
    groups_present = [g for t, g in ROW_GROUP_TESTS.items() if any((s, t) in run.cells for s in run.settings)]
    want_groups = cfg_get(run.config, "row_groups")
    missing = []
    if isinstance(want_groups, (list, tuple)):
        missing = [g for g in want_groups if f"ncs-{g}" not in {t for (_, t) in run.cells}]
    checks.append(Check("Row groups (NCS mask rows)", _join(groups_present) if groups_present else "none",
                        f"configured row group(s) without results: {', '.join(map(str, missing))}" if missing else None))

    # audit, ceilings, seeds
    if not run.audit:
        checks.append(Check("Baseline audit", "not run", "no baseline audit stored: a test on an evaluation set "
                            "whose baseline is off (oracle not ≈ 1, floor not ≈ 0.25) is uninterpretable"))
    else:
        bad = audit_flags(run)
        checks.append(Check("Baseline audit", ", ".join(f"{r['name']} {r['mean_p_key']:.3f}" for r in run.audit),
                            ("outside the expected range: " + ", ".join(
                                f"{r['name']} = {r['mean_p_key']:.3f} (expected [{r['lo']:.2f}, {r['hi']:.2f}])"
                                for r in bad)) if bad else None))
    if run.overlap or run.ceilings:
        splits = _join(sorted({c["splits"] for c in run.ceilings.values()}))
        checks.append(Check("Overlap noise ceilings", f"{len(run.ceilings)} settings, splits: {splits}",
                            "overlaps are reported without split-half noise ceilings" if not run.ceilings else None))
    seeds = cfg_get(run.config, "seeds", "seed")
    checks.append(Check("Seeds", str(seeds) if seeds is not None else "not recorded in the config"))
    return checks


HOLM_TESTS = ("cers", "ncs-all", "ncs", "cers-sym", "ncs-grid")  # tables with Holm over the settings


def _floors_check(run: RunData, alpha: float = ALPHA) -> Check:
    """Every table's rank-p floor ``1/(R+1)`` per control (R: its fewest draws there) and, where
    the table Holm-adjusts over the settings (Table 3, Table 16: the main controls), the Holm
    floor ``m/(R+1)``; a warning names each one above ``alpha`` with the R it needs (Table 3's
    main controls are warned about under "Holm family")."""
    from vheads.report._data import parse_test_id

    fam = holm_family(run)
    found: dict[tuple[str, str], dict] = {}  # (table, control) -> R, m (None: not adjusted), config key

    def add(table, control, R, holm_m, key):
        e = found.setdefault((table, control), {"R": R, "m": holm_m, "key": key})
        e["R"] = min(e["R"], R)

    for (s, t), cell in run.cells.items():
        tid = parse_test_id(t)
        for c, draws in cell.controls.items():
            if len(draws) < 2 and c not in MAIN_CONTROLS:  # a deterministic control: no rank p is read
                continue
            if tid.param == "beta":
                add(f"β sweep ({tid.base})", c, len(draws), None, "beta_sweep_controls")
            elif t in ROW_GROUP_TESTS and t != "ncs-all":
                add(f"row groups ({t})", c, len(draws), None, f"controls.{c}")
            elif t in HOLM_TESTS:
                m = None
                if c in MAIN_CONTROLS:
                    m = len([x for x in run.settings if (x, t) in run.cells and c in run.cells[(x, t)].controls
                             and (fam is None or x in fam)])
                add(f"{'Table 3' if t in ('cers', 'ncs-all', 'ncs') else 'Table 16'} ({t})", c, len(draws), m, f"controls.{c}")
    for (s, base), by_k in run.ksweep.items():
        for k, cell in by_k.items():
            for c, draws in cell.controls.items():
                add(f"k sweep ({base})", c, len(draws), None, "k_sweep_controls")
    lines, warns = [], []
    for (table, c), e in sorted(found.items()):
        R, m = e["R"], e["m"]
        floor = 1 / (R + 1)
        text = f"{table}, {c}: R={R}, rank-p floor {floor:.3f}" + (f", Holm floor {min_holm_p(m, R):.3f} (m={m})" if m else "")
        lines.append(text)
        if table.startswith("Table 3") and c in MAIN_CONTROLS:  # warned above, under "Holm family"
            continue
        if floor > alpha:
            warns.append(f"{table}, {c}: with R={R} no rank p can fall below 1/(R+1) = {floor:.3f}; "
                         f"use {e['key']} ≥ {required_R(1, alpha)}")
        elif m and min_holm_p(m, R) > alpha:
            warns.append(f"{table}, {c}: Holm over {m} settings cannot fall below {m}/(R+1) = {min_holm_p(m, R):.3f}; "
                         f"use {e['key']} ≥ {required_R(m, alpha)}")
    return Check("Rank-p and Holm floors by table", "; ".join(lines) if lines else "no control draws stored",
                 "; ".join(warns) if warns else None)


def _distinct_check(run: RunData) -> Check:
    """Control draws that repeat head-sets: per setting and control (k-sweep points apart),
    the distinct head-sets among the R draws, and where it can be counted the pool of
    possible draws. A pool smaller than R is warned about, with what to change."""
    from vheads.evaluation import HeadSet, control_pool_size

    L, H = run.shape
    short, seen = [], set()
    cells = [(s, None, c) for (s, _), c in run.cells.items()]
    cells += [(s, k, c) for (s, _), by_k in run.ksweep.items() for k, c in by_k.items()]
    for s, k, cell in cells:
        for name in cell.controls:
            key = (s, k, name)
            R, D = len(cell.controls[name]), len(cell.distinct(name))
            if key in seen or R < 2 or D == R:
                continue
            seen.add(key)
            pool = None
            heads = run.discovery.get(s, {}).get("headset")
            if k is None and heads and L and H:
                pool = control_pool_size(name, HeadSet(heads, L, H, run.attention_layers))
            where = f"{s}{f' at k={k}' if k is not None else ''}, {name}"
            short.append(f"{where}: {D} distinct of R={R}" + (f" (pool {pool})" if pool is not None else ""))
    if not short:
        return Check("Distinct control head-sets", "every control draw is a distinct head-set")
    return Check("Distinct control head-sets", "; ".join(short),
                 f"{len(short)} control(s) repeat head-sets among their R draws (a pool smaller than R must): mean, "
                 "SD, z and Spearman are taken over the distinct head-sets, the rank p over every draw; use a larger "
                 "k, fewer draws (R within the pool), or the any-layer control")


def _templates_text(config: dict | None, model: str) -> str:
    """Every question template of the run: the config's own, the model's defaults for the
    rest (the tiny model's word-level set, or the natural-language one), named."""
    from vheads.data import default_templates, templates_name

    own = (config or {}).get("templates") or {}
    words = {**default_templates(model).to_dict(), **own}
    return f"{templates_name(model)} set; " + "; ".join(f"{k}{' (changed)' if k in own else ''}: \"{v}\"" for k, v in words.items())


def _prompt_checks(run: RunData) -> list[Check]:
    """The rendered prompt of one item per kind, as the study built it (image block
    summarised), with the chat template and system prompt that made it."""
    import json

    prompts = run.meta.get("prompts")
    cfg = run.config or {}
    template = cfg.get("chat_template") or "the checkpoint's own"
    system = json.dumps(cfg["system_prompt"]) if cfg.get("system_prompt") else "the template's default"
    how = f"chat template: {template}; system prompt: {system}"
    if not isinstance(prompts, dict) or not prompts:
        return [Check("Rendered prompts", f"not recorded (a run made before vheads recorded them); {how}")]
    return [Check("Rendered prompts", how)] + [Check(f"Rendered prompt: {kind}", json.dumps(text, ensure_ascii=False))
                                               for kind, text in prompts.items()]


def _param(test: str, name: str) -> float | None:
    from vheads.report._data import parse_test_id

    t = parse_test_id(test)
    return t.value if t.param == name else None
