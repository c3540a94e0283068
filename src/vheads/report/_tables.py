"""The report's tables, computed from a :class:`RunData` with ``vheads.evaluation``'s
statistics (nothing re-implemented here):

- **significance** (the seed's Table 3 layout): per setting × test, ``T_S`` with its 95%
  t-interval over items, and per control type the controls' mean ± SD over draws, z,
  the rank p ``(1 + #{T_r ≥ T_S}) / (R + 1)`` and the Holm-adjusted p over the family of
  settings (one family per test and control type);
- overlap with split-half ceilings (Table 20), NCS per row group (Table 13), NCS arms
  (Table 11), generic-damage controls (Table 12), the baseline audit (Table 22).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from vheads._ids import is_ablation_test, parse_headset_id, sweep_test_id
from vheads.causal import CAUSAL_SETTING
from vheads.evaluation import (
    Interval, RankP, bootstrap_diff_ci, holm, holm_floors, member_required_n, rank_p, required_n, t_interval, verdict, welch_interval, z_score,
)
from vheads.report._data import Cell, RunData, cfg_get, control_pools, fallback_note, sweep_points
from vheads.report._doc import Table

ALPHA = 0.05
MAIN_CONTROLS = ("layer-matched", "any-layer")
TEST_NAMES = {
    "cers": "CERS (steerability)", "cers-sym": "CERS, symmetric", "ncs-all": "NCS (necessity)", "ncs": "NCS (necessity)",
    "ncs-image": "NCS, image rows", "ncs-question": "NCS, question/option rows", "ncs-last": "NCS, last row",
    "ncs-grid": "NCS_grid (region contrast)", "text": "text-arm drop",
    "grounding": "grounding: pointing accuracy", "grounding-iou": "grounding: mean IoU", "grounding-acc50": "grounding: Acc@0.5",
}
ROW_GROUP_TESTS = {"ncs-all": "all rows", "ncs-image": "image rows", "ncs-question": "question/option rows",
                   "ncs-last": "last row"}


# ---- number formatting ----------------------------------------------------------------------


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.000"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_ci(iv: Interval | None, s: np.ndarray | None = None) -> str:
    if iv is not None:
        return f"{fmt(iv.mean)} [{fmt(iv.low)}, {fmt(iv.high)}]"
    if s is not None and len(s):
        return f"{fmt(float(np.mean(s)))} [n={len(s)}]"
    return "–"


# ---- significance (Table 3) ----------------------------------------------------------------


@dataclass
class ControlStat:
    """S against the R draws of one control type.

    ``mean``, ``sd``, ``z`` and the rank p are taken over the ``n_distinct`` distinct head-sets
    compared (a study since wave 4 stores no repeat: a pool of at most 2R compared whole, a
    larger one sampled without repeats; a store from before may repeat draws of a small
    pool, and a copy is the same outcome again: counted, it shrinks the SD and pushes the p
    below what the pool allows, 1/(pool + 1))."""

    control: str
    t: np.ndarray  # [R] the draws' statistics
    mean: float
    sd: float | None  # None for fewer than 2 distinct head-sets
    z: float | None
    rank: RankP | None
    p_holm: float | None = None  # None when S is outside the Holm family
    reject: bool = False
    n_distinct: int = 0
    #: the smallest adjusted p this member could reach with the n's of its family
    #: (:func:`vheads.evaluation.holm_floors`); outside a family, its rank p's floor 1/(n+1)
    holm_floor: float | None = None
    n_max: int | None = None  # a sequential rank p's R_max (vheads.evaluation._sequential): the floor's n, not the n compared
    verdict: str | None = None  # "yes" | "no" | "cannot tell" (vheads.evaluation.verdict); None: not read
    family: str | None = None  # what the verdict was adjusted over: "12 grid settings", "4 score points", "none"
    family_m: int = 0  # its size (0: outside any family, unadjusted)
    n_needed: int | None = None  # distinct head-sets it needs, the family's other n's as they are, to reach 0.05

    @property
    def p_verdict(self) -> float | None:
        """The p the verdict reads: Holm-adjusted in a family, the rank p outside one."""
        return self.p_holm if self.family_m else (self.rank.p if self.rank is not None else None)

    @property
    def R(self) -> int:
        """The draws stored (repeats included in a store from before wave 4)."""
        return len(self.t)

    @property
    def n(self) -> int:
        """The distinct head-sets S is compared with: the rank p's n, floor 1/(n + 1)."""
        return self.n_distinct

    def summary(self) -> str:
        """``mean ± SD [distinct head-sets]``."""
        return f"{fmt(self.mean)} ± {fmt(self.sd)} [{self.n_distinct}]"


