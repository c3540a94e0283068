"""S against its controls, as every table and the Findings read it, with ``vheads.evaluation``'s
statistics (nothing re-implemented here): per setting × test, ``T_S`` with its 95% interval
(Welch over NCS's two arms, else t over items), and per control type the controls' mean ± SD
over the distinct head-sets, z, the rank p ``(1 + #{T_r ≥ T_S}) / (n + 1)`` (sequential where
the run stopped early), the Holm-adjusted p over the family of settings (one family per test
and control type) and the verdict: yes, no, or cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vheads.causal import CAUSAL_SETTING
from vheads.evaluation import (
    Interval, RankP, holm, holm_floors, member_required_n, rank_p, required_n, t_interval, verdict, welch_interval, z_score,
)
from vheads.report._data import Cell, RunData, cfg_get, control_pools
from vheads.report._format import fmt


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
