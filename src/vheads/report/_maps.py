"""The causal maps of a run, read from its results store's ``causal_map`` table, and their
titles (shared by the causal-map section and the AtP table)."""

from __future__ import annotations

import sqlite3

from vheads.causal import CausalMap
from vheads.report._data import RunData
from vheads.store import Store

TEST_LABELS = {"ncs-all": "NCS (all rows)", "ncs-grid": "NCS_grid", "text": "text arm"}


def load_causal_maps(run: RunData) -> dict[str, CausalMap]:
    """The run's causal maps by test id (empty for a run without a causal map, or made
    before the ``causal_map`` table)."""
    L, H = run.shape
    if not L or not H:
        return {}
    store = Store(run.run_dir, readonly=True, model=run.model)
    try:
        rows = store.query("SELECT method, test, ablation, headset_id, item_id, arm, value, logprob, logit_diff FROM causal_map")
    except sqlite3.OperationalError:  # a store from before the causal map
        rows = []
    finally:
        store.close()
    return CausalMap.from_store_rows(rows, L, H, run.attention_layers) if rows else {}


def _label(key: str) -> str:
    """A map's title from its key (:func:`vheads.causal.map_key`): ``NCS (all rows) · zero ablation · atp``."""
    key, _, method = key.partition(":")
    test, _, ablation = key.partition("@")
    return TEST_LABELS.get(test, test) + (f" · {ablation} ablation" if ablation else "") + (f" · {method}" if method else "")