@dataclass
class TestStat:
    """One setting × test: S's statistic and interval, and its comparison with each control type."""

    setting: str
    test: str
    s: np.ndarray | None
    interval: Interval | None
    controls: dict[str, ControlStat] = field(default_factory=dict)

    @property
    def t_s(self) -> float | None:
        return None if self.s is None or not len(self.s) else float(np.mean(self.s))


def s_interval(run: RunData, setting: str, test: str, s: np.ndarray | None) -> Interval | None:
    """S's 95% interval: Welch over the two stored arms for NCS (a difference of two
    independent means), else a t-interval over the per-item values."""
    m, mm = run.arms.get((setting, test, "matched")), run.arms.get((setting, test, "mismatched"))
    if m is not None and mm is not None and len(m) >= 2 and len(mm) >= 2:
        return welch_interval(m, mm)
    return t_interval(s) if s is not None and len(s) >= 2 else None


def compare(cell: Cell, setting: str, test: str, interval: Interval | None = None) -> TestStat:
    """S of one cell against each of its control types (no Holm yet); ``interval``
    defaults to a t-interval over S's per-item values."""
    s = cell.s
    if interval is None:
        interval = t_interval(s) if s is not None and len(s) >= 2 else None
    st = TestStat(setting, test, s, interval)
    t_s = st.t_s
    for name, t in cell.controls.items():
        if not len(t):
            continue
        td = cell.distinct(name)  # one value per distinct head-set
        sd = float(np.std(td, ddof=1)) if len(td) >= 2 else None
        z = z_score(t_s, td).z if (t_s is not None and len(td) >= 2) else None
        rank = control_rank(cell, name, t_s, td)
        st.controls[name] = ControlStat(name, t, float(np.mean(td)), sd, z, rank, n_distinct=len(td),
                                        n_max=cell.sequential[name][1] if name in cell.sequential else None)
    return st


def control_rank(cell: Cell, name: str, t_s: float | None, td: np.ndarray):
    """S's rank p against control ``name``'s distinct head-sets ``td`` (draw order): Besag and
    Clifford's sequential p with the run's (h, R_max) for an exchangeable control of a
    sequential run (:func:`vheads.evaluation.control_rank_p`), else the fixed-R rank p."""
    if t_s is None:
        return None
    if name in cell.sequential:
        from vheads.evaluation import control_rank_p

        if name in cell.settled:  # stopped once its Holm verdict was settled: p is its largest possible
            return control_rank_p(t_s, td, cell.sequential[name][0], cell.settled[name], settled=True)
        return control_rank_p(t_s, td, *cell.sequential[name])
    return rank_p(t_s, td)  # over the distinct head-sets compared


def holm_family(run: RunData) -> list[str] | None:
    """Settings the config names as the Holm family, or ``None`` (all settings tested together).
    The causal setting (the exact map's top-k, a reference) is outside the family unless named."""
    fam = cfg_get(run.config, "holm_family")
    if isinstance(fam, (list, tuple)) and all(isinstance(s, str) for s in fam):
        return list(fam)
    if CAUSAL_SETTING in run.settings:
        return [s for s in run.settings if s != CAUSAL_SETTING]
    return None


def significance(run: RunData, test: str, alpha: float = ALPHA, adjust: bool = True,
                 controls: tuple[str, ...] = MAIN_CONTROLS) -> list[TestStat]:
    """Every setting's :class:`TestStat` for ``test``, with Holm-adjusted rank p's.

    Holm runs once per control type over the family: the settings (of the config's
    ``holm_family`` if it lists setting ids, else all settings) that have S and that
    control type for this test; only the control types in ``controls`` are adjusted.
    ``adjust=False`` leaves ``p_holm`` unset.
    """
    stats = [compare(run.cells[(s, test)], s, test, s_interval(run, s, test, run.cells[(s, test)].s))
             for s in run.settings if (s, test) in run.cells]
    if not adjust:
        return stats
    listed = holm_family(run)
    for c in controls:
        ranked = [st for st in stats if c in st.controls and st.controls[c].rank is not None]
        members = [st for st in ranked if listed is None or st.setting in listed]
        adjust_family([st.controls[c] for st in members], "grid setting", alpha)
        for st in ranked:
            if st not in members:  # the causal setting: a reference, read on its own rank p
                unadjusted(st.controls[c], alpha)
    return stats


