"""The reporting protocol: what every visual-head result should state, filled in from a run,
with a warning wherever the run falls short.

The checklist follows the seed paper's recommendations: name the query type, the
attention source and the corpus (they move the head-set more than anything else); give
k; test against layer-matched random controls with enough draws R that the rank p can
reach significance after Holm over the family of settings tested together; state β and
the row groups; audit the evaluation sets' baselines.

Why R matters: compared with n distinct control head-sets (R, or the whole pool when it
holds at most 2R) the rank p is at least ``1/(n+1)``, and Holm over a family of m settings
multiplies the smallest p by m, so **no** Holm-adjusted p can fall below ``min(1, m/(n+1))``.
The run needs ``n ≥ ceil(m/α) − 1`` (239 for m = 12, α = 0.05): R that large, and pools
that hold as many head-sets.
"""

from __future__ import annotations

import math

from vheads._ids import k_label, sweep_test_id
from vheads.report._data import (
    RunData, cfg_get, control_fallbacks, control_pools, headline_beta, settings_text, sweep_points,
)
from vheads.evaluation import holm_floors, required_n
from vheads.report._doc import Check, Table
from vheads.report._tables import ALPHA, MAIN_CONTROLS, ROW_GROUP_TESTS, audit_flags, compare, holm_family, s_interval

MAIN_TESTS = ("cers", "ncs-all")
CASES_TITLE = "Protocol cases: {item}"  # the table of a check's long list of cases
FOLD_AT = 4  # a check lists at most this many cases in its line; more go to a table of their own
WARNING_CHARS = 200  # a warning at the top of the report, "item: warning", is one line of at most this many characters


def fit(head: str, parts: list[str], tail: str = "", limit: int = WARNING_CHARS, sep: str = ", ") -> str:
    """``head`` + as many of ``parts`` as fit (then "+N more") + ``tail``, within ``limit``
    characters where the parts allow it (the head and tail are never cut)."""
    for n in range(len(parts), -1, -1):
        more = f"{sep if n else ''}+{len(parts) - n} more" if n < len(parts) else ""
        text = head + sep.join(parts[:n]) + more + tail
        if len(text) <= limit or n == 0:
            return text
    return head + tail


def listed(item: str, columns: list[str], rows: list[list[str]], inline, summary: str,
           text_cols: int = 1) -> tuple[str, Table | None]:
    """A check's value for a list of cases: the cases in the line (``inline(row)`` each) when
    there are at most :data:`FOLD_AT`, else ``summary`` and the cases as a table of their own."""
    if len(rows) <= FOLD_AT:
        return "; ".join(inline(r) for r in rows), None
    return (f"{summary}; the {len(rows)} cases: table \"{CASES_TITLE.format(item=item)}\" below",
            Table(CASES_TITLE.format(item=item), columns, rows, folded=True, text_cols=text_cols))


def min_holm_p(m: int, R: int) -> float:
    """Smallest Holm-adjusted p a family of m rank p's with R controls each can reach: every
    S above all its controls gives p = 1/(R+1) for all m, and Holm gives them m/(R+1)."""
    return min(1.0, m / (R + 1))


def required_R(m: int, alpha: float = ALPHA) -> int:
    """Smallest R with ``m / (R + 1) ≤ alpha`` (:func:`vheads.evaluation.required_n`)."""
    return required_n(m, alpha)


def _range(values) -> str:
    vals = sorted(set(values))
    return str(vals[0]) if len(vals) == 1 else f"{vals[0]}–{vals[-1]}"


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


