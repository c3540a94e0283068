"""Findings: the report's first section, every verdict of the run on one table, and whether
the seed's conclusion holds in it.

One row per setting (the grid's settings, the causal setting, the score points), one column
per test × ablation × metric the run stored: NCS under each ablation type (``attention``,
``zero``, …; :func:`vheads.report._ablation.ablation_tests`) and CERS, each under every
outcome metric (``p4``, ``logprob``, ``logit-diff``; :func:`vheads.report._tables.metric_runs`).
A cell is the verdict against the first control (layer-matched): significant where the
Holm-adjusted rank p is ≤ 0.05, computed by the same functions as the detailed tables so
the numbers agree —

- grid settings: :func:`vheads.report._tables.significance` (Holm over the grid's settings,
  per test and control: Table 3, the ablation and the metric robustness tables);
- score points: :func:`vheads.report._methods.methods_tests` (Holm over the score points:
  the published-methods table);
- the causal setting (a reference outside every Holm family): its unadjusted rank p.

The seed's conclusion, checked per column: *necessity separates the settings* (under NCS
some grid settings pass and others do not) and *steering does not* (under CERS no grid
setting's S steers better than its controls).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vheads.causal import CAUSAL_SETTING
from vheads.report._ablation import ablation_tests
from vheads.report._data import RunData, identical_headsets, identical_to
from vheads.report._doc import Table
from vheads.report._methods import methods_tests
from vheads.report._tables import ALPHA, MAIN_CONTROLS, holm_family, metric_runs, significance

HOW = (
    "Every verdict of this run on one table, generated from the stored numbers: a cell says whether the setting's "
    "discovered head-set S beats its layer-matched random head-sets (Holm-adjusted rank p ≤ 0.05) in that test, "
    "ablation and metric. The sentences below say whether the seed's conclusion — necessity separates the "
    "settings, steering does not — holds in this run, and where it does not. The detailed sections give the numbers."
)
TITLE = "Findings: verdict of every setting against its layer-matched controls"


@dataclass(frozen=True)
class Column:
    """One verdict column: a test id under an ablation, in a metric."""

    test: str  # the stored test id (``ncs-all``, ``ncs-all@ablation=zero``, ``cers``)
    kind: str  # "NCS" | "CERS"
    ablation: str  # "attention" for CERS (steering has no ablation)
    metric: str


@dataclass
class Verdict:
    """One cell: ``significant`` (None: not tested), the p it was read from, and whether
    that p is Holm-adjusted (False: the causal setting, outside every family)."""

    significant: bool | None
    p: float | None = None
    adjusted: bool = True


@dataclass
class Findings:
    control: str
    columns: list[Column]
    rows: list[str]  # settings in table order: grid (causal included), then score points
    verdicts: dict[tuple[str, Column], Verdict] = field(default_factory=dict)
    grid: list[str] = field(default_factory=list)  # the Holm family of the grid: the seed's conclusion is read on it
    holm_floor: dict[Column, float] = field(default_factory=dict)  # smallest adjustable p of the grid's family


def _ncs_tests(run: RunData) -> dict[str, str]:
    """{ablation: NCS test id}: every ablation the run stored, attention first."""
    got = ablation_tests(run)
    if got is not None:
        return got[1]
    ncs = "ncs-all" if any((s, "ncs-all") in run.cells for s in run.settings) else "ncs"
    return {"attention": ncs} if any((s, ncs) in run.cells for s in run.settings) else {}


def findings(run: RunData, alpha: float = ALPHA) -> Findings | None:
    """The verdict of every setting under every test × ablation × metric of the run (see the
    module docstring); ``None`` when the run has no NCS or CERS of a grid setting."""
    tests: list[tuple[str, str, str]] = [(t, "NCS", a) for a, t in _ncs_tests(run).items()]
    if any((s, "cers") in run.cells for s in run.settings):
        tests.append(("cers", "CERS", "attention"))
    if not tests:
        return None
    control = next((c for c in MAIN_CONTROLS if any(c in cell.controls for (s, t), cell in run.cells.items()
                                                    if t in {x for x, *_ in tests})), None)
    if control is None:
        return None
    runs = metric_runs(run, tuple(t for t, *_ in tests))
    metrics = [run.metric] + [m for m in runs if m != run.metric]
    columns = [Column(t, kind, a, m) for t, kind, a in tests for m in metrics]
    listed = holm_family(run)
    grid = [s for s in run.settings if listed is None or s in listed]
    rows = [*grid, *(s for s in run.settings if s not in grid), *run.score_settings]  # the family, the causal setting, the points
    out = Findings(control, columns, rows, grid=grid)
    for col in columns:
        r = runs[col.metric]
        for st in significance(r, col.test, alpha=alpha, controls=(control,)):
            cs = st.controls.get(control)
            if cs is None or cs.rank is None:
                continue
            if cs.p_holm is not None:
                out.verdicts[(st.setting, col)] = Verdict(cs.reject, cs.p_holm)
                if cs.holm_floor is not None:
                    out.holm_floor[col] = min(out.holm_floor.get(col, 1.0), cs.holm_floor)
            else:  # outside the Holm family (the causal setting): its own rank p
                out.verdicts[(st.setting, col)] = Verdict(cs.rank.p <= alpha, cs.rank.p, adjusted=False)
        if control == "layer-matched":  # the score points' family (the published-methods table)
            for s, st in methods_tests(r, col.test, alpha=alpha).items():
                cs = st.controls.get(control)
                if cs is not None and cs.p_holm is not None:
                    out.verdicts[(s, col)] = Verdict(cs.reject, cs.p_holm)
    out.rows = [s for s in out.rows if any((s, c) in out.verdicts for c in columns)]
    return out


def passing(f: Findings, col: Column) -> list[str]:
    """The grid settings (the Holm family) significant in ``col``."""
    return [s for s in f.grid if (v := f.verdicts.get((s, col))) is not None and v.significant]


def tested(f: Findings, col: Column) -> list[str]:
    return [s for s in f.grid if (s, col) in f.verdicts]


def _col_name(col: Column, f: Findings) -> str:
    abl = len({c.ablation for c in f.columns if c.kind == col.kind}) > 1
    return (f"{col.ablation} · " if abl else "") + col.metric


def conclusion_lines(f: Findings, alpha: float = ALPHA) -> list[str]:
    """One sentence per test: does the seed's conclusion hold in every column, and where not."""
    lines = []
    for kind in ("NCS", "CERS"):
        cols = [c for c in f.columns if c.kind == kind and tested(f, c)]
        if not cols:
            continue
        bad: dict[str, list[str]] = {}  # why -> the columns where the conclusion does not hold
        for c in cols:
            n_pass, n = len(passing(f, c)), len(tested(f, c))
            if (0 < n_pass < n) if kind == "NCS" else n_pass == 0:
                continue
            why = "none pass" if n_pass == 0 else "all pass" if n_pass == n else f"{n_pass} of {n} pass"
            if n_pass == 0 and f.holm_floor.get(c, 0.0) > alpha:
                why += f"; Holm cannot fall below {f.holm_floor[c]:.2f} with these controls"
            if kind == "CERS":
                why += ": " + ", ".join(passing(f, c))
            bad.setdefault(why, []).append(_col_name(c, f))
        claim = ("necessity separates the settings (some grid settings pass NCS, others do not)" if kind == "NCS"
                 else "steering does not single out the discovered heads (no grid setting passes CERS)")
        if not bad:
            lines.append(f"**{kind}**: the seed's conclusion — {claim} — holds in this run under every column "
                         f"({', '.join(_col_name(c, f) for c in cols)}).")
            continue
        n_bad = sum(len(v) for v in bad.values())
        lines.append(f"**{kind}**: the seed's conclusion — {claim} — holds under {len(cols) - n_bad} of {len(cols)} "
                     "columns; it does not under " + "; ".join(f"{', '.join(cs)} ({why})" for why, cs in bad.items()) + ".")
    return lines


