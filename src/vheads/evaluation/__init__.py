"""Causal evaluation: head-sets, random controls, the tests (CERS, NCS, …) and statistics.

The names load lazily (:func:`vheads._lazy.lazy_exports` reads them from the block below):
the request's names and check (:mod:`vheads.evaluation._request`), the controls and the
head-sets import no torch, so a bad flag or config key is refused at once.
"""

from typing import TYPE_CHECKING

from vheads._lazy import lazy_exports

if TYPE_CHECKING:  # the public names; each loads on first use
    from vheads.evaluation._controls import (
        COMMON_DRAWS, CONTROL_REGISTRY, CONTROLS, PATTERN_DRAWS, is_exchangeable, MAX_R, Control, ControlDraws, ControlRequest, Fallback, any_layer_controls,
        attention_matched_controls, draw_controls, get_control, layer_matched_controls, split_control_name,
        parse_control_spec, random_n_controls, register_control, sink_heads, text_heavy_heads, whole_layer_controls,
    )
    from vheads._headset import HeadSet, default_k
    from vheads.evaluation._pools import EXACT_POOL_FACTOR, control_pool, control_pool_size
    from vheads.evaluation._metrics import (
        Outcomes, baseline_audit, cers, letter_metric, distractor_cell, head_attention_mass, ncs, ncs_grid, text_arm,
    )
    from vheads.evaluation._digest import prompt_digest
    from vheads.evaluation._probe import ROWS_RUN, Action, ProbeMemo, key_positions, option_probs
    from vheads.evaluation._metrics import _check_items as check_items  # four lettered options per item
    from vheads.evaluation._ablation import donors, reference_means
    from vheads.evaluation._request import (
        ABLATION_REGISTRY, ABLATIONS, AUDIT_SETS, HEAD_OUTPUT_TESTS, METRICS, TEST_REGISTRY, TEST_SETS, TESTS, Ablation,
        EvaluationTest, audit_sets, check_ablation, check_request, check_sizes, item_sets, reference_sets, register_ablation,
        register_test,
    )
    from vheads.evaluation._sequential import (
        SequentialRankP, control_rank_p, p_bounds, run_sequential, sequential_decisions, sequential_params, sequential_rank_p,
        settled_no,
    )
    from vheads.evaluation._run import HeadsetResult, evaluate_headsets, run_test
    from vheads.evaluation._audit import run_baseline_audit
    from vheads.evaluation._grounding import (
        AGGREGATIONS, GROUNDING_MEASURES, GROUNDING_ROWS, GroundingRule, aggregate_maps, capture_maps, grounding, truth_box,
    )
    from vheads.evaluation._boxes import PixelGrid, box_iou, box_rule, component_entropy, pointing_hits
    from vheads.evaluation._stats import (
        MIN_BOOTSTRAP_N, ArmsDifference, BootstrapInterval, bca_diff_ci, Holm, Interval, PairedT, RankP, Spearman,
        ZScore, bootstrap_ci, bootstrap_diff_ci, welch_interval, holm, ncs_difference_t, paired_one_sided_p,
        paired_t, rank_p, spearman, t_interval, z_score, VERDICTS, holm_floors, member_required_n, required_n, verdict,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__)