def _fallbacks_check(run: RunData) -> Check:
    """Every control draw's fallbacks, by setting and control label (main draws, k-sweep
    points, head-set algebra parts): ``"cm-ref-out, layer-matched@k=8: layer 3: ..."``."""
    rows = [[s, label or "", f] for s, by in control_fallbacks(run.meta).items() for label, fbs in by.items() for f in fbs]
    item = "Layer-matched fallbacks"
    if not rows:
        return Check(item, "none recorded (every control draw: main, row groups, k and β sweeps, algebra, pointing suite)")
    where = sorted({(s, label) for s, label, _ in rows})
    value, cases = listed(item, ["Setting", "Control draws", "Fallback"], rows,
                          lambda r: f"{r[0]}, {r[1]}: {r[2]}" if r[1] else f"{r[0]}: {r[2]}",
                          f"{len(rows)} fallback(s) in {len(where)} setting × control draw(s)", text_cols=3)
    warn = (f"{len(rows)} fallback(s) in {len(where)} setting × control draw(s) do not keep S's per-layer counts: a smaller "
            "k (key k), or the any-layer control, avoids them")
    return Check(item, value, warn, cases)


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
    checks.append(Check("Settings", f"{settings_text(run)}: {', '.join(run.settings + run.score_settings)}"
                        if run.settings else "none"))
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

    # controls, R, rank-p floor, Holm family: all over the n distinct head-sets each S is compared with
    fam = holm_family(run)
    pools = control_pools(run.meta)
    for c in MAIN_CONTROLS:
        cells = {(s, t): run.cells[(s, t)] for t in tests_present for s in run.settings
                 if (s, t) in run.cells and c in run.cells[(s, t)].controls}
        Rs = sorted({len(cell.controls[c]) for cell in cells.values()})
        want = _configured_R(run, c)
        if not Rs:
            warn = (f"no {c} controls stored" + (f" (the config asks for R={want})" if want else "")
                    + ("; S cannot be told apart from random heads of the same layers" if c == "layer-matched" else ""))
            checks.append(Check(f"Controls: {c}", "none", warn if (c == "layer-matched" or want) else None))
            continue
        # a sequential comparison's n is its R_max (its floor's n), whatever it stopped at
        ns = {key: cell.sequential[c][1] if c in cell.sequential else len(cell.distinct(c)) for key, cell in cells.items()}
        recorded = {s: pools.get(s, {}).get(c, {}).get("n") for s, _ in cells}
        short = [f"{s}" for (s, _), cell in cells.items() if c not in cell.sequential
                 and (len(cell.controls[c]) < recorded[s] if recorded[s] else (not pools and want and len(cell.controls[c]) < want))]
        stopped = sum(1 for cell in cells.values() if c in cell.sequential and len(cell.distinct(c)) < cell.sequential[c][1])
        checks.append(Check(f"Controls: {c}, R", f"{_join(Rs)} stored, {_range(ns.values())} distinct head-sets "
                            + ("drawn at most (R_max)" if stopped or any(c in cell.sequential for cell in cells.values()) else "compared")
                            + (f" (config: R={want}; a pool of at most 2R is compared whole)" if want else "")
                            + (f"; {stopped} comparison(s) stopped early, sequentially (h controls reached S, or "
                               "the Holm verdict was settled: then p is the largest its remaining draws could give)" if stopped else ""),
                            f"fewer {c} head-sets stored than drawn for {len(set(short))} setting(s)"
                            + ("" if pools else f" (the config asks for {want})") + " (an unfinished run?)"
                            if short else None))
        n_min = min(ns.values())
        checks.append(Check(f"Rank-p floor ({c})", f"1/(n+1) = {1 / (n_min + 1):.4f} at the smallest n ({n_min})"))
        per_test = {t: [s for s in run.settings if (s, t) in ns and (fam is None or s in fam)] for t in tests_present}
        m = max(len(v) for v in per_test.values())
        floors = {(s, t): f for t, members in per_test.items() if members
                  for s, f in zip(members, holm_floors([ns[(s, t)] for s in members]))}  # each member's own floor
        out = sorted({s for (s, t), f in floors.items() if f > alpha})
        warn = None
        if out:
            worst = max(ns[key] for key, f in floors.items() if f > alpha)
            need = required_n(m, alpha)
            whole = [pools.get(s, {}).get(c, {}) for s in out]
            pool_limited = [e["pool"] for e in whole if e.get("mode") == "exact" and isinstance(e.get("pool"), int)
                            and e["pool"] < need]
            low = min(f for f in floors.values() if f > alpha)
            warn = (f"Holm over {m} settings cannot reach {alpha} for {len(out)} of them (n ≤ {worst}, floor ≥ {low:.3f}; "
                    f"needs n ≥ {need}): "
                    + (f"the pool ({_range(pool_limited)}, compared whole) is the limit, not R: raise k or the model"
                       if len(pool_limited) == len(out) else f"needs R ≥ {need} (key controls.{c}) and pools as large"))
        checks.append(Check(f"Holm family ({c})", f"{m} of the {settings_text(run)} per test (score points and a causal "
                            "setting stay outside); smallest possible adjusted p m/(n+1) = "
                            f"{min_holm_p(m, max(ns.values())):.4f} at the largest n"
                            + (f"; out of reach (floor > {alpha}): {', '.join(out)}" if out else ""), warn))
    checks.append(_fallbacks_check(run))
    checks.append(_distinct_check(run))
    checks.append(_floors_check(run, alpha))
    other = sorted({c for cell in run.cells.values() for c in cell.controls if c not in MAIN_CONTROLS})
    short = {}  # other controls with fewer distinct head-sets than the R asked and no countable pool
    for c in other:
        want = _configured_R(run, c)
        ns = [len(cell.distinct(c)) for (s, t), cell in run.cells.items() if t in tests_present and c in cell.controls
              and not isinstance(pools.get(s, {}).get(c, {}).get("pool"), int)]
        if want and ns and min(ns) < want and max(len(cell.controls[c]) for cell in run.cells.values() if c in cell.controls) > 1:
            short[c] = (min(ns), max(ns), want)
    checks.append(Check("Other controls", _join(other) if other else "none",
                        "; ".join(f"{c} compared {lo}–{hi} distinct head-sets of R = {want} asked (its pool is not "
                                  "countable): its rank p's floor is 1/(n+1), see Table 9's n" for c, (lo, hi, want) in short.items())
                        or None))

    # beta, sweeps, row groups
    betas = sorted({v for (_, t) in run.cells for v in [_param(t, "beta")] if v is not None})
    checks.append(Check("Steering strength β (headline)", headline_text(run)
                        + (f"; sweep: {', '.join(f'{b:g}' for b in betas)}" if betas else "")))
    ksweep = sorted({k for cells in run.ksweep.values() for k in cells}
                    | {int(v) for (_, t) in run.cells for v in [_param(t, "k")] if v is not None})
    checks.append(Check("k sweep", (", ".join(map(str, ksweep)) + "; headline k: the config's k (0: the seed's 100 of "
                        "1,152 heads scaled to the model), fixed before discovery") if ksweep else "none"))
    checks += sweep_change_checks(run, alpha)
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
                            fit(f"{len(bad)} evaluation set(s) outside the expected range: ",
                                [f"{r['name']} = {r['mean_p_key']:.3f} (expected [{r['lo']:.2f}, {r['hi']:.2f}])" for r in bad],
                                limit=WARNING_CHARS - len("Baseline audit: ")) if bad else None))
    if run.overlap or run.ceilings:
        splits = _join(sorted({c["splits"] for c in run.ceilings.values()}))
        checks.append(Check("Overlap noise ceilings", f"{len(run.ceilings)} of the {settings_text(run)} (every discovered "
                            f"one; a causal setting has no discovery split-halves), splits: {splits}",
                            "overlaps are reported without split-half noise ceilings" if not run.ceilings else None))
    seeds = cfg_get(run.config, "seeds", "seed")
    checks.append(Check("Seeds", str(seeds) if seeds is not None else "not recorded in the config"))
    return checks


