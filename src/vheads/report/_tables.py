"""The report's tables of S against its controls, computed from a :class:`RunData` with the
comparisons of :mod:`vheads.report._verdicts` (rank p, Holm, verdict):

- **significance** (the seed's Table 3 layout): per setting × test, ``T_S`` with its 95%
  t-interval over items, and per control type the controls' mean ± SD over draws, z,
  the rank p ``(1 + #{T_r ≥ T_S}) / (R + 1)`` and the Holm-adjusted p over the family of
  settings (one family per test and control type);
- layer- against attention-matched controls (Table 9), NCS per row group (Table 13), NCS arms
  (Table 11), the k and β sweeps (Tables 14 and 18).

The other tables have their own modules, re-exported here: generic-damage controls (Table 12,
:mod:`~vheads.report._generic_damage`), overlap with split-half ceilings (Table 20,
:mod:`~vheads.report._overlap_tables`), the baseline audit (Table 22, :mod:`~vheads.report._audit`),
metric robustness (:mod:`~vheads.report._metric_robustness`); number formatting is
:mod:`~vheads.report._format`.
"""

from __future__ import annotations

import numpy as np

from vheads._ids import is_ablation_test, parse_headset_id, sweep_test_id
from vheads.evaluation import bootstrap_diff_ci, t_interval, welch_interval
from vheads.report._audit import audit_flags, audit_table  # noqa: F401 - re-exported
from vheads.report._data import RunData, cfg_get, control_pools, fallback_note, sweep_points
from vheads.report._doc import Table
from vheads.report._format import fmt, fmt_ci, fmt_p, fmt_verdict
from vheads.report._generic_damage import _few, damage_reading, generic_damage_table  # noqa: F401 - re-exported
from vheads.report._metric_robustness import METRIC_NAMES, metric_runs, metric_robustness_table  # noqa: F401 - re-exported
from vheads.report._overlap_tables import _PARTS, ceilings_table, overlap_matrix, overlap_table, what_changes  # noqa: F401 - re-exported
from vheads.report._verdicts import (  # noqa: F401 - re-exported
    ALPHA, MAIN_CONTROLS, ROW_GROUP_TESTS, TEST_NAMES, ControlStat, TestStat, _control_order, adjust_family, compare, control_rank,
    holm_family, limit_text, s_interval, significance, unadjusted,
)


def significance_table(run: RunData, tests: list[str], title: str, caption: str,
                       controls: tuple[str, ...] = MAIN_CONTROLS) -> Table | None:
    """Table 3 layout: settings as rows; per test, S [95% CI] and per control type
    ``mean ± SD [n]``, ``z``, ``p (Holm)`` and the verdict (yes / no / cannot tell,
    :func:`vheads.evaluation.verdict`). ``**`` marks Holm-adjusted p ≤ 0.05; ``*`` on S
    marks a *yes* against the first control type shown (layer-matched)."""
    tests = [t for t in tests if any((s, t) in run.cells for s in run.settings)]
    if not tests:
        return None
    per_test = {t: {st.setting: st for st in significance(run, t, controls=controls)} for t in tests}
    shown = {t: [c for c in controls if any(c in st.controls for st in per_test[t].values())] for t in tests}
    columns, groups = ["Setting"], [("", 1)]
    for t in tests:
        cols = ["S [95% CI]"]
        for c in shown[t]:
            R = max(st.controls[c].R for st in per_test[t].values() if c in st.controls)
            m = max((st.controls[c].family_m for st in per_test[t].values() if c in st.controls), default=0)
            cols += [f"{c} (R={R}) mean ± SD [n compared]", "z", f"p (Holm over {m})" if m else "p", "verdict"]
        columns += cols
        groups.append((TEST_NAMES.get(t, t), len(cols)))
    rows, undecided = [], []
    for s in run.settings:
        if not any(s in per_test[t] for t in tests):
            continue
        row = [s]
        for t in tests:
            st = per_test[t].get(s)
            if st is None:
                row += ["–"] * (1 + 4 * len(shown[t]))
                continue
            first = next((st.controls[c] for c in shown[t] if c in st.controls), None)
            mark = "*" if first is not None and first.verdict == "yes" else ""
            row.append(fmt_ci(st.interval, st.s) + mark)
            for c in shown[t]:
                cs = st.controls.get(c)
                if cs is None:
                    row += ["–"] * 4
                    continue
                row.append(cs.summary())
                row.append(fmt(cs.z, 1))
                p = fmt_p(cs.rank.p) if cs.rank else "–"
                ph = fmt_p(cs.p_holm) if cs.p_holm is not None else "none: a reference"
                row.append(f"{p} (**{ph}**)" if cs.reject else f"{p} ({ph})")
                row.append(fmt_verdict(cs.verdict))
                if cs.verdict == "cannot tell":
                    undecided.append(f"{s} ({c}, floor {cs.holm_floor:.3f})")
        rows.append(row)
    note = fallback_note(run.meta, sorted({c for t in tests for c in shown[t]}))
    note += (f" verdict: yes where the Holm-adjusted p ≤ {ALPHA}; no where it is not; cannot tell where even S above "
             "every control could not have reached it — the smallest adjusted p this setting's n and the family's "
             "other n's allow (its Holm floor; m/(n+1) when every member has the same n) is above "
             f"{ALPHA}, so the cell is no evidence either way.")
    if undecided:
        note += f" Cannot tell: {', '.join(undecided)} (see the checklist's floors for the R or pool that would decide)."
    return Table(title, columns, rows, caption + note, groups)


