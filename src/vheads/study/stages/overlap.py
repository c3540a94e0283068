"""Overlap and noise ceilings (DESIGN.md "Controls and statistics"): split-half ceilings of
every setting, each pair's overlap at half size (Table 20), and the overlap of every setting
with uniform random draws of its size (Fig. 7). No forward pass: the stored per-item scores."""

from __future__ import annotations

import json
import time

import numpy as np

from vheads._errors import MAX_ITEMS
from vheads._seeds import derived_seed
from vheads.study._stage import Key, Stage, register_stage

RANDOM_OVERLAP_DRAWS = 100  # uniform random head-sets per setting for the Fig. 7 baseline

KEYS = (Key("splits", 200, "half-splits for the noise ceilings"),)


def validate_overlap(cfg, bad) -> None:
    if cfg.splits < 2:
        bad("splits", f"must be at least 2, got {cfg.splits}")
    if cfg.splits > MAX_ITEMS:
        bad("splits", f"{cfg.splits} is more than {MAX_ITEMS:,}")


def overlap_stage(store, cfg, attention_layers: tuple[int, ...] | None = None) -> None:
    """Compute and commit the ``overlap`` unit (once: a resumed run skips it)."""
    from vheads.discovery import pair_overlap, split_half_ceiling
    from vheads.study._scores import ranks_per_layer

    if "overlap" in store.done_units():
        return
    t0 = time.time()
    disc = store.query("SELECT setting, k, headset FROM discovery ORDER BY setting")
    per_layer = ranks_per_layer(cfg)  # setting id -> whether its top-k is taken per layer
    ceil, per, ids = {}, {}, {}
    rows = {"ceilings": [], "overlap": [], "random_overlap": []}
    for sid, k, _ in disc:
        got = store.query("SELECT item_id, scores FROM item_scores WHERE setting=? ORDER BY item_id", sid)
        ids[sid] = [i for i, _ in got]
        per[sid] = np.array([json.loads(s) for _, s in got])
        c = split_half_ceiling(per[sid], k, cfg.splits, derived_seed(cfg.seed, "ceiling", sid), per_layer=per_layer(sid),
                               attention_layers=attention_layers)
        ceil[sid] = c
        rows["ceilings"].append((sid, k, c.mean, c.lo, c.hi, cfg.splits))
    sets = {sid: {tuple(h) for h in json.loads(hs)} for sid, _, hs in disc}
    for i, (a, ka, _) in enumerate(disc):
        for b, _, _ in disc[i + 1:]:
            p = pair_overlap(a, b, per[a], per[b], ceil[a], ceil[b], len(sets[a] & sets[b]), ka, cfg.splits,
                             derived_seed(cfg.seed, "pair-overlap", a, b), per_layer(a), ids[a] == ids[b], attention_layers)
            rows["overlap"].append((a, b, ka, p.all_items, p.half.mean, p.half.lo, p.half.hi, int(p.same_items),
                                    ceil[a].mean, ceil[b].mean, p.geo_ceiling, p.fraction))
    # Fig. 7: overlap of each native set with uniform random draws of the same size
    # (uniform over the heads that exist: on a hybrid model, the softmax layers' heads)
    L, H = next(iter(per.values())).shape[1:] if per else (0, 0)
    pool = [(l, h) for l in (attention_layers if attention_layers is not None else range(L)) for h in range(H)]
    for sid, k, _ in disc:
        seed = derived_seed(cfg.seed, "random-overlap", sid)
        rng = np.random.default_rng(seed)
        for d in range(RANDOM_OVERLAP_DRAWS):
            draw = {pool[int(f)] for f in rng.choice(len(pool), size=len(sets[sid]), replace=False)}
            rows["random_overlap"].append((sid, k, d, seed, len(sets[sid] & draw)))
    store.commit_unit("overlap", "overlap", time.time() - t0, rows)


def _run(ctx) -> int:
    overlap_stage(ctx.store, ctx.cfg, ctx.shape["attention_layers"])
    return 0


STAGE = register_stage(Stage("overlap", 20, keys=KEYS, validate=validate_overlap, run=_run,
                             tables=("ceilings", "overlap", "random_overlap")))