HOLM_TESTS = ("cers", "ncs-all", "ncs", "cers-sym", "ncs-grid")  # tables with Holm over the settings


def _floors_check(run: RunData, alpha: float = ALPHA) -> Check:
    """Every table's rank-p floor ``1/(n+1)`` per control (n: its fewest distinct head-sets
    compared there) and, where the table Holm-adjusts over the settings (Table 3, Table 16:
    the main controls), the Holm floor ``m/(n+1)``; a warning names each one above ``alpha`` with the R it needs (Table 3's
    main controls are warned about under "Holm family")."""
    from vheads.report._data import parse_test_id

    fam = holm_family(run)
    pools = control_pools(run.meta)
    found: dict[tuple[str, str], dict] = {}  # (table, control) -> n (its fewest), m (None: not adjusted), key, pool

    def add(table, control, n, holm_m, key, setting, pool_label):
        pool = pools.get(setting, {}).get(pool_label, {})
        e = found.setdefault((table, control), {"n": n, "m": holm_m, "key": key, "pool": None})
        if n <= e["n"]:
            e["n"] = n
            e["pool"] = pool.get("pool") if pool.get("mode") == "exact" else None  # compared whole: the pool's size

    for (s, t), cell in run.cells.items():
        tid = parse_test_id(t)
        for c, draws in cell.controls.items():
            n = cell.sequential[c][1] if c in cell.sequential else len(cell.distinct(c))  # a sequential p's floor: R_max
            if len(draws) < 2 and c not in MAIN_CONTROLS:  # a deterministic control: no rank p is read
                continue
            if tid.param == "beta":
                add(f"β sweep ({tid.base})", c, n, None, "beta_sweep_controls", s, c)
            elif t in ROW_GROUP_TESTS and t != "ncs-all":
                add(f"row groups ({t})", c, n, None, f"controls.{c}", s, c)
            elif t in HOLM_TESTS:
                m = None
                if c in MAIN_CONTROLS:
                    m = len([x for x in run.settings if (x, t) in run.cells and c in run.cells[(x, t)].controls
                             and (fam is None or x in fam)])
                add(f"{'Table 3' if t in ('cers', 'ncs-all', 'ncs') else 'Table 16'} ({t})", c, n, m, f"controls.{c}", s, c)
    for (s, base), by_k in run.ksweep.items():
        for k, cell in by_k.items():
            for c in cell.controls:
                add(f"k sweep ({base})", c, len(cell.distinct(c)), None, "k_sweep_controls", s, k_label(c, k))
    rows, warns = [], []
    for (table, c), e in sorted(found.items()):
        n, m, pool = e["n"], e["m"], e["pool"]
        floor = 1 / (n + 1)
        need = required_n(m or 1, alpha)  # Holm over m at alpha: n ≥ m/α − 1 (one test: 19)
        reach = min_holm_p(m, n) if m else floor
        fix, why = "–", None
        if reach > alpha:
            over = f"Holm over {m} settings" if m else "a rank p alone"
            if pool is not None and pool < need:  # compared whole: no R can add head-sets the pool lacks
                fix = f"the pool ({pool}) is the limit: a larger k or a larger model"
                why = (f"{table}, {c}: {over} cannot fall below {reach:.3f} with n={n}, and needs n ≥ {need}; the pool "
                       f"holds {pool} head-sets (compared whole): a larger k or a larger model enlarges it, not R")
            else:
                fix = f"{e['key']} ≥ {need}" + (" (and a pool that holds them)" if pool is None else "")
                why = f"{table}, {c}: {over} cannot fall below {reach:.3f} with n={n}; it needs n ≥ {need}: use {fix}"
        if why and not (table.startswith("Table 3") and c in MAIN_CONTROLS):  # those: warned under "Holm family"
            warns.append((why, e["key"] if pool is None or pool >= need else "k"))
        rows.append([table, c, str(n), f"{floor:.3f}", f"{min_holm_p(m, n):.3f} (m={m})" if m else "–",
                     f"{need} (m={m or 1})", fix])
    item = "Rank-p and Holm floors by table"
    if not rows:
        return Check(item, "no control draws stored")
    value, cases = listed(item, ["Table", "Control", "n compared", "rank-p floor 1/(n+1)", "Holm floor m/(n+1)",
                                 f"n needed at {alpha} (n ≥ m/α − 1)", f"to reach {alpha}"], rows,
                          lambda r: f"{r[0]}, {r[1]}: n={r[2]}, rank-p floor {r[3]}" + (f", Holm floor {r[4]}" if r[4] != "–" else "")
                          + (f"; needs n ≥ {r[5]}: {r[6]}" if r[6] != "–" else ""),
                          f"rank-p floors {min(r[3] for r in rows)}–{max(r[3] for r in rows)} over {len(rows)} table × control pairs",
                          text_cols=2)
    warn = None
    if len(warns) == 1 and len(f"{item}: {warns[0][0]}") <= WARNING_CHARS:
        warn = warns[0][0]
    elif warns:
        keys = sorted({k for _, k in warns})
        warn = fit(f"{len(warns)} table × control pairs cannot reach {alpha}: raise ", keys, " (see the floors table; k: "
                   "the pool is the limit)",
                   limit=WARNING_CHARS - len(item) - 2)
    return Check(item, value, warn, cases)