# ---- Table 9: layer-matched (A) against layer- and attention-matched (B) ----------------------

def matched_controls_table(run: RunData) -> Table | None:
    """Seed Table 9: each setting's rank p against layer-matched (A) and layer- and
    attention-matched (B) random head-sets, for CERS and NCS. B matches each drawn head's
    baseline image-attention mass to S's head in the same layer, so a p that holds under A
    but not under B says S's effect is that of any head that looks at the image as much."""
    ncs = "ncs-all" if any((s, "ncs-all") in run.cells for s in run.settings) else "ncs"
    tests = [t for t in ("cers", ncs) if any("attention-matched" in c.controls for (s, tt), c in run.cells.items() if tt == t)]
    if not tests:
        return None
    per = {t: {st.setting: st for st in significance(run, t, adjust=False)} for t in tests}
    asked = {c: R for c in ("layer-matched", "attention-matched") if isinstance(R := _asked_R(run, c), int)}
    cols, groups, rows = ["Setting"], [("", 1)], []
    for t in tests:
        cols += ["S", "A: layer-matched mean, p [n compared]", "B: + attention-matched mean, p [n compared]"]
        groups.append((TEST_NAMES.get(t, t), 3))
    short: dict[str, set] = {}  # control -> settings compared with fewer distinct head-sets than R asked
    for s in run.settings:
        if not any(s in per[t] for t in tests):
            continue
        row = [s]
        for t in tests:
            st = per[t].get(s)
            if st is None:
                row += ["–"] * 3
                continue
            row.append(fmt(st.t_s))
            for c in ("layer-matched", "attention-matched"):
                cs = st.controls.get(c)
                row.append(f"{fmt(cs.mean)}, {fmt_p(cs.rank.p)} [{cs.n}]" if cs is not None and cs.rank else "–")
                if cs is not None and c in asked and cs.n < asked[c]:
                    short.setdefault(c, set()).add(s)
        rows.append(row)
    note = ""
    for c, ss in short.items():
        pools = [control_pools(run.meta).get(s, {}).get(c, {}).get("pool") for s in ss]
        countable = all(isinstance(p, int) for p in pools)
        note += (f" {c}: {len(ss)} setting(s) compared with fewer distinct head-sets than R = {asked[c]} "
                 f"({', '.join(x for x in run.settings if x in ss)}): "
                 + ("each pool holds that many, compared whole (floor 1/(n+1))." if countable else
                    "its pool is not countable (the nearest head per layer repeats), so these draws hold only the n "
                    "shown: each p's floor is 1/(n+1), and a p at it says S beat every one of them, not that R "
                    "controls were met."))
    return Table("Rank p against layer-matched (A) and layer- and attention-matched (B) controls (seed Table 9)",
                 cols, rows, "Each cell: the controls' mean, the one-sided rank p over the n distinct head-sets compared "
                 "(in brackets; its floor 1/(n+1)), not adjusted"
                 + (f" (R asked: {', '.join(f'{c} {r}' for c, r in asked.items())})" if asked else "")
                 + ". B draws, per layer of S, the non-S head "
                 "whose baseline image-attention mass (last prompt row, CERS grids, no intervention) is nearest to that "
                 "of S's head." + note + fallback_note(run.meta, ["layer-matched", "attention-matched"]), groups)


