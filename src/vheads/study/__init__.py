"""The study runner: configuration, work units, results store, backends.

The names load lazily (:func:`vheads._lazy.lazy_exports` reads them from the block below):
``load_config`` checks a config without importing torch, so a bad config is refused at once.
"""

from typing import TYPE_CHECKING

from vheads._lazy import lazy_exports

if TYPE_CHECKING:  # the public names; each loads on first use
    from vheads.study._config import (
        DEFAULT_TOML, RunConfig, default_toml, StudyConfig, config_from_dict, load_config, load_config_for_plan,
    )
    from vheads.study._headline import beta_by_rule, parse_beta_rule
    from vheads.study._evaluate import HeadsEvaluation, evaluate_heads
    from vheads.study._plan import Layout, plan_study, plan_text, study_plan
    from vheads.study._projection import study_rows
    from vheads.study._report import build_report_if_available
    from vheads.study._runner import StudyResult, run_study
    from vheads.study._export import export_run
    from vheads.study._compare import compare_runs
    from vheads.store import Store

__getattr__, __dir__, __all__ = lazy_exports(__name__)
