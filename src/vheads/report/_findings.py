"""Findings: the report's first section. It answers the user's own question first — which
settings' heads are *necessary* (NCS), which *steerable* (CERS), under which ablation and
metric — then says whether the seed's conclusion holds in this run, and shows every verdict
on one table, S against every control (the random-band figure) and each setting's heads.

A verdict is one of three (:func:`vheads.evaluation.verdict`): *yes* (the Holm-adjusted rank
p against the layer-matched controls is ≤ 0.05), *no*, or *cannot tell with these controls*
(the smallest adjusted p that this setting's n and the family's other n's allow,
:func:`vheads.evaluation.holm_floors`, is above 0.05: no result could have read *yes*, so the
cell is no evidence either way and is never counted as *no*). The verdicts are computed by
the functions of the detailed tables, so the numbers agree —

- grid settings: :func:`vheads.report._tables.significance` (Holm over the grid's settings,
  one family per test × ablation × metric: Table 3, the ablation and the metric robustness tables);
- score points: :func:`vheads.report._methods.methods_tests` (Holm over the score points);
- the causal setting (a reference outside every family): its unadjusted rank p, floor 1/(n+1).

The columns (test × ablation × metric) are **not** one Holm family: the three metrics
re-read the same per-item outcomes in three scales (one measurement, not three chances to
pass), and necessity under an ablation and steerability are different questions. Instead the
question is answered in one column per test fixed before the run — the run's metric under the
attention ablation (the seed's) — and the other columns are read as robustness checks of it:
a *yes* only there is named as such, never a headline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vheads.causal import CAUSAL_SETTING
from vheads.report._ablation import ablation_tests
from vheads.report._data import RunData, identical_headsets, identical_to
from vheads.report._doc import Table
from vheads.report._headsets import headset_file_name, heads_text, ranked_heads
from vheads.report._methods import methods_tests
from vheads.report._tables import ALPHA, MAIN_CONTROLS, fmt, fmt_p, holm_family, limit_text, metric_runs, significance

HOW = (
    "The answer to the question the study asks, read from the stored numbers: which settings' discovered heads are "
    "necessary (hiding them from the image hurts more than hiding random heads of the same layers: NCS) and which "
    "are steerable (pointing them at an image cell moves the answer more than pointing random heads there: CERS). "
    "Each verdict is yes, no, or cannot tell — the controls S was compared with are too few for its Holm family to "
    "reach 0.05 whatever S does; such a cell is no evidence and is never counted as no. Then whether the seed's "
    "conclusion (necessity separates the settings, steering does not) holds in this run, every verdict on one table, "
    "S against every control, and each setting's heads."
)
#: the grounding test's measures the Findings read (stored test id -> column name): one
#: column each, in the run's metric only (a grounding outcome does not depend on the metric)
GROUNDING = {"grounding": "pointing", "grounding-iou": "IoU"}
TITLE = "Findings: verdict of every setting against its layer-matched controls"
HEADS_TITLE = "Findings: the heads of every setting"


@dataclass(frozen=True)
class Column:
    """One verdict column: a test id under an ablation, in a metric."""

    test: str  # the stored test id (``ncs-all``, ``ncs-all@ablation=zero``, ``cers``)
    kind: str  # "NCS" | "CERS" | "Grounding"
    ablation: str  # "attention" for CERS and grounding (they have no ablation)
    metric: str

    @property
    def label(self) -> str:
        """The column's header: its metric; for grounding its measure (metric-free)."""
        return GROUNDING.get(self.test, self.metric) if self.kind == "Grounding" else self.metric


@dataclass
class Verdict:
    """One cell: the verdict, the p it was read from (Holm-adjusted in a family, the rank p
    outside one), S's statistic, z, the family it was adjusted over, its floor and n, and —
    where it cannot tell — what would let it decide."""

    verdict: str | None  # "yes" | "no" | "cannot tell"; None: not tested
    p: float | None = None
    effect: float | None = None
    z: float | None = None
    family: str = ""
    floor: float | None = None
    n: int = 0
    limit: str = ""

    @property
    def significant(self) -> bool | None:
        return None if self.verdict is None else self.verdict == "yes"

    @property
    def adjusted(self) -> bool:
        return not self.family.startswith("none")


@dataclass
class Findings:
    control: str
    columns: list[Column]
    rows: list[str]  # settings in table order: grid (causal included), then score points
    verdicts: dict[tuple[str, Column], Verdict] = field(default_factory=dict)
    grid: list[str] = field(default_factory=list)  # the Holm family of the grid: the seed's conclusion is read on it
    main: dict[str, Column] = field(default_factory=dict)  # "NCS" / "CERS" -> the column the question is answered in


