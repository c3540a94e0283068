"""Discovery: rank heads by region mass under each setting, select head-sets, compare them.

- :func:`score_settings` — discovery scores ``s[l,h]`` (and per-item mass) of every
  corpus × query × source setting (DESIGN.md "Discovery score");
- :func:`select_heads` — flat top-k or top-k per layer, k scaled to the model;
- :func:`save_headset` / :func:`load_headset` — ``vheads.headset/1`` files with provenance;
- :func:`overlap_report` — overlap matrix, split-half noise ceilings, geometric-mean
  ceilings, overlap curves; :func:`plot_overlap_heatmap`;
- :func:`discover_headsets` — the whole run (the ``vheads discover`` command).
"""

from vheads.discovery._discover import Corpus, discover_headsets, headset_records, load_corpus
from vheads.discovery._files import SCHEMA, HeadSetRecord, check_model, load_headset, load_per_item, save_headset, save_per_item
from vheads.discovery._overlap import (
    Ceiling, OverlapReport, PairOverlap, pair_overlap, split_half_overlap, geometric_ceiling, overlap_curve, overlap_fraction, overlap_matrix, overlap_report,
    plot_overlap_heatmap, split_half_ceiling, topk_overlap,
)
from vheads.discovery._scores import (
    CORPUS_ABBREV, QUERY_ABBREV, SOURCE_ABBREV, SOURCES, Setting, SettingScores, greedy_answer, item_region_mass,
    score_settings,
)
from vheads.discovery._selection import MODES, ranked_heads, resolve_k, select_heads

__all__ = [
    "CORPUS_ABBREV", "Ceiling", "Corpus", "HeadSetRecord", "MODES", "OverlapReport", "PairOverlap", "pair_overlap", "split_half_overlap", "QUERY_ABBREV", "SCHEMA",
    "SOURCES", "SOURCE_ABBREV", "Setting", "SettingScores", "check_model", "discover_headsets", "geometric_ceiling",
    "greedy_answer", "headset_records", "item_region_mass", "load_corpus", "load_headset", "load_per_item",
    "overlap_curve", "overlap_fraction", "overlap_matrix", "overlap_report", "plot_overlap_heatmap", "ranked_heads",
    "resolve_k", "save_headset", "save_per_item", "score_settings", "select_heads", "split_half_ceiling",
    "topk_overlap",
]
