"""Causal evaluation: head-sets, random controls, the tests (CERS, NCS, …) and statistics."""

from vheads.evaluation._ablation import ABLATIONS, check_ablation, donors, reference_means
from vheads.evaluation._controls import (
    CONTROLS, MAX_R, Control, ControlDraws, control_pool_size, ControlRequest, Fallback, any_layer_controls, attention_matched_controls,
    draw_controls, get_control, layer_matched_controls, split_control_name, parse_control_spec, random_n_controls, sink_heads,
    text_heavy_heads, whole_layer_controls,
)
from vheads.evaluation._headsets import HeadSet, default_k
from vheads.evaluation._metrics import (
    METRICS, Outcomes, baseline_audit, cers, letter_metric, distractor_cell, head_attention_mass, ncs, ncs_grid, text_arm,
)
from vheads.evaluation._probe import Action, ProbeMemo, option_probs, prompt_digest
from vheads.evaluation._run import (
    AUDIT_SETS, TEST_SETS, TESTS, HeadsetResult, audit_sets, check_request, evaluate_headsets, item_sets, reference_sets, run_test,
)
from vheads.evaluation._stats import (
    MIN_BOOTSTRAP_N, ArmsDifference, BootstrapInterval, bca_diff_ci, Holm, Interval, PairedT, RankP, Spearman, ZScore, bootstrap_ci, bootstrap_diff_ci, welch_interval, holm, ncs_difference_t, paired_one_sided_p,
    paired_t, rank_p, spearman, t_interval, z_score,
)

__all__ = [
    "ABLATIONS", "check_ablation", "donors", "reference_means", "reference_sets",
    "AUDIT_SETS", "HeadsetResult", "TESTS", "TEST_SETS", "audit_sets", "check_request", "evaluate_headsets", "item_sets",
    "run_test",
    "Action", "ProbeMemo", "prompt_digest", "BootstrapInterval", "CONTROLS", "MAX_R", "Control", "ControlDraws", "ControlRequest", "Fallback", "control_pool_size", "HeadSet",
    "MIN_BOOTSTRAP_N", "ArmsDifference", "bca_diff_ci", "Holm", "Interval", "METRICS", "Outcomes", "letter_metric", "PairedT", "RankP", "Spearman", "ZScore", "any_layer_controls",
    "attention_matched_controls", "baseline_audit", "bootstrap_ci", "bootstrap_diff_ci", "welch_interval", "cers", "default_k", "distractor_cell",
    "draw_controls", "get_control", "head_attention_mass", "holm", "layer_matched_controls", "ncs", "ncs_difference_t", "ncs_grid", "option_probs",
    "paired_one_sided_p", "paired_t", "parse_control_spec", "random_n_controls", "rank_p", "sink_heads",
    "spearman", "split_control_name", "t_interval", "text_arm", "text_heavy_heads", "whole_layer_controls", "z_score",
]