def headline_text(run: RunData) -> str:
    """The headline β and the rule that fixed it, as the report states it."""
    beta, rec = headline_beta(run)
    if beta is None:
        return "not recorded"
    if rec is None:
        return f"{beta:g} (the config's beta; a run from before beta_rule)"
    if rec.get("applied"):
        return f"{beta:g} (beta_rule {rec['rule']}: {rec['applied']})"
    if str(rec.get("rule")).startswith("controls"):
        rms = ", ".join(f"{v:.3f} at {b}" for b, v in (rec.get("rms") or {}).items())
        how = ("the largest sweep β" if rec.get("met") else f"no sweep β met {rec.get('tolerance')}: the β of smallest RMS")
        return (f"{beta:g}, fixed by beta_rule {rec['rule']} from the β sweep's controls alone (S not read): {how} at which "
                f"the RMS of the layer-matched controls' CERS is ≤ {rec.get('tolerance')} (RMS {rms}; "
                f"{rec.get('n_draws')} control draws)")
    return f"{beta:g} (beta_rule {rec['rule']}: the config's beta)"


def _state(st) -> str:
    """``+`` / ``−`` where S's 95% interval lies above / below 0, ``0`` where it holds 0."""
    iv = st.interval
    if iv is None:
        return "0"
    return "+" if iv.low > 0 else "−" if iv.high < 0 else "0"


