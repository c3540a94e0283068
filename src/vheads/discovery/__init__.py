"""Discovery: rank heads by region mass under each setting, select head-sets, compare them.

- :func:`score_settings` — discovery scores ``s[l,h]`` (and per-item mass) of every
  corpus × query × source setting (DESIGN.md "Discovery score");
- :func:`select_heads` — flat top-k or top-k per layer, k scaled to the model;
- :func:`save_headset` / :func:`load_headset` / :func:`load_headset_files` — ``vheads.headset/1`` files
  with provenance (plain head lists too: :func:`read_head_list`, :func:`parse_heads`);
  :func:`model_to_load` finds a file's model again;
- :func:`headset_schema` / :func:`validate_headset_json` — the shipped JSON Schema of those files;
- :func:`overlap_report` — overlap matrix, split-half noise ceilings, geometric-mean
  ceilings, overlap curves; :func:`plot_overlap_heatmap`;
- :func:`stability_curve` — overlap with the full-corpus head-set and split-half overlap as
  the number of discovery items grows, N90 (:func:`items_to_reach`), :func:`plot_stability`;
- :func:`discover_headsets` — the whole run (the ``vheads discover`` command);
- the score space (:class:`ScorePoint`, presets in :data:`SCORE_REGISTRY`, :func:`parse_score`,
  :func:`score_point`) and its settings (:class:`ScoreSetting`, :func:`discover_scores`:
  ``vheads discover --score``).

The names load lazily (:func:`vheads._lazy.lazy_exports` reads them from the block below):
``vheads discover --help`` imports the command module alone, not torch.
"""

from typing import TYPE_CHECKING

from vheads._lazy import lazy_exports

if TYPE_CHECKING:  # the public names; each loads on first use
    from vheads.discovery._discover import corpus_abbrev, strip_folder_names, Corpus, discover_headsets, headset_records, load_corpus
    from vheads.discovery._cli import discover as discover_command
    from vheads.discovery._cli import overlap as overlap_command
    from vheads.discovery._files import (
        SCHEMA, HeadSetRecord, check_model, load_headset, load_headset_files, load_per_item, model_to_load, parse_heads,
        read_head_list, save_headset, save_headset_dict, save_per_item,
    )
    from vheads.discovery._overlap import (
        Ceiling, OverlapReport, PairOverlap, pair_overlap, split_half_overlap, geometric_ceiling, overlap_curve, overlap_fraction, overlap_matrix, overlap_report,
        plot_overlap_heatmap, split_half_ceiling, topk_overlap,
    )
    from vheads.discovery._schema import headset_schema, headset_schema_errors, validate_headset_json
    from vheads.discovery._region_mass import SettingScores, greedy_answer, item_region_mass, score_settings
    from vheads.discovery._source_setting import CORPUS_ABBREV, QUERIES, QUERY_ABBREV, SOURCE_ABBREV, SOURCES, Setting
    from vheads.discovery._selection import MODES, ranked_heads, resolve_k, select_heads
    from vheads.discovery._stability import StabilityCurve, items_to_reach, plot_stability, stability_curve, stability_sizes
    from vheads.discovery._score_space import AXES, SCORE_REGISTRY, SCORES, ScorePoint, ScorePreset, parse_score, score, score_point
    from vheads.discovery._point_setting import ScoreSetting, check_score_name, parse_named_score
    from vheads.discovery._point_discovery import discover_scores, record_k, score_items

__getattr__, __dir__, __all__ = lazy_exports(__name__)