def adjust_family(members: list[ControlStat], what: str, alpha: float = ALPHA) -> None:
    """Holm over ``members`` (one control type of one test, in one metric), and each one's
    verdict: its adjusted p, its own floor given every member's n
    (:func:`vheads.evaluation.holm_floors`) and :func:`vheads.evaluation.verdict`. ``what``
    names a member ("grid setting", "score point"): the family reads "12 grid settings"."""
    if not members:
        return
    m = len(members)
    h = holm([cs.rank.p for cs in members], alpha=alpha)
    ns = [cs.n_max or cs.n for cs in members]  # a sequential p's floor is R_max's, not the n it stopped at
    floors = holm_floors(ns)
    for i, (cs, p_adj, rej, floor) in enumerate(zip(members, h.p_adjusted, h.reject, floors)):
        cs.p_holm, cs.reject, cs.holm_floor = float(p_adj), bool(rej), float(floor)
        cs.verdict = verdict(cs.p_holm, cs.holm_floor, alpha)
        cs.family, cs.family_m = f"{m} {what}{'s' * (m != 1)}", m
        if cs.verdict == "cannot tell":
            cs.n_needed = member_required_n(ns, i, alpha)


def unadjusted(cs: ControlStat, alpha: float = ALPHA) -> None:
    """The verdict of a test outside every Holm family (the causal setting, a reference): its
    rank p against ``alpha``, with the rank p's own floor 1/(n+1)."""
    cs.holm_floor = 1 / ((cs.n_max or cs.n) + 1)
    cs.verdict = verdict(cs.rank.p, cs.holm_floor, alpha)
    cs.family, cs.family_m = "none (a reference: unadjusted)", 0
    if cs.verdict == "cannot tell":
        cs.n_needed = required_n(1, alpha)


def fmt_verdict(v: str | None) -> str:
    """A verdict as the tables print it: **yes**, no, cannot tell; – when not read."""
    return "–" if v is None else "**yes**" if v == "yes" else v


def limit_text(run: RunData, setting: str, cs: ControlStat, alpha: float = ALPHA) -> str:
    """What would let a *cannot tell* cell decide: ``cs.n_needed`` distinct head-sets (the
    family's other n's as they are; :func:`vheads.evaluation.member_required_n`; with one n
    for all, Holm over m needs n ≥ m/α − 1, :func:`vheads.evaluation.required_n`). Where the
    control's pool was compared whole and holds fewer, the pool is the limit (a larger k or a
    larger model enlarges it), not R; else the key ``[controls] <control> = N``. A control
    without a countable pool (attention-matched) that gave fewer than R says so."""
    m, control, n = max(cs.family_m, 1), cs.control, cs.n
    need = cs.n_needed or required_n(m, alpha)
    over = f"Holm over {m}" if cs.family_m else "a rank p alone"
    rec = control_pools(run.meta).get(setting, {}).get(control, {})
    pool, whole = rec.get("pool"), rec.get("mode") == "exact"
    if whole and isinstance(pool, int) and pool < need:
        return (f"the {control} pool holds {pool} head-sets (compared whole), {over} needs n ≥ {need}: "
                "the pool is the limit — a larger k or a larger model enlarges it")
    if pool is None and rec and n < (rec.get("R") or 0):
        return (f"{n} distinct {control} head-sets of R = {rec['R']} drawn (its pool is not countable), {over} "
                f"needs n ≥ {need}: a larger k or a larger model widens it")
    return f"n = {n} {control} head-sets, {over} needs n ≥ {need}: set [controls] {control} = {need}"


def _control_order(name: str) -> tuple[int, str]:
    return (MAIN_CONTROLS.index(name) if name in MAIN_CONTROLS else len(MAIN_CONTROLS), name)


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


