"""``build_report(run_dir)``: the study's report from its results store.

Writes into ``run_dir`` (or ``out_dir``):

- ``report.md`` — Markdown, figures linked from ``figures/``;
- ``report.html`` — one self-contained page (inline CSS, figures as ``data:`` PNG URIs,
  no external reference), the file to open or send;
- ``figures/*.png`` — every figure.

Sections whose data the run lacks (no sweeps, no audit, …) are left out, not shown empty.
The reporting protocol's warnings are repeated at the top of both files.
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

from vheads._errors import make_output_folder, path_inside
from vheads._io import atomic_write
from vheads.causal import CAUSAL_SETTING
from vheads.report import _figures as F
from vheads.report import _overlaps as O
from vheads.report import _tables as T
from vheads.report._ablation import ablation_table
from vheads.report._data import RunData, load_run
from vheads.report._doc import Figure, Section, render_html, render_markdown
from vheads.report._protocol import protocol_checks

REPORT_FIGURES = {"random_band", "score_maps", "overlap", "overlap_curves", "random_overlap", "beta_sweep", "k_sweep",
                  "crossmodel_band", "crossmodel_overlap", "stability", "methods_overlap",
                  "causal_map", "causal_vs_scores", "score_vs_effect"}  # plus strips_<setting>

HOW = {
    "protocol": (
        "Every visual-head result depends on choices that move the head-set (query type, attention source, corpus, "
        "k) and on how it was tested (controls, R, the family corrected for, β, row groups, the audit). Each line "
        "states what this run used; ⚠ marks where it falls short, with what to change. In particular, with R "
        "controls the rank p cannot go below 1/(R+1), and Holm over m settings cannot go below m/(R+1)."
    ),
    "significance": (
        "One row per discovery setting (corpus-query-source, e.g. cm-ref-qsp). S is the discovered head-set's "
        "statistic (mean over items) with a 95% t-interval over items (for NCS, a difference of two independent arm "
        "means, Welch's interval; the arms table adds a bootstrap resampling both arms). Each control type shows the mean ± SD of its "
        "R random head-sets (over the distinct ones, with their number), z = (T_S − mean)/SD, the one-sided rank p = (1 + #{controls ≥ S})/(R+1) and, in "
        "parentheses, the Holm-adjusted p over the settings (one family per test and control type); bold: ≤ 0.05. "
        "* on S: significant against the first control shown. A large z with an unadjusted p at its floor says S "
        "beats every control drawn; only the Holm-adjusted p says so for the whole family. The figure shows each S "
        "(red diamond) against its controls' draws: a diamond inside the band is not specific to the discovered heads."
    ),
    "discovery": (
        "The layer × head maps show each setting's discovery score (mean region mass from the source rows to the "
        "target panel); ringed heads form S. The strip figures show what the top heads look at: for a few strips, "
        "each head's attention mass from the source rows on each of the six panels (red bar: the panel it attends "
        "to most). A visual head should put its mass on the panel the question names."
    ),
    "overlap": (
        "Cell (i, j) counts the heads the top-k sets of two settings share; the diagonal shows each setting's "
        "split-half noise ceiling (the overlap two halves of its own items reach). Read an overlap against the "
        "ceilings: the fraction = overlap / sqrt(ceiling_A · ceiling_B) is near 1 when two settings find the same "
        "heads up to sampling noise, and well below 1 when the choice that differs (corpus, query type, attention "
        "source) changes which heads are found."
    ),
    "rowgroups": (
        "NCS masks S from all image tokens; here the mask acts only at one group of query rows (all rows, image "
        "rows, question/option rows, last row). Where the NCS sits tells at which positions the heads read the "
        "image. The arms table splits NCS into the matched drop (the image shows the keyed class) and the "
        "mismatched drop (it does not): a real visual effect lives in the matched drop."
    ),
    "damage": (
        "A head-set can hurt because it is important, not because it is visual. The discovered S is set against "
        "head-sets chosen to be generically damaging or deliberately non-visual (sinks, text-heavy heads, whole "
        "layers, larger random sets) and against the text arm (S hidden from text tokens on text-solvable items). "
        "A visual S has a high NCS with a small text-arm drop; generic damage shows as a high text-arm drop and an "
        "NCS near zero."
    ),
    "sweeps": (
        "CERS (or NCS) against the steering strength β and the head-set size k, for S (red) and its controls (line: "
        "mean over draws; band: min to max). An effect that only exists at one β or one k, or that the random "
        "band reaches elsewhere, is not a property of the discovered heads."
    ),
    "audit": (
        "Each evaluation set's baseline, without intervention. If the oracle is not near 1 the model cannot use the "
        "cue the test relies on; if the floor or the leak set is not near chance the answer can be read without "
        "the image; if the mismatched arm is not low, NCS mixes its arms. A flagged row makes the tests that use "
        "that set hard to interpret."
    ),
}


def _fig(blocks: list, name: str, png: bytes | None, caption: str, wide: bool = True,
         max_width: int | None = None) -> None:
    if png:
        blocks.append(Figure(name, png, caption, wide, max_width))


def build_sections(run: RunData) -> tuple[list[Section], list[str]]:
    """The report's sections (empty ones dropped) and the protocol's warnings."""
    checks = protocol_checks(run)
    warnings = [f"{c.item}: {c.warning}" for c in checks if c.warning]
    sections = [Section("protocol", "Reporting protocol", HOW["protocol"], [checks])]

    ncs = "ncs-all" if any((s, "ncs-all") in run.cells for s in run.settings) else "ncs"
    main_tests = ["cers", ncs]
    b: list = []
    for t in main_tests:
        t3 = T.significance_table(
            run, [t], f"Table 3 layout: {T.TEST_NAMES.get(t, t)} of every setting",
            "S: discovered head-set, 95% t-interval over items (NCS: Welch interval over its matched and mismatched arms). Controls: "
            "mean ± SD over the distinct head-sets among the R draws [their number: a small pool repeats head-sets, and a "
            "copy is the same outcome again]; z in control SDs, over the distinct head-sets; "
            "p: one-sided rank p over every draw (floor 1/(R+1)), Holm-adjusted p in parentheses (family: the settings, per test "
            "and control type; bold ≤ 0.05). *: Holm-significant against the first control type shown."
            + (f" {CAUSAL_SETTING}: the top-k heads of the exact causal map (each head alone, on a discovery split), "
               "tested the same way: a reference, outside the Holm family." if CAUSAL_SETTING in run.settings else ""))
        if t3:
            b.append(t3)
    _fig(b, "random_band", F.random_band_figure(run, main_tests),
         "Figure 3 layout: each discovered head-set S (red diamond) against its random head-sets (dots: one per "
         "draw; bar: mean ± SD; tick: mean), one panel per test.")
    t9 = T.matched_controls_table(run)
    if t9:
        b.append(t9)
    robust = T.metric_robustness_table(run)
    if robust:
        b.append(robust)
    ablations = ablation_table(run)
    if ablations:
        b.append(ablations)
    for t in ("ncs-grid", "cers-sym"):
        further = T.significance_table(run, [t], f"{T.TEST_NAMES[t]} (seed Table 16 layout)",
                                       "As Table 3, on the 2×2 grid." + (T.max_ncs_grid_note(run) if t == "ncs-grid" else ""))
        if further:
            b.append(further)
    if b:
        sections.append(Section("significance", "Causal tests against random controls (Table 3)",
                                HOW["significance"], b))

    b = []
    _fig(b, "score_maps", F.score_map_figure(run), "Layer × head discovery scores per setting (shared colour scale); "
         "green rings: the heads of S.")
    for s in run.settings:
        _fig(b, "strips_" + re.sub(r"[^A-Za-z0-9._-]", "_", s), F.strip_figure(run, s), f"{s}: attention mass of its top heads (by discovery score) "
             "from the source rows on each panel of a few strips.", wide=False)
    if b:
        sections.append(Section("discovery", "What the discovered heads look at", HOW["discovery"], b))

    b = []
    om = T.overlap_matrix(run)
    if om:
        labels, matrix, k = om
        _fig(b, "overlap", F.overlap_figure(run, labels, matrix, k),
             "Figure 2 layout: top-k overlap between all settings (diagonal: split-half noise ceiling where stored).",
             max_width=820)
    for t in (T.overlap_table(run), T.ceilings_table(run)):
        if t:
            b.append(t)
    _fig(b, "overlap_curves", O.overlap_curve_figure(run), "Figure 6 layout: shared heads / k between settings that "
         "differ only in corpus, over k (dotted: the study's k).", wide=False)
    _fig(b, "random_overlap", O.random_overlap_figure(run), "Figure 7 layout: top-k overlap of the native head-sets "
         "with each other (blue) and with uniform random draws of k heads (grey: mean, bar: min–max over draws).",
         wide=False)
    b += [t for t in (O.random_overlap_table(run), O.crossover_table(run)) if t]
    if b:
        sections.append(Section("overlap", "Overlap between settings and noise ceilings", HOW["overlap"], b))

    from vheads.report._stability import HOW as HOW_STAB
    from vheads.report._stability import stability_blocks

    b = stability_blocks(run.run_dir, run.model)
    if b:
        sections.append(Section("stability", "How many discovery items a head-set needs", HOW_STAB, b))
    from vheads.report._methods import HOW as HOW_METHODS
    from vheads.report._methods import methods_blocks

    b = methods_blocks(run)
    if b:
        sections.append(Section("methods", "Published methods vs the seed's settings", HOW_METHODS, b))

    b = [t for t in (T.row_group_table(run), T.arms_table(run)) if t]
    if b:
        sections.append(Section("rowgroups", "Necessity per row group and per arm", HOW["rowgroups"], b))

    gd = T.generic_damage_table(run)
    if gd:
        sections.append(Section("damage", "Generic-damage controls", HOW["damage"], [gd]))

    b = []
    _fig(b, "beta_sweep", F.sweep_figure(run, "beta"), "Statistic against steering strength β (log scale).")
    _fig(b, "k_sweep", F.sweep_figure(run, "k"), "Statistic against head-set size k.")
    b += [t for t in (T.sweep_table(run, "beta"), T.sweep_table(run, "k")) if t]
    if b:
        sections.append(Section("sweeps", "β and k sweeps", HOW["sweeps"], b))

    from vheads.report._causal import HOW as HOW_CAUSAL
    from vheads.report._causal import causal_blocks

    b = causal_blocks(run)
    if b:
        sections.append(Section("causal", "Attention scores against the exact causal map", HOW_CAUSAL, b))

    from vheads.report._extras import HOW as HOW_CMP
    from vheads.report._extras import comparison_tables

    b = comparison_tables(run.run_dir, run.settings, run.model, run.metric)
    if b:
        sections.append(Section("comparisons", "Comparing head-sets and settings", HOW_CMP, b))

    at = T.audit_table(run)
    if at:
        sections.append(Section("audit", "Baseline audit", HOW["audit"], [at]))

    from vheads.report._ood import HOW as HOW_OOD
    from vheads.report._ood import ood_blocks

    b = ood_blocks(run.run_dir, run.model, run.metric)
    if b:
        sections.append(Section("ood", "Out-of-domain pointing suite", HOW_OOD, b))
    return sections, warnings


def build_report(run_dir: str | Path, out_dir: str | Path | None = None, model: str = "", metric: str | None = None) -> Path:
    """Build ``report.md``, ``report.html`` and ``figures/*.png`` from ``run_dir``'s results
    store (the rows of ``model``, a multi-model run's model name), its tables led by
    ``metric`` (``p4``, ``logprob``, ``logit-diff``; default: the config's); returns the path of
    ``report.html``. Rebuilding replaces the previous report. A multi-model run's report is
    the cross-model one (:func:`vheads.report._crossmodel.build_multi_model_report`), with
    each model's own report under ``models/<name>/``."""
    from vheads.report._crossmodel import build_multi_model_report, is_multi_model

    if not model and is_multi_model(run_dir):
        return build_multi_model_report(run_dir, out_dir, metric)
    run = load_run(run_dir, model, metric)
    out = make_output_folder(Path(out_dir) if out_dir is not None else Path(run_dir), "pass --out to a writable folder for the report")
    sections, warnings = build_sections(run)

    L, H = run.shape
    title = f"vheads report — {run.model_id}"
    subtitle = (f"Run {Path(run_dir).resolve()}" + (f" · model {model}" if model else "") + f" · {len(run.settings)} settings"
                + (f" · {L} layers × {H} heads" if L and H else "")
                + f" · built {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}")
    return write_report(out, title, subtitle, warnings, sections)


def write_report(out: Path, title: str, subtitle: str, warnings: list[str], sections: list[Section]) -> Path:
    """Write ``report.md``, ``report.html`` and the figures of ``sections`` into ``out``
    (replacing a previous report's); returns the path of ``report.html``."""
    figdir = out / "figures"
    figdir.mkdir(exist_ok=True)
    for old in figdir.glob("*.png"):  # a previous report's figures (other files are left alone)
        if old.stem in REPORT_FIGURES or old.stem.startswith("strips_"):
            old.unlink()
    for old in [*figdir.glob(".*.tmp"), *out.glob(".report.*.tmp")]:  # left by a report killed mid-write
        old.unlink()
    # every file is written to a temp file and renamed: a full disk or a kill leaves the
    # previous file or none, never a truncated one
    for s in sections:
        for blk in s.blocks:
            if isinstance(blk, Figure):
                atomic_write(path_inside(figdir, f"{blk.name}.png"), lambda fh, png=blk.png: fh.write(png), mode="wb")
    md = render_markdown(title, subtitle, warnings, sections)
    atomic_write(out / "report.md", lambda fh: fh.write(md.encode("utf-8")), mode="wb")
    html_path = out / "report.html"
    html = render_html(title, subtitle, warnings, sections)
    atomic_write(html_path, lambda fh: fh.write(html.encode("utf-8")), mode="wb")
    return html_path