def sweep_changes(run: RunData, param: str) -> dict[str, list[tuple[str, list[tuple[float, float, str]]]]]:
    """Per test, the settings whose S changes sign or significance across the ``param`` sweep
    (β or k): at each point, S's mean and whether its 95% interval (t over items; NCS: Welch
    over its arms) lies above 0 (``+``), below (``−``) or holds 0 (``0``); a setting is
    listed when two points differ in that state. ``{test: [(setting, [(x, mean, state)])]}``."""
    out: dict[str, list] = {}
    for (s, base), by_x in sorted(sweep_points(run, param).items()):
        pts = []
        for x in sorted(by_x):
            cell = by_x[x]
            key = sweep_test_id(base, "k", x) if param == "k" and (s, sweep_test_id(base, "k", x), "matched") in run.arms else base
            st = compare(cell, s, base, s_interval(run, s, key, cell.s) if param == "k" else None)
            if st.t_s is not None:
                pts.append((x, st.t_s, _state(st)))
        if len({state for *_, state in pts}) > 1:
            out.setdefault(base, []).append((s, pts))
    return out


def sweep_change_checks(run: RunData, alpha: float = ALPHA) -> list[Check]:
    """One checklist line per sweep: where S's statistic changes sign or significance across
    it, the headline result depends on the β (k) chosen."""
    checks = []
    for param, name, key in (("beta", "β", "beta_rule"), ("k", "k", "k")):
        changes = sweep_changes(run, param)
        if not sweep_points(run, param):
            continue
        rows = [[t, s, ", ".join(f"{x:g}: {m:+.2f}{'' if st == '0' else '*'}" for x, m, st in pts)]
                for t, rows_t in changes.items() for s, pts in rows_t]
        item = f"{name} sweep: S across points (*: 95% interval excludes 0)"
        value, cases = (listed(item, ["Test", "Setting", f"S at each {name} (*: interval excludes 0)"], rows,
                               lambda r: f"{r[1]} ({r[0]}: {r[2]})", f"{len(rows)} change(s)", text_cols=2)
                        if rows else ("no change of sign or significance", None))
        warn = (f"S's {'/'.join(changes)} changes sign or significance across the {name} sweep in {len(rows)} setting(s): "
                f"the headline {name} (key {key}) decides the reading") if rows else None
        checks.append(Check(item, value, warn, cases))
    return checks


