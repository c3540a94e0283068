"""Causal maps: how much each head alone (and each whole layer) matters for the answer.

- :func:`exact_causal_map` — every one-head set and every whole layer tested in NCS,
  NCS_grid and the text arm, batched like any head-set test (DESIGN.md "Causal map");
- :class:`CausalMap` — one test's per-item values (both NCS arms), its effects and map;
- :func:`save_causal_map` / :func:`load_causal_map` — ``vheads.causal-map/1`` files;
- :func:`atp_map` / :func:`compare_maps` — the attribution-patching estimate (AtP, AtP*) of
  the NCS / text-arm map from one forward and backward per item, and its agreement with the exact map;
- :func:`atp_causal_maps` — the AtP estimate as :class:`CausalMap` objects (method ``atp``), as the study stores it;
- :func:`draw_design` / :func:`head_attribution` / :func:`regression_causal_maps` — head
  attribution: random multi-head ablations and the regression of the outcome on which heads
  were hidden (method ``regression``), with bootstrap and OLS intervals and pairwise interactions;
- :func:`backup_heads` — co-ablation: each head's effect once a top head is hidden, minus its effect alone;
- :func:`causal_maps_by_method` / :func:`agreement` — the maps of several methods on the same
  items, and Spearman ρ and top-k recall between every pair;
- :func:`run_causal_map` — ``vheads causal-map`` as one call (checks, model, maps, backups, the file).

The names load lazily (:func:`vheads._lazy.lazy_exports` reads them from the block below):
``vheads causal-map --help`` (the command is in :mod:`vheads._cli.causal_map`, one module per
command in ``src/vheads/_cli/``) imports no torch.
"""

from typing import TYPE_CHECKING

from vheads._lazy import lazy_exports

if TYPE_CHECKING:  # the public names; each loads on first use
    from vheads.causal._map import (
        CAUSAL_SETTING, CAUSAL_TESTS, DEFAULT_ABLATION, FORMAT, CausalMap, causal_item_sets, causal_units, check_causal_request,
        check_causal_tests, exact_causal_map, head_id, layer_id, load_causal_map, map_key, save_causal_map,
    )
    from vheads.causal._atp import AtpMap, atp_map
    from vheads.causal._compare import compare_maps
    from vheads.causal._atp_map import atp_causal_maps
    from vheads.causal._regression import (
        DEFAULT_Q, DEFAULT_SUBSETS, STORED_DESIGNS, Design, HeadAttribution, check_design, draw_design, head_attribution, ols,
        regression_causal_maps, stored_design,
    )
    from vheads.causal._backup import BackupScan, backup_heads
    from vheads.causal._methods import (
        METHOD_REGISTRY, METHODS, CausalMethod, agreement, causal_maps_by_method, check_methods, register_method,
    )
    from vheads.causal._run import CausalMapRun, check_causal_map_request, run_causal_map

__getattr__, __dir__, __all__ = lazy_exports(__name__)
