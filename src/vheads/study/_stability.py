"""The study's stability stage: how many discovery items each setting's head-set needs.

It reads the per-item scores discovery stored (``item_scores``, in item_id order, the order
the overlap stage reads them in) and runs no forward pass: for every setting,
:func:`vheads.discovery.stability_curve` at the sizes 5, 10, 25, … below ``n_discovery``
and at ``n_discovery`` itself, ``splits`` seeded draws per size; at ``n_discovery`` the
draws are the noise ceiling's own (its seed), so the split-half curve ends on the ceiling
of the overlap table. Every draw's overlap is stored with its size's seed (table ``stability``), so
each point of the curves, their bands and N90 can be recomputed from the store.
"""

from __future__ import annotations

import json
import time

import numpy as np

from vheads._seeds import derived_seed
from vheads.discovery import stability_curve
from vheads.store import Store


def stability_stage(store: Store, cfg, attention_layers: tuple[int, ...] | None = None) -> None:
    """Compute and commit the ``stability`` unit (once: a resumed run skips it)."""
    if "stability" in store.done_units():
        return
    t0 = time.time()
    rows = []
    for sid, k in store.query("SELECT setting, k FROM discovery ORDER BY setting"):
        got = store.query("SELECT scores FROM item_scores WHERE setting=? ORDER BY item_id", sid)
        if len(got) < 2:
            continue
        per = np.array([json.loads(s) for (s,) in got])  # [N, L, H]
        # at all N items the split-half curve is the overlap stage's noise ceiling: the same seed
        c = stability_curve(per, k, draws=cfg.splits, seed=derived_seed(cfg.seed, "stability", sid),
                            per_layer=cfg.selection == "per-layer", attention_layers=attention_layers,
                            seeds={len(per): derived_seed(cfg.seed, "ceiling", sid)})
        for curve, overlaps in c.overlaps.items():
            for n, seed, row in zip(c.sizes, c.seeds, overlaps):
                rows += [(sid, k, curve, n, r, seed, int(v)) for r, v in enumerate(row)]
    store.commit_unit("stability", "stability", time.time() - t0, {"stability": rows})
