"""The study runner: configuration, work units, results store, backends."""

from vheads.study._config import DEFAULT_TOML, RunConfig, default_toml, StudyConfig, config_from_dict, load_config
from vheads.study._runner import StudyResult, run_study
from vheads.study._export import export_run
from vheads.study._compare import compare_runs
from vheads.study._runner import build_report_if_available
from vheads.store import Store

__all__ = [
    "DEFAULT_TOML", "RunConfig", "default_toml", "Store", "StudyConfig", "StudyResult", "build_report_if_available", "compare_runs", "config_from_dict",
    "export_run", "load_config", "run_study",
]
