"""Where a study's items come from, and the check that reads every input before any model work.

Evaluation items are synthetic, or built from real photos (``eval_source``, see
:mod:`vheads.data.builders`); discovery corpora are synthetic, strip folders or COCO
(:func:`vheads.discovery.load_corpus`). :func:`preflight_data` builds all of them once —
opening every photo an item will show — so a missing column, an unreadable image or too
few classes stops the study with one line naming the file (and row) before the model is
loaded and before the run directory is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vheads._seeds import derived_seed

if TYPE_CHECKING:  # annotations only: _config imports the study's parts, which read items from here
    from vheads.study._config import StudyConfig


def eval_seed(seed: int):
    """The study's evaluation items of each kind come from their own derived seed."""
    return lambda kind: derived_seed(seed, "eval", kind)


def eval_source(cfg: StudyConfig):
    """The study's :class:`~vheads.data.builders.RealItems`, or None for the synthetic items."""
    if cfg.eval_source == "synthetic":
        return None
    from vheads.data.builders import RealItems

    return RealItems(cfg.eval_source, cfg.eval_classes, cfg.eval_exclude, cfg.eval_groups, cfg.eval_cell, cfg.eval_resize,
                     cfg.question_templates)


#: the pointing-suite item kinds by role: the CERS grids, the NCS arms, the audit sets
OOD_KINDS = {"cers": "grid-neutral", "matched": "class-matched", "mismatched": "class-mismatched",
             "oracle": "grid-oracle", "floor": "grid-blank"}


def ood_sets(cfg: StudyConfig, spec: str) -> dict[str, list]:
    """``{role: items}`` of one pointing-suite task (roles of :data:`OOD_KINDS`), ``n_ood`` each."""
    from vheads.data.ood import BenchmarkItems

    bench = BenchmarkItems(spec, cfg.eval_cell, cfg.question_templates)
    return {role: bench.items(kind, cfg.n_ood, derived_seed(cfg.seed, "ood", bench.task, kind)) for role, kind in OOD_KINDS.items()}


def preflight_data(cfg: StudyConfig) -> None:
    """Build every evaluation set, every pointing-suite task's items, and load every
    non-synthetic discovery corpus once."""
    from vheads.discovery import load_corpus
    from vheads.data.synthetic import CORPORA as SYNTHETIC
    from vheads.evaluation import AUDIT_SETS, TEST_SETS, item_sets

    source = eval_source(cfg)
    if source is not None:
        kinds = dict.fromkeys([k for t in cfg.tests for k in TEST_SETS[t]] + ["grid-neutral", *AUDIT_SETS.values()])
        item_sets(kinds, cfg.n_eval, eval_seed(cfg.seed), source)
    for spec in cfg.ood_tasks:
        ood_sets(cfg, spec)
    for c in cfg.corpora:
        if c not in SYNTHETIC:
            for q in cfg.queries:
                load_corpus(c, q, cfg.n_discovery, derived_seed(cfg.seed, "discovery", c, q), templates=cfg.question_templates)