# ---- generic-damage controls ----------------------------------------------------------------


def damage_reading(run: RunData, setting: str, ncs: str = "ncs-all", control: str = "layer-matched") -> str:
    """One sentence per setting, from the numbers: is S's text-arm drop above its ``control``
    head-sets' (one-sided rank p over the distinct ones ≤ 0.05, not adjusted), and is its NCS?
    A text-arm drop above the controls is the generic damage this section looks for: S then
    matters for text it cannot see through the image, and its NCS need not be visual."""
    def vs(test):
        cell = run.cells.get((setting, test))
        if cell is None or cell.s is None or control not in cell.controls:
            return None
        cs = compare(cell, setting, test).controls[control]
        floor = 1 / (cs.n + 1)
        t_s = float(np.mean(cell.s))
        state = "cannot tell" if floor > ALPHA else "above" if cs.rank.p <= ALPHA and t_s > cs.mean else "within"
        return t_s, cs.mean, cs.rank.p, state, cs.n
    text, nc = vs("text"), vs(ncs) or vs("ncs")
    if text is None:
        return "–"
    above = text[3] == "above"
    t_txt = f"text-arm drop {fmt(text[0])} vs {fmt(text[1])} ({control}, p {fmt_p(text[2])})"
    if nc is None:
        return t_txt + (": generic damage" if above else ": cannot tell" + _few(text) if text[3] == "cannot tell"
                        else ": not above its controls")
    n_sig = nc[3] == "above"
    n_txt = f"NCS {fmt(nc[0])} vs {fmt(nc[1])} (p {fmt_p(nc[2])})"
    if above and n_sig:
        return f"generic damage: {t_txt}; its {n_txt} may not be visual"
    if above:
        return f"generic damage: {t_txt}; {n_txt}, " + ("cannot tell" + _few(nc) if nc[3] == "cannot tell" else
                                                       "not above its controls")
    if n_sig:
        return (f"visual: {n_txt} above its controls while its {t_txt} is not" if text[3] == "within" else
                f"{n_txt} above its controls; its {t_txt}: cannot tell{_few(text)}")
    undecided = [x for x in (nc, text) if x[3] == "cannot tell"]
    if undecided:
        return f"cannot tell: {n_txt}; {t_txt}{_few(min(undecided, key=lambda x: x[4]))}"
    return f"neither: {n_txt} and {t_txt} within the controls"


def _few(part) -> str:
    """Why a reading cannot tell: with n controls no rank p falls below 1/(n+1) > 0.05."""
    n = part[4]
    return (f" (with {n} {'control' if n == 1 else 'controls'} no rank p can fall below 1/(n+1) = {1 / (n + 1):.3f}"
            + ("; S is above every one" if part[0] > part[1] and part[2] == 1 / (n + 1) else "") + ")")


def generic_damage_table(run: RunData) -> Table | None:
    """Seed Table 12: S against every control type on NCS, CERS and the text arm, with a
    reading per setting (:func:`damage_reading`).

    Shown when the run has a text arm or any control beyond layer-matched / any-layer. A
    control shows the mean over its distinct head-sets, with their number and [min, max]
    where there is more than one (a copy of a head-set is the same outcome again).
    """
    tests = [t for t in ("ncs-all", "ncs", "cers", "text") if any((s, t) in run.cells for s in run.settings)]
    extra = {c for (s, t), cell in run.cells.items() if t in tests for c in cell.controls if c not in MAIN_CONTROLS}
    if "text" not in tests and not extra:
        return None
    reading = "text" in tests
    columns = ["Setting", "Head-set", "Heads"] + [TEST_NAMES.get(t, t) for t in tests] + (["Reading"] if reading else [])
    rows = []
    for s in run.settings:
        cells = {t: run.cells.get((s, t)) for t in tests}
        if not any(cells.values()):
            continue
        roles = ["S"] + sorted({c for cell in cells.values() if cell for c in cell.controls}, key=_control_order)
        for role in roles:
            row = [s if role == "S" else "", "discovered (S)" if role == "S" else role,
                   str(run.headset_sizes.get((s, role), "–"))]
            for t in tests:
                cell = cells[t]
                if cell is None:
                    row.append("–")
                elif role == "S":
                    row.append(fmt(float(np.mean(cell.s))) if cell.s is not None else "–")
                elif role in cell.controls:
                    v = cell.distinct(role)  # one value per distinct head-set
                    row.append(fmt(float(v.mean())) + (f" [{fmt(v.min())}, {fmt(v.max())}; {len(v)}]" if len(v) > 1 else ""))
                else:
                    row.append("–")
            if reading:
                row.append(damage_reading(run, s) if role == "S" else "")
            rows.append(row)
    return Table("Generic-damage controls (seed Table 12)", columns, rows,
                 "Each control type's statistic: the mean over its distinct head-sets, [min, max; their number]. The text "
                 "arm is the drop in P(key) on text-solvable items when the head-set is hidden from the text tokens: a "
                 "set that is merely generically important hurts there too. Reading (S's row): its text-arm drop and "
                 "its NCS against the layer-matched head-sets (one-sided rank p over the distinct ones, not adjusted, "
                 f"≤ {ALPHA}): a text-arm drop above the controls is generic damage, and then an NCS above them need not "
                 f"be visual. cannot tell: with n controls the rank p cannot fall below 1/(n+1) > {ALPHA}, so a p above "
                 f"{ALPHA} is no evidence that the drop lies within the controls."
                 + fallback_note(run.meta, lambda label: "@" not in label and "/" not in label), text_cols=2)


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