def _ncs_tests(run: RunData) -> dict[str, str]:
    """{ablation: NCS test id}: every ablation the run stored, attention first."""
    got = ablation_tests(run)
    if got is not None:
        return got[1]
    ncs = "ncs-all" if any((s, "ncs-all") in run.cells for s in run.settings) else "ncs"
    return {"attention": ncs} if any((s, ncs) in run.cells for s in run.settings) else {}


def _cell(run: RunData, st, cs) -> Verdict:
    v = Verdict(cs.verdict, cs.p_verdict, st.t_s, cs.z, cs.family or "", cs.holm_floor, cs.n)
    if v.verdict == "cannot tell":
        v.limit = limit_text(run, st.setting, cs)
    return v


def findings(run: RunData, alpha: float = ALPHA) -> Findings | None:
    """The verdict of every setting under every test × ablation × metric of the run (see the
    module docstring); ``None`` when the run has no NCS or CERS of a grid setting."""
    tests: list[tuple[str, str, str]] = [(t, "NCS", a) for a, t in _ncs_tests(run).items()]
    if any((s, "cers") in run.cells for s in run.settings):
        tests.append(("cers", "CERS", "attention"))
    ground = [t for t in GROUNDING if any((s, t) in run.cells for s in run.settings)]
    if not tests and not ground:
        return None
    control = next((c for c in MAIN_CONTROLS if any(c in cell.controls for (s, t), cell in run.cells.items()
                                                    if t in {x for x, *_ in tests} | set(ground))), None)
    if control is None:
        return None
    runs = metric_runs(run, tuple(t for t, *_ in tests)) if tests else {run.metric: run}
    metrics = [run.metric] + [m for m in runs if m != run.metric]
    columns = [Column(t, kind, a, m) for t, kind, a in tests for m in metrics]
    columns += [Column(t, "Grounding", "attention", run.metric) for t in ground]
    listed = holm_family(run)
    grid = [s for s in run.settings if listed is None or s in listed]
    rows = [*grid, *(s for s in run.settings if s not in grid), *run.score_settings]  # the family, the causal setting, the points
    out = Findings(control, columns, rows, grid=grid,
                   main={kind: next(c for c in columns if c.kind == kind and c.ablation == "attention" and c.metric == run.metric)
                         for kind in dict.fromkeys(c.kind for c in columns)})
    for col in columns:
        r = runs.get(col.metric, run)
        for st in significance(r, col.test, alpha=alpha, controls=(control,)):
            cs = st.controls.get(control)
            if cs is not None and cs.verdict is not None:
                out.verdicts[(st.setting, col)] = _cell(run, st, cs)
        if control == "layer-matched":  # the score points' family (the published-methods table)
            for s, st in methods_tests(r, col.test, alpha=alpha).items():
                cs = st.controls.get(control)
                if cs is not None and cs.verdict is not None:
                    out.verdicts[(s, col)] = _cell(run, st, cs)
    out.rows = [s for s in out.rows if any((s, c) in out.verdicts for c in columns)]
    return out


def passing(f: Findings, col: Column) -> list[str]:
    """The grid settings (the Holm family) whose verdict in ``col`` is yes."""
    return _with(f, col, "yes")


def _with(f: Findings, col: Column, verdict: str, settings: list[str] | None = None) -> list[str]:
    return [s for s in (f.grid if settings is None else settings)
            if (v := f.verdicts.get((s, col))) is not None and v.verdict == verdict]


def tested(f: Findings, col: Column) -> list[str]:
    return [s for s in f.grid if (s, col) in f.verdicts]


def decided(f: Findings, col: Column) -> list[str]:
    """The grid settings whose verdict in ``col`` could decide (yes or no)."""
    return [s for s in tested(f, col) if f.verdicts[(s, col)].verdict in ("yes", "no")]


def _col_name(col: Column, f: Findings) -> str:
    abl = len({c.ablation for c in f.columns if c.kind == col.kind}) > 1
    return (f"{col.ablation} · " if abl else "") + col.label


def _stat_name(col: Column) -> str:
    return col.label if col.kind == "Grounding" else col.kind


def _effect(f: Findings, s: str, col: Column) -> str:
    v = f.verdicts[(s, col)]
    return f"{s} ({_stat_name(col)} {fmt(v.effect)}, z {fmt(v.z, 1)})"


