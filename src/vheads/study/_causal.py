"""The study's causal-map stage and the causal setting (DESIGN.md "Causal map").

The exact causal map (:func:`vheads.causal.exact_causal_map`) of every head alone and every
whole layer is taken in the config's ``causal_tests`` on ``n_eval`` items per set drawn
from a seed of their own (``derived_seed(seed, "causal", kind)``): a discovery split, apart
from the evaluation items every setting is tested on. One work unit per shard of
``run.shard_size`` items, so an interrupted stage resumes by shard. The top-k heads of its
NCS map (the study's k and selection, ranked in p4) form the setting ``causal-ncs``, which
the head-set stage adds beside the discovered settings: the same controls, the same
held-out tests, a row of Table 3. The same unit stores the AtP estimate of the map on the
same items (:func:`vheads.causal.atp_causal_maps`, method ``atp``: heads only, p4) for the
tests and ablations AtP covers (NCS and the text arm; attention, zero).
"""

from __future__ import annotations

import json

import numpy as np

from vheads._seeds import derived_seed
from vheads.causal import CAUSAL_SETTING, DEFAULT_ABLATION, CausalMap, map_key
from vheads.store import Store


def causal_seed(seed: int):
    """The causal map's items of each kind come from their own derived seed (not the evaluation's)."""
    return lambda kind: derived_seed(seed, "causal", kind)


def causal_map_units(cfg) -> list[dict]:
    """One unit per shard of the causal map's items ([] when ``causal_tests`` is empty)."""
    if not cfg.causal_tests:
        return []
    step = cfg.run.shard_size
    return [{"unit_id": f"causal-map/{lo}-{min(cfg.n_eval, lo + step)}", "kind": "causal-map", "shard": [lo, min(cfg.n_eval, lo + step)]}
            for lo in range(0, cfg.n_eval, step)]


def stored_causal_maps(store: Store, shape: tuple[int, int], attention_layers=None) -> dict[str, CausalMap]:
    """The causal maps in ``store`` by test id (empty without a causal map)."""
    rows = store.query("SELECT method, test, ablation, headset_id, item_id, arm, value, logprob, logit_diff FROM causal_map")
    return CausalMap.from_store_rows(rows, *shape, attention_layers) if rows else {}


def causal_setting_rows(store: Store, cfg, shape: tuple[int, int], attention_layers=None) -> list[tuple[str, str, str]]:
    """``[(causal-ncs, scores JSON [L][H], heads JSON)]``: the causal setting as the head-set
    stage reads a discovered one, its scores the NCS map (p4) of ``cfg.causal_method``
    (exact by default; atp, or regression with ``causal_subsets``) and its heads the top-k by
    the study's k and selection; ``[]`` when the run has no such map."""
    from vheads.discovery import resolve_k, select_heads

    maps = stored_causal_maps(store, shape, attention_layers)
    key = map_key("ncs-all", DEFAULT_ABLATION, cfg.causal_method)  # the map the config names (default: the exact one)
    if key not in maps:
        return []
    effect = maps[key].head_map("p4")  # NaN in a hybrid model's linear-attention layers
    layers = list(range(shape[0])) if attention_layers is None else list(attention_layers)
    got = store.query("SELECT k FROM discovery WHERE source != 'score' LIMIT 1")  # the grid's k (a score point has its own)
    k = int(got[0][0]) if got else resolve_k(len(layers), shape[1], cfg.k or None, cfg.selection)
    S = select_heads(effect, k, cfg.selection, attention_layers)
    scores = np.where(np.isfinite(effect), effect, 0.0)  # the k sweep ranks the same heads; no NaN in JSON
    return [(CAUSAL_SETTING, json.dumps(scores.tolist()), json.dumps([list(h) for h in S.heads]))]
