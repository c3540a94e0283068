"""Causal tests against random controls: the seed's Table 3 (CERS and NCS of every setting
against its controls; the Findings show them as Figure 3), Table 9, the metric robustness and ablation tables, and
Table 16 (NCS_grid, symmetric CERS)."""

from __future__ import annotations

from vheads.causal import CAUSAL_SETTING
from vheads.report import _tables as T
from vheads.report._ablation import ablation_table
from vheads.report._data import RunData, headline_beta
from vheads.report._protocol import headline_text
from vheads.report._registry import section

HOW = (
    "One row per discovery setting (corpus-query-source, e.g. cm-ref-qsp). S is the discovered head-set's "
    "statistic (mean over items) with a 95% t-interval over items (for NCS, a difference of two independent arm "
    "means, Welch's interval; the arms table adds a bootstrap resampling both arms). Each control type shows the mean ± SD of its "
    "n distinct random head-sets S is compared with (their number in brackets), z = (T_S − mean)/SD, the one-sided rank p = (1 + #{controls ≥ S})/(n+1) and, in "
    "parentheses, the Holm-adjusted p over the settings (one family per test and control type); bold: ≤ 0.05. "
    "* on S: a yes against the first control shown. A large z with an unadjusted p at its floor says S "
    "beats every control drawn; only the Holm-adjusted p says so for the whole family. The verdict beside it is yes, no, "
    "or cannot tell: with too few controls for the family even S above all of them cannot reach 0.05 (the Findings "
    "show S against every control, the random-band figure)."
)


#: the grounding test's measures in Table 3 (stored test ids; vheads.study._grounding)
GROUNDING_TESTS = ["grounding", "grounding-iou"]


def main_tests(run: RunData) -> list[str]:
    """Table 3's tests: CERS and NCS at all rows (``ncs`` in a run from before the row groups)."""
    return ["cers", "ncs-all" if any((s, "ncs-all") in run.cells for s in run.settings) else "ncs"]


@section("significance", "Causal tests against random controls (Table 3)", HOW, order=20,
         needs=("outcomes", "arms", "headsets", "meta"),
         tables=("Table 3 layout: *", "Rank p against layer-matched (A)*", "Metric robustness*", "Ablation × setting*",
                 "* (seed Table 16 layout)"))
def significance(run: RunData) -> list:
    tests = main_tests(run)
    blocks: list = []
    for t in tests:
        at = f" at the headline β = {headline_beta(run)[0]:g}" if t == "cers" and headline_beta(run)[0] is not None else ""
        blocks.append(T.significance_table(
            run, [t], f"Table 3 layout: {T.TEST_NAMES.get(t, t)} of every setting{at}",
            "S: discovered head-set, 95% t-interval over items (NCS: Welch interval over its matched and mismatched arms). Controls: "
            "mean ± SD over the n distinct head-sets S is compared with [n: the whole pool when it holds at most 2R, "
            "else R drawn without repeats]; z in control SDs; "
            "p: one-sided rank p over the same n (floor 1/(n+1); the exact permutation p when the pool is compared whole), "
            "Holm-adjusted p in parentheses (family: the settings, per test "
            "and control type; bold ≤ 0.05). *: verdict yes against the first control type shown."
            + (f" β: {headline_text(run)}." if t == "cers" else "")
            + (f" {CAUSAL_SETTING}: the top-k heads of the exact causal map (each head alone, on a discovery split), "
               "tested the same way: a reference, outside the Holm family." if CAUSAL_SETTING in run.settings else "")))
    blocks.append(T.significance_table(
        run, GROUNDING_TESTS, "Table 3 layout: grounding (pointing accuracy and IoU) of every setting",
        "S: the share of grid-oracle items whose aggregated attention map peaks inside the referred cell (pointing) and "
        "the mean IoU of the box rule's box with the cell's box, each with a 95% t-interval over items; S and every "
        "control read from one capture per item. Controls, z, p and verdict as in the tables above (family: the "
        "settings, per measure and control type). The maps, the box rule and Acc@0.5: the grounding section."))
    blocks += [T.matched_controls_table(run), T.metric_robustness_table(run), ablation_table(run)]
    for t in ("ncs-grid", "cers-sym"):
        blocks.append(T.significance_table(run, [t], f"{T.TEST_NAMES[t]} (seed Table 16 layout)",
                                           "As Table 3, on the 2×2 grid." + (T.max_ncs_grid_note(run) if t == "ncs-grid" else "")))
    return blocks
