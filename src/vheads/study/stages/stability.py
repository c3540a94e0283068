"""Stability curves: how many discovery items each setting's head-set needs
(:mod:`vheads.study._stability`; no forward pass, no keys of its own: ``splits``)."""

from __future__ import annotations

from vheads.study._stage import Stage, register_stage


def _run(ctx) -> int:
    from vheads.study._stability import stability_stage

    stability_stage(ctx.store, ctx.cfg, ctx.shape["attention_layers"])
    return 0


STAGE = register_stage(Stage("stability", 30, run=_run, tables=("stability",)))