def _asked_R(run: RunData, control: str) -> int | None:
    """The R the config asks of ``control`` (``[controls] <control> = R``), or None."""
    controls = cfg_get(run.config, "controls")
    v = controls.get(control) if isinstance(controls, dict) else None
    if isinstance(v, dict):
        v = cfg_get(v, "R", "draws", "n")
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def max_ncs_grid_note(run: RunData) -> str:
    """The maximum attainable NCS_grid of the item set (seed Table 16's caption): NCS_grid of
    the all-heads set, ``P(c | hide R_d from all heads) − P(c | hide R_c from all heads)``,
    read from the stored ``all-heads`` outcomes (the same items for every setting)."""
    vals = [c.controls["all-heads"] for (s, t), c in run.cells.items() if t == "ncs-grid" and "all-heads" in c.controls]
    if not vals:
        return ""
    return f" The maximum attainable NCS_grid (every head hidden from the cell) is {fmt(float(vals[0][0]))}."


# ---- NCS per row group, arms --------------------------------------------------------------


def row_group_table(run: RunData) -> Table | None:
    """Seed Tables 5/13: NCS of S when the image mask acts only at one group of rows; per
    row group S [95% CI], the first main control's mean and the rank p against it."""
    tests = [t for t in ROW_GROUP_TESTS if any((s, t) in run.cells for s in run.settings)]
    if not any(t != "ncs-all" for t in tests):  # only the default mask: Table 3 shows it
        return None
    stats = {t: {st.setting: st for st in significance(run, t, adjust=False)} for t in tests}
    control = next((c for c in MAIN_CONTROLS if any(c in st.controls for d in stats.values() for st in d.values())),
                   None)
    sub = ["S [95% CI]"] + (["ctrl", "p"] if control else [])
    columns, groups, rows = ["Setting"], [("", 1)], []
    for t in tests:
        columns += sub
        groups.append((ROW_GROUP_TESTS[t], len(sub)))
    for s in run.settings:
        if not any(s in stats[t] for t in tests):
            continue
        row = [s]
        for t in tests:
            st = stats[t].get(s)
            if st is None:
                row += ["–"] * len(sub)
                continue
            row.append(fmt_ci(st.interval, st.s))
            if control:
                cs = st.controls.get(control)
                at_floor = cs is not None and cs.rank is not None and cs.rank.n_at_least == 0
                p = fmt_p(cs.rank.p) if cs is not None and cs.rank else "–"
                row += [fmt(cs.mean) if cs else "–", f"**{p}**" if at_floor else p]
        rows.append(row)
    return Table("NCS per row group (seed Tables 5 and 13)", columns, rows,
                 f"S with NCS's Welch 95% interval over its matched and mismatched arms (a t-interval over items where "
                 f"no arms are stored); ctrl: mean of the distinct {control or 'control'} head-sets compared; p: rank p "
                 "over them (one-sided, floor 1/(n+1), not adjusted); bold: S above every one."
                 + (fallback_note(run.meta, control) if control else ""), groups)


def arms_table(run: RunData) -> Table | None:
    """Seed Table 11: NCS of S split into its matched and mismatched drops, with NCS's
    Welch interval and its percentile bootstrap (2,000 resamples of both arms; each row's
    seed derived from the run's seed, the table and the row). With fewer than
    :data:`vheads.evaluation.MIN_BOOTSTRAP_N` items in an arm, where a percentile bootstrap
    may undercover, the BCa interval is printed beside it."""
    from vheads._seeds import derived_seed
    from vheads.evaluation import MIN_BOOTSTRAP_N, bca_diff_ci

    seed = cfg_get(run.config, "seed", default=0)
    seed = seed if isinstance(seed, int) and seed >= 0 else 0
    rows, small = [], False
    for s in run.settings + run.score_settings:  # the score points' arms too
        for t in sorted({t for (ss, t, _) in run.arms if ss == s and not is_ablation_test(t)}):  # ablations: their own table
            m, mm = run.arms.get((s, t, "matched")), run.arms.get((s, t, "mismatched"))
            if m is None or mm is None:
                continue
            two = len(m) >= 2 and len(mm) >= 2
            row_seed = derived_seed(seed, "table", "arms", s, t)
            few = two and min(len(m), len(mm)) < MIN_BOOTSTRAP_N
            small |= few
            rows.append([s, t, fmt_ci(t_interval(m) if len(m) >= 2 else None, m),
                         fmt_ci(t_interval(mm) if len(mm) >= 2 else None, mm),
                         fmt_ci(welch_interval(m, mm)) if two else fmt(float(np.mean(m) - np.mean(mm))),
                         fmt_ci(bootstrap_diff_ci(m, mm, seed=row_seed)) if two else "–",
                         fmt_ci(bca_diff_ci(m, mm, seed=row_seed)) if few else "–"])
    if not rows:
        return None
    return Table("NCS split into its arms (seed Table 11)", ["Setting", "Test", "Matched drop [95% CI]",
                 "Mismatched drop [95% CI]", "NCS [Welch 95% CI]", "NCS [bootstrap 95% CI]",
                 f"NCS [BCa 95% CI] (n < {MIN_BOOTSTRAP_N})"], rows,
                 f"Drops are the {run.metric} of the key at baseline minus masked, for the discovered set; NCS = mean "
                 "matched drop − mean mismatched drop. Generic damage moves both arms alike and cancels. The arms are "
                 "different items, so NCS is a difference of two independent means: its interval is Welch's t (both "
                 "arms' variances, Welch–Satterthwaite df) and a percentile bootstrap resampling both arms (2,000 "
                 "resamples; seed derived from the run's seed, this table and the row)."
                 + (f" With fewer than {MIN_BOOTSTRAP_N} items per arm the percentile bootstrap may undercover; the "
                    "bias-corrected and accelerated (BCa) interval is printed beside it." if small else ""),
                 text_cols=2)