# ---- overlap and ceilings -------------------------------------------------------------------

_PARTS = ("corpus", "query type", "attention source")


def what_changes(a: str, b: str) -> str:
    pa, pb = a.split("-"), b.split("-")
    if len(pa) != 3 or len(pb) != 3:
        return "–"
    diff = [name for name, x, y in zip(_PARTS, pa, pb) if x != y]
    return diff[0] if len(diff) == 1 else " + ".join(diff) if diff else "same"


def overlap_matrix(run: RunData) -> tuple[list[str], np.ndarray, int | None] | None:
    """``M[i, j] = |S_i ∩ S_j|``: from the stored ``overlap`` table, else from the head-sets."""
    settings = [s for s in run.settings if s in run.discovery and run.discovery[s]["headset"]]
    if len(settings) < 2:
        return None
    idx = {s: i for i, s in enumerate(settings)}
    m = np.full((len(settings), len(settings)), np.nan)
    for i, s in enumerate(settings):
        m[i, i] = len(run.discovery[s]["headset"])
    for a, b in itertools.combinations(settings, 2):
        m[idx[a], idx[b]] = m[idx[b], idx[a]] = len(set(run.discovery[a]["headset"]) & set(run.discovery[b]["headset"]))
    for r in run.overlap:
        if r["a"] in idx and r["b"] in idx and r["a"] != r["b"]:
            m[idx[r["a"]], idx[r["b"]]] = m[idx[r["b"]], idx[r["a"]]] = r["overlap"]
    ks = {run.discovery[s]["k"] for s in settings}
    return settings, m, ks.pop() if len(ks) == 1 else None


def overlap_table(run: RunData) -> Table | None:
    """Seed Table 20: each pair of settings that differ in one factor, with their top-k
    overlap at half size (mean [2.5, 97.5 pct] over the half-splits), the geometric-mean
    ceiling and the overlap as a fraction of it. Pairs differing in several factors are
    left to the heatmap."""
    if not run.overlap:
        return None
    order = {s: i for i, s in enumerate(run.settings)}
    single = [r for r in run.overlap if what_changes(r["a"], r["b"]) in _PARTS]
    shown = single if single else run.overlap
    shown = sorted(shown, key=lambda r: (_PARTS.index(w) if (w := what_changes(r["a"], r["b"])) in _PARTS else 9,
                                         order.get(r["a"], 99), order.get(r["b"], 99)))
    rows = [[f"{r['a']} vs. {r['b']}", what_changes(r["a"], r["b"]), str(r["k"]),
             f"{fmt(r['half_mean'], 1)} [{fmt(r['half_lo'], 0)}, {fmt(r['half_hi'], 0)}]", str(r["overlap"]),
             fmt(r["ceiling_a"], 1), fmt(r["ceiling_b"], 1), fmt(r["geo_ceiling"], 1), fmt(r["fraction"], 2)]
            for r in shown]
    left_out = len(run.overlap) - len(shown)
    return Table("Top-k overlap against the noise ceiling (seed Table 20)",
                 ["Pair", "What changes", "k", "Shared heads at half size [2.5, 97.5]", "Shared (all items)",
                  "Ceiling A", "Ceiling B", "Geo-mean ceiling", "Fraction"], rows,
                 "Shared heads at half size: top-k of A on one half of the discovery items against top-k of B on "
                 "the other half, over the same half-splits as the ceilings (mean [2.5, 97.5 percentile]). "
                 "Ceiling: the same overlap between two halves of one setting (split-half noise ceiling); "
                 "geo-mean ceiling = sqrt(ceiling A · ceiling B); fraction = shared at half size / geo-mean ceiling, "
                 "so both sides are taken at the same number of items and a fraction near 1 means the two settings "
                 "find the same heads up to sampling noise. The all-items overlap is shown for reference only: it "
                 "is not comparable with a half-size ceiling."
                 + (f" {left_out} pairs that differ in more than one factor are in the heatmap only." if left_out else ""),
                 text_cols=2)


