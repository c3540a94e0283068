"""Discovery's capture forwards that run out of device memory are split in half and retried,
with a warning, and give what each item gives in a forward of its own (the OOM is injected
on CPU: the engine's forward raises ``torch.OutOfMemoryError`` above a row count, as a full
GPU does)."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import torch

from tests.evaluation.test_oom_split import _oom_above
from vheads._errors import VheadsError
from vheads.data.synthetic import strip_items
from vheads.discovery._region_mass import region_masses
from vheads.discovery._score_space import ScorePoint, point_statistics
from vheads.engine import Batching, Engine


def _split_warnings(caplog):
    return [r.getMessage() for r in caplog.records if "out of memory on a forward of" in r.getMessage() and "retried" in r.getMessage()]


def test_region_masses_of_a_forward_out_of_memory_equal_one_forward_per_item(small_qwen, caplog):
    items = strip_items("comics", "ordinal", 5, seed=0)
    alone = region_masses(Engine(small_qwen, Batching(cross_item=False)), items, [None] * 5, ("last", "qspan"))
    eng = Engine(small_qwen, Batching(cross_item=True, max_rows=8))
    seen = _oom_above(eng, 2)
    with caplog.at_level(logging.WARNING, logger="vheads"):
        got = region_masses(eng, items, [None] * 5, ("last", "qspan"))
    assert seen and max(seen) <= 2 and sum(seen) == 5  # every item captured once, in forwards that fit
    assert _split_warnings(caplog) and all(small_qwen.model_id in m for m in _split_warnings(caplog))
    for g, w in zip(got, alone):
        for s in ("last", "qspan"):
            np.testing.assert_allclose(g[s], w[s], atol=1e-5)


def test_point_statistics_with_entropy_of_a_forward_out_of_memory_equal_one_forward_per_item(small_qwen, caplog):
    """Two captures per request (the score, and one group per image key for the entropy)."""
    items = strip_items("comics", "ordinal", 3, seed=1)
    point = ScorePoint(rows="last", region="target", norm="image", keys="mass", select="entropy")
    alone = point_statistics(Engine(small_qwen, Batching(cross_item=False)), items, [None] * 3, point)
    eng = Engine(small_qwen, Batching(cross_item=True))
    seen = _oom_above(eng, 1)
    with caplog.at_level(logging.WARNING, logger="vheads"):
        got = point_statistics(eng, items, [None] * 3, point)
    # 3 rows -> 1 + 2, and the 2 are cut to the remembered 1 without running out of memory again
    assert seen == [1, 1, 1] and len(_split_warnings(caplog)) == 1 and eng.memory.rows == 1
    np.testing.assert_allclose(got.per_item, alone.per_item, atol=1e-5)
    np.testing.assert_allclose(got.entropy, alone.entropy, atol=1e-5)


def test_one_capture_row_that_does_not_fit_is_one_line_naming_the_model_and_the_keys(small_qwen):
    eng = Engine(small_qwen)
    _oom_above(eng, 0)
    with pytest.raises(VheadsError, match="out of memory on a forward of one row") as e:
        region_masses(eng, strip_items("comics", "ordinal", 2, seed=0), [None] * 2, ("last",))
    msg = str(e.value)
    assert "\n" not in msg and small_qwen.model_id in msg and "batch_size" in msg and "token_budget" in msg and "dtype" in msg


def test_a_greedy_answer_that_does_not_fit_is_the_same_one_line(small_qwen, monkeypatch):
    """Discovery's ``out`` source generates each item's answer (one row): out of memory there is the one-row error."""
    from vheads.discovery import score_settings

    def full(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory (injected)")

    monkeypatch.setattr(small_qwen.model, "generate", full)
    with pytest.raises(VheadsError, match="out of memory on a forward of one row of model " + re.escape(small_qwen.model_id)):
        score_settings(small_qwen, {("comics", "ordinal"): strip_items("comics", "ordinal", 1, seed=0)}, sources=("out",), progress=False)