# ---- sweeps (Tables 14 and 18) ---------------------------------------------------------------


def sweep_table(run: RunData, param: str) -> Table | None:
    """Seed Tables 14 (k) and 18 (β): at every sweep point, S with its 95% interval (NCS:
    Welch over the arms where stored; else t over items) against that point's own controls
    (mean ± SD and [min, max] over its distinct head-sets) and the rank p (floor 1/(n+1))."""
    pts = sweep_points(run, param)
    if not pts:
        return None
    rows, mains = [], False
    for (s, base) in sorted(pts, key=lambda k: (k[1], run.settings.index(k[0]) if k[0] in run.settings else 99)):
        for x in sorted(pts[(s, base)]):
            cell = pts[(s, base)][x]
            arms_key = sweep_test_id(base, "k", x) if param == "k" and (s, sweep_test_id(base, "k", x), "matched") in run.arms else base
            st = compare(cell, s, base, s_interval(run, s, arms_key, cell.s) if param == "k" else None)
            main = cell is run.cells.get((s, base))  # the main point, read from Table 3's own cell
            mains |= main
            for i, c in enumerate(sorted(st.controls, key=_control_order) or [None]):
                cs = st.controls.get(c) if c else None
                lead = ([s, TEST_NAMES.get(base, base), f"{x:g}" + (" (main)" if main else ""), fmt_ci(st.interval, st.s)]
                        if i == 0 else ["", "", "", ""])
                if cs is None:
                    rows.append(lead + ["–"] * 5)
                    continue
                rows.append(lead + [c, f"{cs.R} ({cs.n_distinct})", cs.summary(), f"[{fmt(cs.t.min())}, {fmt(cs.t.max())}]",
                                    fmt_p(cs.rank.p) if cs.rank else "–"])
    name, table = ("k", "14") if param == "k" else ("β", "18")
    return Table(f"Sweep over {name} against controls at every point (seed Table {table})",
                 ["Setting", "Test", name, "S [95% CI]", "Control", "R (distinct)", "mean ± SD [distinct]", "[min, max]", "rank p"], rows,
                 f"At every {name}, S (95% t-interval over items; NCS: Welch over its two arms) against that point's own layer-matched draws "
                 f"({'drawn for the top-k set of each k' if param == 'k' else 'the first draws of the main layer-matched controls, re-run at each β'}); "
                 "R (distinct): the draws and the distinct head-sets among them; mean ± SD over the distinct head-sets; "
                 "rank p over the distinct head-sets, one-sided with floor 1/(n+1), not adjusted. "
                 + (f"(main): the study's {'own k' if param == 'k' else 'headline β'} where the sweep has no point of its "
                    "own there, read from Table 3's cell with Table 3's controls. " if mains else "")
                 + f"Every other row, the {'own k' if param == 'k' else 'headline β'} included where the sweep ran a point "
                 "there, shows that point's own draws (their n in the R column): fewer than Table 3 compares, so its p "
                 "can sit at a higher floor than Table 3's for the same S."
                 + fallback_note(run.meta, (lambda label: parse_headset_id(label).k is not None) if param == "k" else "layer-matched",
                                 {s for s, _ in pts}), text_cols=2)