def _limits(f: Findings, col: Column, settings: list[str]) -> str:
    """What would let the *cannot tell* cells of ``settings`` decide, one clause per reason."""
    by: dict[str, list[str]] = {}
    for s in settings:
        by.setdefault(f.verdicts[(s, col)].limit, []).append(s)
    return "; ".join(f"{', '.join(ss)}: {why}" for why, ss in by.items())


QUESTION = {"NCS": ("Necessary", "S hidden from the image"), "CERS": ("Steerable", "S steered onto an image cell"),
            "Grounding": ("Grounds", "S's attention map against the referred cell's box: pointing accuracy")}


def _answer(f: Findings, col: Column, settings: list[str]) -> str:
    """yes — each with its effect and z; no — the settings; cannot tell — the settings and why."""
    yes, no, cannot = (_with(f, col, v, settings) for v in ("yes", "no", "cannot tell"))
    parts = [("**yes** for " + ", ".join(_effect(f, s, col) for s in yes)) if yes else "**yes** for none"]
    if no:
        parts.append(f"no for {len(no)} ({', '.join(no)})")
    if cannot:
        parts.append(f"cannot tell with these controls for {len(cannot)} — {_limits(f, col, cannot)}")
    return "; ".join(parts)


def question_lines(run: RunData, f: Findings) -> list[str]:
    """The user's question answered in the main column of each test (the run's metric, the
    attention ablation): the grid settings, then the score points and the causal setting;
    then how the other ablations and metrics read the grid."""
    lines = []
    fam = next((v.family for (s, c), v in f.verdicts.items() if s in f.grid and v.adjusted), "")
    for kind, col in f.main.items():
        word, what = QUESTION[kind]
        grid = lambda c: [s for s in f.grid if (s, c) in f.verdicts]  # noqa: E731
        if kind == "Grounding":  # metric-free; its other measure (IoU) answered in the same line
            rest = [c for c in f.columns if c.kind == kind and c != col and grid(c)]
            lines.append(f"**{word}?** Grounding ({what}; each S against its {f.control} controls, Holm over "
                         f"the {fam or 'grid settings'} per measure): {_answer(f, col, grid(col))}"
                         + "".join(f". {c.label}: {_answer(f, c, grid(c))}" for c in rest) + ".")
            continue
        lines.append(f"**{word}?** {kind} ({what}; {col.metric}; each S against its {f.control} controls, Holm over "
                     f"the {fam or 'grid settings'}): {_answer(f, col, grid(col))}.")
    points = [s for s in run.score_settings if s in f.rows]
    if points:
        pf = next((f.verdicts[(s, c)].family for s in points for c in f.main.values() if (s, c) in f.verdicts), "")
        lines.append(f"**Score points** (published methods; Holm over the {pf}, their own family): "
                     + " ".join(f"{QUESTION[kind][0]}: {_answer(f, col, [s for s in points if (s, col) in f.verdicts])}."
                                for kind, col in f.main.items())
                     + "".join(f" Grounds ({c.label}): {_answer(f, c, [s for s in points if (s, c) in f.verdicts])}."
                               for c in f.columns if c.kind == "Grounding" and c != f.main.get("Grounding")
                               and any((s, c) in f.verdicts for s in points)))
    if CAUSAL_SETTING in f.rows:
        lines.append(f"**{CAUSAL_SETTING}** (the exact causal map's top-k, a reference outside every family: its "
                     "unadjusted rank p): " + " ".join(
                         f"{QUESTION[kind][0]}: {f.verdicts[(CAUSAL_SETTING, col)].verdict} "
                         f"({_stat_name(col)} {fmt(f.verdicts[(CAUSAL_SETTING, col)].effect)}, z {fmt(f.verdicts[(CAUSAL_SETTING, col)].z, 1)}, "
                         f"p {fmt_p(f.verdicts[(CAUSAL_SETTING, col)].p)})."
                         for kind, col in f.main.items() if (CAUSAL_SETTING, col) in f.verdicts))
    other = []
    for kind, main in f.main.items():
        if kind == "Grounding":  # no other ablation or metric: its measures are answered above
            continue
        base = set(passing(f, main))
        same, differ = [], []
        for c in f.columns:
            if c.kind != kind or c == main or not tested(f, c):
                continue
            yes, cannot = set(passing(f, c)), _with(f, c, "cannot tell")
            if yes == base and not cannot:
                same.append(_col_name(c, f))
            else:
                differ.append(f"{_col_name(c, f)}: yes for {', '.join(s for s in f.grid if s in yes) or 'none'}"
                              + (f", cannot tell for {len(cannot)}" if cannot else ""))
        if same or differ:
            other.append(f"{kind} — " + "; ".join(([f"the same yes's under {', '.join(same)}"] if same else []) + differ))
    if other:
        lines.append("**Under the other ablations and metrics** (robustness checks of the lines above, each its own "
                     "Holm family over the grid settings): " + ". ".join(other) + ".")
    return lines