def ceilings_table(run: RunData) -> Table | None:
    if not run.ceilings:
        return None
    rows = [[s, str(c["k"]), f"{fmt(c['mean'], 1)} [{fmt(c['lo'], 1)}, {fmt(c['hi'], 1)}]", str(c["splits"])]
            for s in run.settings if (c := run.ceilings.get(s))]
    return Table("Split-half noise ceilings", ["Setting", "k", "Ceiling mean [2.5, 97.5 pct]", "Splits"], rows,
                 "Overlap of the top-k heads of two random halves of the discovery items, over the splits.")


# ---- audit ---------------------------------------------------------------------------------


def audit_flags(run: RunData) -> list[dict]:
    """Audit rows whose mean P(key) lies outside the expected range (or stored as not ok)."""
    out = []
    for r in run.audit:
        inside = r["lo"] is None or r["hi"] is None or (r["lo"] <= r["mean_p_key"] <= r["hi"])
        if not inside or r["ok"] in (0, False):
            out.append(r)
    return out


def audit_table(run: RunData) -> Table | None:
    if not run.audit:
        return None
    flagged = {id(r) for r in audit_flags(run)}
    rows, flag_rows = [], set()
    for i, r in enumerate(run.audit):
        bad = id(r) in flagged
        mean = fmt(r["mean_p_key"])
        rows.append([r["name"], str(r["n"]), f"**{mean}**" if bad else mean, f"[{fmt(r['lo'], 2)}, {fmt(r['hi'], 2)}]",
                     "OUTSIDE expected range" if bad else "ok"])
        if bad:
            flag_rows.add(i)
    return Table("Baseline audit (seed Table 22)", ["Evaluation set", "n", "mean P(key)", "Expected", "Flag"], rows,
                 "No intervention. oracle: target cell named in the prompt (expect ≈ 1); floor: blank image "
                 "(expect 0.25); matched: the image shows the keyed class (high); mismatched: the keyed option "
                 "is wrong (low); leak: matched questions with the image blanked (chance).", flagged_rows=flag_rows)


# ---- metric robustness -----------------------------------------------------------------------

METRIC_NAMES = {"p4": "p4 (P over the four letters)", "logprob": "logprob (log P, full vocabulary)",
                "logit-diff": "logit-diff (key − mean of the other letters)"}


def metric_runs(run: RunData, tests: tuple[str, ...]) -> dict[str, RunData]:
    """``run`` under every metric the store holds for all its outcomes, ``tests`` only
    (``run`` itself for its own metric), in :data:`vheads.evaluation.METRICS` order."""
    import dataclasses

    from vheads.evaluation import METRICS
    from vheads.report._data import outcome_cells
    from vheads.store import Store

    out: dict[str, RunData] = {}
    store = Store(run.run_dir, readonly=True, model=run.model)
    try:
        for m in METRICS:
            if m == run.metric:
                out[m] = run
            elif m in run.other_metrics:  # read with the run (every test: the tables look tests up by id)
                cells, ksweep, arms, nonfinite = run.other_metrics[m]
                out[m] = dataclasses.replace(run, cells=cells, ksweep=ksweep, arms=arms, nonfinite=nonfinite, metric=m)
            elif m == "p4" or store.has_metric(m):
                cells, ksweep, arms, nonfinite = outcome_cells(store, m, run.heads_of, tests)
                out[m] = dataclasses.replace(run, cells=cells, ksweep=ksweep, arms=arms, nonfinite=nonfinite, metric=m)
    finally:
        store.close()
    return out


