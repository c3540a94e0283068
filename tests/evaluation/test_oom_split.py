"""A forward that runs out of device memory is split in half and retried, with a warning,
and gives what the unsplit forward gives (the OOM is injected on CPU: the engine's forward
raises ``torch.OutOfMemoryError`` above a row count, as a full GPU does)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from tests.evaluation.test_cross_item import _headsets, _items
from vheads._errors import VheadsError
from vheads.engine import Engine
from vheads.evaluation._probe import Action, Probe, run_probes


def _oom_above(eng, max_rows):
    """``eng.run`` raises OutOfMemoryError for a forward of more than ``max_rows`` rows; returns the row counts run."""
    seen, run = [], eng.run

    def limited(batch, *a, **k):
        if batch.n_rows > max_rows:
            raise torch.OutOfMemoryError(f"CUDA out of memory (injected: {batch.n_rows} rows)")
        seen.append(batch.n_rows)
        return run(batch, *a, **k)

    eng.run = limited
    return seen


def _probes(lm):
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    hs = _headsets(lm.n_layers, lm.n_heads, n=5)
    actions = [Action("mask", rows="all"), Action("steer", rows="all", target="left", beta=3.0), Action("mask", rows="question")]
    return [Probe(pr, None) for pr in prompts] + [Probe(pr, a, hs) for pr in prompts for a in actions]


def test_an_out_of_memory_forward_is_split_retried_and_equals_the_unsplit_run(loaded, caplog):
    lm = loaded["qwen3_vl"]
    want = run_probes(Engine(lm), _probes(lm))
    eng = Engine(lm)
    seen = _oom_above(eng, 3)
    with caplog.at_level(logging.WARNING, logger="vheads"):
        got = run_probes(eng, _probes(lm))
    assert seen and max(seen) <= 3
    assert any("out of memory on a forward of" in r.getMessage() and "retried" in r.getMessage() for r in caplog.records)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5)


def test_one_row_that_does_not_fit_is_one_line_saying_what_to_lower(loaded):
    lm = loaded["qwen3_vl"]
    eng = Engine(lm)
    _oom_above(eng, 0)
    with pytest.raises(VheadsError, match="out of memory on a forward of one row"):
        run_probes(eng, _probes(lm)[:2])