def conclusion_lines(f: Findings, alpha: float = ALPHA) -> list[str]:
    """One sentence per test: does the seed's conclusion hold, counted over the columns whose
    cells could decide (a *cannot tell* cell counts for nothing), where it does not, and how
    many cells could not decide and what would let them."""
    lines = []
    for kind in ("NCS", "CERS"):
        cols = [c for c in f.columns if c.kind == kind and tested(f, c)]
        if not cols:
            continue
        bad: dict[str, list[str]] = {}  # why -> the columns where the conclusion does not hold
        holds, mute, n_cannot, limits = [], [], 0, {}
        for c in cols:
            dec = decided(f, c)
            cannot = _with(f, c, "cannot tell")
            n_cannot += len(cannot)
            for s in cannot:
                limits.setdefault(f.verdicts[(s, c)].limit, set()).add(s)
            if not dec:
                mute.append(_col_name(c, f))
                continue
            n_pass = len(passing(f, c))
            ok = (0 < n_pass < len(dec)) if kind == "NCS" else n_pass == 0
            if ok:
                holds.append(c)
                continue
            why = ("none of" if n_pass == 0 else "all" if n_pass == len(dec) else f"{n_pass} of") + f" {len(dec)} deciding pass"
            if kind == "CERS":
                why += ": " + ", ".join(passing(f, c))
            bad.setdefault(why, []).append(_col_name(c, f))
        claim = ("necessity separates the settings (some grid settings pass NCS, others do not)" if kind == "NCS"
                 else "steering does not single out the discovered heads (no grid setting passes CERS)")
        n_dec = len(cols) - len(mute)
        text = f"**{kind}**: the seed's conclusion — {claim} — "
        if not n_dec:
            text += "cannot be read in this run: no cell of any column could decide"
        elif not bad:
            text += f"holds under every column that could decide ({n_dec} of {len(cols)})"
        else:
            text += (f"holds under {len(holds)} of the {n_dec} columns that could decide; it does not under "
                     + "; ".join(f"{', '.join(cs)} ({why})" for why, cs in bad.items()))
        if mute:
            text += f"; {len(mute)} column(s) could not decide at all ({', '.join(mute)})"
        if n_cannot:
            text += (f". {n_cannot} of {sum(len(tested(f, c)) for c in cols)} cells cannot tell and are not counted — "
                     + "; ".join(f"{', '.join(s for s in f.grid if s in ss)}: {why}" for why, ss in limits.items()))
        lines.append(text + ".")
    return lines


def _verdict_cell(v: Verdict | None) -> str:
    if v is None or v.verdict is None:
        return "–"
    word = "**yes**" if v.verdict == "yes" else v.verdict
    return f"{word} ({fmt(v.effect)}, z {fmt(v.z, 1)})"


def _family_of(f: Findings, s: str) -> str:
    fams = {v.family for (x, _), v in f.verdicts.items() if x == s}
    if s in f.grid:
        return f"grid ({next(iter(fams))} per column)" if len(fams) == 1 else "grid"
    if s == CAUSAL_SETTING:
        return "none: a reference, unadjusted"
    return f"score points ({next(iter(fams))} per column)" if len(fams) == 1 else "score points"


