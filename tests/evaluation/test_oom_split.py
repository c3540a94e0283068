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


#: the two forms a CUDA out-of-memory error takes: torch's own class, and the plain RuntimeError of older kernels
OOM_KINDS = {"OutOfMemoryError": torch.OutOfMemoryError, "RuntimeError": RuntimeError}


def _oom_above(eng, max_rows, kind=torch.OutOfMemoryError, raised=None):
    """``eng.run`` raises ``kind("CUDA out of memory")`` for a forward of more than ``max_rows`` rows
    (each raise appended to ``raised``); returns the row counts run."""
    seen, run = [], eng.run

    def limited(batch, *a, **k):
        if batch.n_rows > max_rows:
            if raised is not None:
                raised.append(batch.n_rows)
            raise kind(f"CUDA out of memory. Tried to allocate 2.00 GiB (injected: {batch.n_rows} rows)")
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


@pytest.mark.parametrize("kind", list(OOM_KINDS))
def test_the_size_that_fit_is_remembered_by_later_forwards(loaded, kind):
    """After one split, the engine's later forwards start at the size that fit: the same
    probes run again raise no out-of-memory error, and give the same values."""
    lm = loaded["qwen3_vl"]
    want = run_probes(Engine(lm), _probes(lm))
    eng = Engine(lm)
    raised = []
    seen = _oom_above(eng, 3, OOM_KINDS[kind], raised)
    first = run_probes(eng, _probes(lm))
    assert raised and eng.memory.rows is not None and eng.memory.rows <= 3
    raised.clear()
    again = run_probes(eng, _probes(lm))
    assert raised == [] and max(seen) <= 3
    for a, b, w in zip(first, again, want):
        np.testing.assert_allclose(a, w, atol=1e-5)
        np.testing.assert_allclose(b, w, atol=1e-5)


def test_an_error_that_is_not_out_of_memory_is_not_retried(loaded):
    lm = loaded["qwen3_vl"]
    eng = Engine(lm)

    def broken(batch, *a, **k):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    eng.run = broken
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        run_probes(eng, _probes(lm)[:2])
    assert eng.memory.rows is None


@pytest.mark.parametrize("kind", list(OOM_KINDS))
def test_atp_forwards_are_split_on_out_of_memory_and_equal_the_unsplit_ones(loaded, kind, monkeypatch):
    from vheads.causal import _atp

    lm = loaded["qwen3_vl"]
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    letters = [0, 1, 2]
    want = _atp.estimate_drops(Engine(lm), prompts, letters, batch_size=3)
    real, sizes = _atp.scaled_ablation, []

    def limited(engine, prs, *a, **k):
        if len(prs) > 1:
            raise OOM_KINDS[kind]("CUDA out of memory (injected)")
        sizes.append(len(prs))
        return real(engine, prs, *a, **k)

    monkeypatch.setattr(_atp, "scaled_ablation", limited)
    eng = Engine(lm)
    got = _atp.estimate_drops(eng, prompts, letters, batch_size=3)
    assert sizes == [1, 1, 1] and eng.memory.rows == 1
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5)


def test_the_token_budget_starts_from_the_devices_free_memory(loaded, monkeypatch):
    """A device that reports its free memory (CUDA's ``mem_get_info``) caps the token budget at
    the positions that fit; a CPU (no report) keeps the configured budget."""
    from vheads.engine import _memory, _runner

    lm = loaded["qwen3_vl"]
    default = Engine(lm).batching.token_budget
    assert _memory.device_free_memory(torch.device("cpu")) is None
    per = _memory.bytes_per_position(lm.model.config, lm.model.dtype)
    text = lm.model.config.get_text_config()
    assert per >= text.hidden_size * 4  # at least the residual stream of one position in fp32
    for free in (10 * 2**20, 100 * 2**20):
        monkeypatch.setattr(_runner, "device_free_memory", lambda device, free=free: free)
        budget = Engine(lm).batching.token_budget
        assert budget == min(default, int(free * _memory.FREE_SHARE) // per)
        assert budget * per <= free  # what it plans fits in what is free
    monkeypatch.setattr(_runner, "device_free_memory", lambda device: 1 << 50)
    assert Engine(lm).batching.token_budget == default  # never above the configured budget


def test_one_row_that_does_not_fit_is_one_line_saying_what_to_lower(loaded):
    lm = loaded["qwen3_vl"]
    eng = Engine(lm)
    _oom_above(eng, 0)
    with pytest.raises(VheadsError, match="out of memory on a forward of one row"):
        run_probes(eng, _probes(lm)[:2])
