"""The report (:mod:`vheads.report`): built once every model's stages are in the store, by
the runner (not per model). Its key: the metric the tables lead with."""

from __future__ import annotations

from vheads.study._stage import Key, Stage, register_stage

KEYS = (Key("metric", "p4", "the metric the tables lead with: p4 (P over the four letters) | logprob | logit-diff "
            "(all three are stored)"),)


def validate_report(cfg, bad) -> None:
    from vheads.evaluation import METRICS

    if cfg.metric not in METRICS:
        bad("metric", f"unknown metric {cfg.metric!r}; choose from {', '.join(METRICS)}")


STAGE = register_stage(Stage("report", 90, keys=KEYS, validate=validate_report))
