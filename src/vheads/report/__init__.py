"""The study report: tables, figures and the reporting protocol, from a run's results store.

``build_report(run_dir)`` writes ``report.md``, a self-contained ``report.html`` and
``figures/*.png``; ``screenshot(html, png)`` renders a page in headless Chromium.
"""

from vheads.report._build import build_report, build_sections
from vheads.report._causal import causal_map_figure
from vheads.report._crossmodel import ModelRun, build_crossmodel_report, crossmodel_blocks, load_model_run
from vheads.report._data import RunData, load_run
from vheads.report._protocol import min_holm_p, protocol_checks, required_R
from vheads.report._registry import ENTRY_POINT_GROUP, SECTION_REGISTRY, SectionSpec, figure, registered_sections, section
from vheads.report._screenshot import CHROMIUM_NAMES, find_chromium, screenshot
from vheads.report._together import methods_figure, write_causal_figures
from vheads.report._tables import TestStat, significance

__all__ = [
    "CHROMIUM_NAMES", "ENTRY_POINT_GROUP", "SECTION_REGISTRY", "SectionSpec", "figure", "registered_sections", "section", "find_chromium", "ModelRun", "RunData", "TestStat", "build_crossmodel_report", "build_report", "build_sections", "causal_map_figure", "crossmodel_blocks",
    "load_model_run", "load_run", "methods_figure", "min_holm_p", "protocol_checks",
    "required_R", "screenshot", "significance", "write_causal_figures",
]
