"""Baseline attention per head: each head's attention mass on the image and on sink tokens
from the last prompt row of the CERS grids (:func:`vheads.evaluation.head_attention_mass`),
stored as meta rows; the attention-matched, sinks and text-heavy controls draw on them."""

from __future__ import annotations

import json

from vheads.study._stage import Stage, register_stage


def compute_image_mass(computer, unit):
    from vheads.evaluation import head_attention_mass, item_sets
    from vheads.study._data import eval_seed

    cfg = computer.cfg
    items = item_sets(["grid-neutral"], cfg.n_eval, eval_seed(cfg.seed), computer.source, computer.templates)["grid-neutral"]
    mass = head_attention_mass(computer.engine, items)
    return {"rows": {"meta": [(key, json.dumps(v.tolist())) for key, v in mass.items()]}}


STAGE = register_stage(Stage("attention", 15, units=lambda ctx: [{"unit_id": "image-mass", "kind": "image-mass"}],
                             compute={"image-mass": compute_image_mass}, tables=("meta",), timing="overlap"))