def metric_robustness_table(run: RunData) -> Table | None:
    """Table 3's CERS and NCS rows under each metric of an outcome (``p4``, ``logprob``,
    ``logit-diff``; the one the report leads with first): per setting and metric, S with its
    interval (as in Table 3) and the Holm-adjusted rank p against the first main control
    (layer-matched), and whether the conclusion (Holm-significant at 0.05 or not) is the same
    under every metric. A metric the store lacks (an older run) is left out and named."""
    ncs = "ncs-all" if any((s, "ncs-all") in run.cells for s in run.settings) else "ncs"
    tests = tuple(t for t in ("cers", ncs) if any((s, t) in run.cells for s in run.settings))
    if not tests:
        return None
    runs = metric_runs(run, tests)
    metrics = [run.metric] + [m for m in runs if m != run.metric]
    control = next((c for c in MAIN_CONTROLS if any(c in run.cells[k].controls for k in run.cells if k[1] in tests)), None)
    if control is None:
        return None
    per = {(m, t): {st.setting: st for st in significance(runs[m], t, controls=(control,))} for m in metrics for t in tests}
    columns, groups = ["Test", "Setting"], [("", 2)]
    for m in metrics:
        columns += ["S [95% CI]", f"p (Holm) vs {control}, verdict"]
        groups.append((METRIC_NAMES.get(m, m), 2))
    columns.append("conclusion")
    groups.append(("", 1))
    rows, changed = [], []
    for t in tests:
        for s in run.settings:
            sts = [per[(m, t)].get(s) for m in metrics]
            if any(st is None or control not in st.controls for st in sts):
                continue
            row = [TEST_NAMES.get(t, t), s]
            verdicts = []
            for st in sts:
                cs = st.controls[control]
                verdicts.append(cs.verdict)
                p = fmt_p(cs.p_verdict)
                row += [fmt_ci(st.interval, st.s), f"{f'**{p}**' if cs.verdict == 'yes' else p} {cs.verdict}"]
            if len(set(verdicts)) == 1:
                row.append(f"same: {verdicts[0]}")
            else:
                row.append("changes: " + "; ".join(f"{v} under {', '.join(m for m, x in zip(metrics, verdicts) if x == v)}"
                                                   for v in dict.fromkeys(verdicts)))
                if {"yes", "no"} <= set(verdicts):  # decided both ways: the metric changes the conclusion
                    changed.append(f"{s} ({t})")
            rows.append(row)
    if not rows:
        return None
    missing = [m for m in ("p4", "logprob", "logit-diff") if m not in runs]
    undecided = sum("cannot tell" in r[-1] for r in rows)
    verdict_line = (f"The conclusion changes (yes under one metric, no under another) for {len(changed)} of {len(rows)} rows: "
                    f"{', '.join(changed)}." if changed else
                    f"No row is decided yes under one metric and no under another ({len(rows)} rows).")
    if undecided:
        verdict_line += f" {undecided} row(s) cannot tell under at least one metric: their controls cannot reach {ALPHA} there."
    return Table("Metric robustness: Table 3's CERS and NCS under each metric", columns, rows,
                 f"{verdict_line} Each metric's S and interval as in Table 3 (NCS: Welch over its arms; CERS: t over items), "
                 f"drops and contrasts taken in that metric; p: one-sided rank p against the {control} draws, "
                 "Holm-adjusted over the grid settings (one family per test and metric; the causal setting, a reference "
                 "outside every family, unadjusted), and the verdict read from it as in Table 3 and the Findings: yes, no, or "
                 "cannot tell (its Holm floor is above 0.05); bold ≤ 0.05. p4 is P renormalised over the "
                 "four option letters (bounded, saturates near 0 and 1); logprob and logit-diff are close to linear "
                 "in the logits. The report's other tables use " + run.metric + "."
                 + (f" Not stored in this run: {', '.join(missing)}." if missing else ""), groups, text_cols=2)