def expected_distinct(pool: int, R: int) -> tuple[float, float]:
    """Mean and SD of the number of distinct head-sets among R independent uniform draws from
    a pool of N: ``E = N (1 − q)`` with ``q = (1 − 1/N)^R``, ``Var = N q + N (N − 1) (1 − 2/N)^R
    − N² q²`` (occupancy of N cells by R balls)."""
    N = float(pool)
    q = (1 - 1 / N) ** R
    var = N * q + N * (N - 1) * (1 - 2 / N) ** R - N * N * q * q
    return N * (1 - q), math.sqrt(max(var, 0.0))


def _distinct_check(run: RunData) -> Check:
    """How each control's head-sets were chosen. A study since wave 4 compares S with
    distinct head-sets only (the whole pool when it holds at most 2R): nothing repeats, and
    the one warning is a pool smaller than the R asked (S met all of it; its floors are the
    pool's). A store from before drew with replacement: it warns only where the repeats
    exceed what R independent uniform draws from the countable pool predict (distinct count
    more than 3 SD below :func:`expected_distinct`), or where the pool is smaller than R.
    Every statistic is taken over the distinct head-sets either way."""
    from vheads.evaluation import HeadSet, control_pool_size

    L, H = run.shape
    pools = control_pools(run.meta)
    if pools:
        exact = [(s, label, e) for s, by in pools.items() for label, e in by.items() if e.get("mode") == "exact"]
        small = [(s, label, e) for s, label, e in exact if e.get("R") and e["n"] < e["R"]]
        sizes = sorted({e["n"] for _, _, e in exact})
        summary = (f"distinct head-sets only: {len(exact)} control(s) compared whole (pools of "
                   f"{_range(sizes)}), the rest R drawn without repeats" if exact else
                   "distinct head-sets only: every control R drawn without repeats")
        warn = (f"{len(small)} control pool(s) hold fewer head-sets than the R asked (n = {_range(e['n'] for *_, e in small)}): "
                "each compared whole (floor 1/(n+1)); a larger k (key k) or model widens them") if small else None
        rows = [[s, label, str(e["n"]), str(e["R"])] for s, label, e in small]
        if rows:
            more, cases = listed("Distinct control head-sets", ["Setting", "Control", "Pool (compared whole)", "R asked"], rows,
                                 lambda r: f"{r[0]}, {r[1]}: pool {r[2]} < R={r[3]}", "pools smaller than R", text_cols=2)
            return Check("Distinct control head-sets", f"{summary}; {more}", warn, cases)
        return Check("Distinct control head-sets", summary, warn)
    short, seen, odd = [], set(), []
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
            if k is None and heads and L and H:  # a store without control_pools predates issue 41: S-disjoint draws
                drawn = f"{name}-disjoint" if name in ("layer-matched", "any-layer") else name
                pool = control_pool_size(drawn, HeadSet(heads, L, H, run.attention_layers))
            where = f"{s}{f' at k={k}' if k is not None else ''}, {name}"
            short.append(f"{where}: {D} distinct of R={R}" + (f" (pool {pool})" if pool is not None else ""))
            if pool is not None and (pool < R or D < expected_distinct(pool, R)[0] - 3 * expected_distinct(pool, R)[1]):
                odd.append(where)
    if not short:
        return Check("Distinct control head-sets", "every control draw is a distinct head-set")
    value, cases = listed("Distinct control head-sets", ["Setting, control", "Distinct head-sets"],
                          [t.split(": ", 1) for t in short], lambda r: f"{r[0]}: {r[1]}",
                          f"{len(short)} control(s) repeat head-sets", text_cols=1)
    return Check("Distinct control head-sets", value,
                 f"{len(odd)} control(s) repeat head-sets more than R draws from their pool predict, or have a pool smaller "
                 "than R: statistics use the distinct head-sets; rerun with this vheads (it compares a small pool whole)"
                 if odd else None, cases)


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