def findings_table(run: RunData, f: Findings) -> Table:
    same = identical_to(run)
    groups: list[tuple[str, int]] = [("", 3)]
    columns = ["Setting", "Holm family", "Identical S"]
    for kind in ("NCS", "CERS", "Grounding"):
        for abl in dict.fromkeys(c.ablation for c in f.columns if c.kind == kind):
            cols = [c for c in f.columns if c.kind == kind and c.ablation == abl]
            groups.append((f"{kind}, {abl}" if kind == "NCS" else kind, len(cols)))
            columns += [c.label for c in cols]
    ordered = [c for kind in ("NCS", "CERS", "Grounding") for abl in dict.fromkeys(c.ablation for c in f.columns if c.kind == kind)
               for c in f.columns if c.kind == kind and c.ablation == abl]
    rows = [[s, _family_of(f, s), ", ".join(same.get(s, [])) or "–", *(_verdict_cell(f.verdicts.get((s, c))) for c in ordered)]
            for s in f.rows]
    caption = (f"Each cell: the verdict against the {f.control} draws, then S's statistic (mean over items) and z. yes (bold): "
               f"the Holm-adjusted rank p ≤ {ALPHA}; no: it is not; cannot tell (with these controls): this setting's Holm "
               f"floor — the smallest adjusted p its n and its family's other n's allow — is above {ALPHA}, so no result "
               "could have read yes (never counted as no). Holm family: per column (test × ablation × metric), the grid's "
               "settings for a grid setting (Table 3, the ablation and metric tables), the score points for a score point "
               "(the published-methods table); the same p can read differently in two families. The columns are not one "
               "family: the metrics re-read the same outcomes (one measurement in three scales, not three chances to pass) "
               "and necessity and steerability are different questions; the question is answered in the run's metric "
               "under the attention ablation (the first column of each test), the other columns check it. –: not tested.")
    if any(c.kind == "Grounding" for c in f.columns):
        caption += (" Grounding: pointing accuracy (the share of items whose S map peaks in the referred cell) and the "
                    "mean IoU of the box rule's box, each its own Holm family over the grid settings; a grounding outcome "
                    "does not depend on the letter metric, so each has one column.")
    if CAUSAL_SETTING in f.rows:
        caption += f" {CAUSAL_SETTING} is a reference outside the Holm families: its unadjusted rank p, floor 1/(n+1)."
    if same:
        caption += " Identical S: the settings whose head-set holds exactly the same heads (one result, not two)."
    return Table(TITLE, columns, rows, caption, groups, text_cols=3, wrap=True)


def heads_table(run: RunData) -> Table | None:
    """Each setting's heads as text, by discovery score, and the head-set file the report
    wrote for it (:mod:`vheads.report._headsets`)."""
    rows = []
    for s in [*run.settings, *run.score_settings]:
        heads = ranked_heads(run, s)
        if not heads:
            continue
        name = headset_file_name(run, s)
        rows.append([s, str(len(heads)), heads_text(heads), f"headsets/{name}" if name else "–"])
    if not rows:
        return None
    return Table(HEADS_TITLE, ["Setting", "|S|", "Heads (L<layer>H<head>, by discovery score)", "Head-set file"], rows,
                 "The heads of each setting's S (language-model layer and query head, 0-based), highest discovery score "
                 "first (the causal setting: by layer and head). The report writes each discovered setting's "
                 "head-set as a vheads.headset/1 file into the run folder (the column's path), for vheads evaluate "
                 "--headset; the causal setting is not a discovery setting and gets none.", text_cols=4)


def findings_blocks(run: RunData) -> list:
    """The section: the answer to the user's question, the seed's conclusion per test, the
    verdict table, S against every control, the heads of every setting, the identical
    head-sets, and links to the detailed sections."""
    from vheads.report import _figures as F
    from vheads.report._registry import figure

    f = findings(run)
    if f is None:
        return []
    blocks: list = [*question_lines(run, f), "**Does the seed's conclusion hold here?**", *conclusion_lines(f),
                    findings_table(run, f)]
    tests = list(dict.fromkeys(["cers", *(c.test for c in f.columns if c.kind == "NCS" and c.ablation == "attention"),
                                *(c.test for c in f.columns if c.test == "grounding")]))
    blocks.append(figure("random_band", F.random_band_figure(run, tests),
                         "Figure 3 layout: each discovered head-set S (red diamond) against its random head-sets (dots: one "
                         "per draw; bar: mean ± SD; tick: mean), one panel per test, in the run's "
                         "metric. A diamond inside the band is not specific to the discovered heads; a diamond beyond every "
                         "dot with few dots can still read cannot tell (the controls are too few for Holm)."))
    blocks.append(heads_table(run))
    groups = identical_headsets(run)
    if groups:
        blocks.append(f"**Identical head-sets** ({len(groups)} group(s)): " + "; ".join(" = ".join(g) for g in groups)
                      + ". Their verdicts repeat one measurement; where they sit in different Holm families (grid, score "
                        "points) the same p is adjusted over a different m and can read differently.")
    links = ["[Table 3 and the ablation and metric tables](#significance)"]
    if run.score_settings:
        links.append("[the published methods' tests](#methods)")
    links.append("[the reporting protocol](#protocol)")
    blocks.append("Details: " + ", ".join(links) + ".")
    return blocks