def findings_table(run: RunData, f: Findings) -> Table:
    same = identical_to(run)
    groups: list[tuple[str, int]] = [("", 2)]
    columns = ["Setting", "Identical S"]
    for kind in ("NCS", "CERS"):
        for abl in dict.fromkeys(c.ablation for c in f.columns if c.kind == kind):
            cols = [c for c in f.columns if c.kind == kind and c.ablation == abl]
            groups.append((f"{kind}, {abl}" if kind == "NCS" else kind, len(cols)))
            columns += [c.metric for c in cols]
    ordered = [c for kind in ("NCS", "CERS") for abl in dict.fromkeys(c.ablation for c in f.columns if c.kind == kind)
               for c in f.columns if c.kind == kind and c.ablation == abl]
    rows = []
    for s in f.rows:
        row = [s, ", ".join(same.get(s, [])) or "–"]
        for c in ordered:
            v = f.verdicts.get((s, c))
            if v is None or v.significant is None:
                row.append("–")
            else:
                row.append(("**yes**" if v.significant else "no") + ("" if v.adjusted else "†"))
        rows.append(row)
    caption = (f"yes (bold): S's rank p against its {f.control} draws is ≤ {ALPHA} after Holm — over the grid's settings "
               "for a grid setting (as in Table 3 and the ablation and metric tables), over the score points for a score "
               "point (as in the published-methods table); no: it is not; –: not tested. NCS under each ablation type "
               "the run used, CERS (steering has no ablation), each in every outcome metric stored.")
    if CAUSAL_SETTING in f.rows:
        caption += f" †: {CAUSAL_SETTING} is a reference outside the Holm families: its unadjusted rank p ≤ {ALPHA}."
    if same:
        caption += " Identical S: the settings whose head-set holds exactly the same heads (one result, not two)."
    return Table(TITLE, columns, rows, caption, groups, text_cols=2)


def findings_blocks(run: RunData) -> list:
    """The section: the verdict table, the seed's conclusion per test, the identical head-sets,
    and links to the detailed sections."""
    f = findings(run)
    if f is None:
        return []
    blocks: list = [findings_table(run, f), *conclusion_lines(f)]
    groups = identical_headsets(run)
    if groups:
        blocks.append(f"**Identical head-sets** ({len(groups)} group(s)): " + "; ".join(" = ".join(g) for g in groups)
                      + ". Their verdicts repeat one measurement.")
    links = ["[Table 3 and the ablation and metric tables](#significance)"]
    if run.score_settings:
        links.append("[the published methods' tests](#methods)")
    links.append("[the reporting protocol](#protocol)")
    blocks.append("Details: " + ", ".join(links) + ".")
    return blocks
