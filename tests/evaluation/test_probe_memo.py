"""The probe memo: rows already run are looked up, not run again, and a memoized call gives
what a call without it gives (which tests/evaluation/test_cross_item.py checks against
per-item runs, and those against a hand-written softmax)."""

import numpy as np
import pytest
from PIL import Image

from vheads.data import Item
from vheads.engine import Engine
from vheads.evaluation import ProbeMemo, prompt_digest
from vheads._headset import HeadSet
from vheads.evaluation._probe import Action, Probe, run_probes
from tests.evaluation.test_cross_item import _counting, _items


def _rows_run(calls) -> int:
    return sum(sum(counts) for _, counts, _, _ in calls)


def test_memoized_rows_are_not_run_again_and_equal_new_runs(loaded):
    lm = loaded["qwen3_vl"]
    eng = Engine(lm)
    L, H = eng.shape
    rng = np.random.default_rng(3)
    pool = [HeadSet.from_flat(rng.choice(L * H, 2, replace=False), L, H) for _ in range(8)]
    steer = Action("steer", rows="all", target="left", beta=3.0)

    def probes(hs_ids, action):
        """New prompt and head-set objects each time, as a study unit builds them."""
        prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
        hs = [HeadSet(pool[i].heads, L, H) for i in hs_ids]
        return [Probe(pr, None) for pr in prompts] + [Probe(pr, action, hs) for pr in prompts]

    memo = ProbeMemo()
    calls = _counting(eng)
    first = run_probes(eng, probes([0, 1, 2, 3], steer), memo=memo)
    assert _rows_run(calls) == 3 + 3 * 4 and memo.hits == 0
    calls.clear()
    # head-sets 2 and 3 again, 4 and 5 new: only the new rows run; the baselines are known
    second = run_probes(eng, probes([2, 4, 3, 5], steer), memo=memo)
    assert _rows_run(calls) == 3 * 2 and memo.hits == 3 + 3 * 2
    calls.clear()
    # another β is another action: every row runs
    run_probes(eng, probes([2, 3], Action("steer", rows="all", target="left", beta=4.0)), memo=memo)
    assert _rows_run(calls) == 3 * 2
    for got, p in ((first, probes([0, 1, 2, 3], steer)), (second, probes([2, 4, 3, 5], steer))):
        for a, b in zip(got, run_probes(eng, p)):
            assert a.shape == b.shape and np.abs(a - b).max() <= 1e-5
    # the memoized rows are the ones asked for: head-set 2 in the first call is row 2, in the second row 0
    assert np.abs(first[3 + 0][2] - second[3 + 0][0]).max() <= 1e-5
    assert np.abs(second[3][0] - second[3][1]).max() > 1e-4  # different head-sets differ: not vacuous


def test_an_item_is_known_by_its_content_not_its_id(loaded):
    lm = loaded["qwen3_vl"]
    it = _items()[0]
    other = Item(it.id, it.kind, Image.new("RGB", it.image.size, "black"), it.question, it.answer, regions=it.regions,
                 options=it.options)  # same id, another image
    a, b, again = (lm.adapter.build(x, lm.processor) for x in (it, other, it))
    assert prompt_digest(a) == prompt_digest(again)
    assert prompt_digest(a) != prompt_digest(b)
    eng = Engine(lm)
    memo = ProbeMemo()
    pa = run_probes(eng, [Probe(a, None)], memo=memo)[0]
    pb = run_probes(eng, [Probe(b, None)], memo=memo)[0]
    assert memo.hits == 0
    assert np.abs(pb - run_probes(eng, [Probe(b, None)])[0]).max() <= 1e-5
    assert np.abs(pa - pb).max() > 1e-4


def test_the_memo_keeps_at_most_max_rows_dropping_the_oldest():
    memo = ProbeMemo(max_rows=3)
    for i in range(5):
        memo.put(bytes([i]), np.full(4, float(i)))
    assert len(memo) == 3
    assert memo.get(bytes([0])) is None and memo.get(bytes([1])) is None
    assert memo.get(bytes([4])).tolist() == [4.0] * 4
    with pytest.raises(ValueError, match="max_rows"):
        ProbeMemo(max_rows=0)


def test_a_prompt_is_built_once_per_item_object_and_model(loaded, monkeypatch):
    lm = loaded["qwen3_vl"]
    eng = Engine(lm)
    built = []
    original = type(lm.adapter).build
    monkeypatch.setattr(type(lm.adapter), "build", lambda self, it, *a, **k: built.append(it.id) or original(self, it, *a, **k))
    items = _items()
    memo = ProbeMemo()
    first = [memo.prompt(eng, it) for it in items]
    again = [memo.prompt(Engine(lm), it) for it in items]  # another engine on the same model
    assert len(built) == len(items) and all(a is b for a, b in zip(first, again))
    fresh = [memo.prompt(eng, it) for it in _items()]  # new item objects (the same content): built again
    assert len(built) == 2 * len(items)
    for a, b in zip(first, fresh):  # and the same prompt as a new build
        assert a.layout.n_tokens == b.layout.n_tokens
        assert all(np.array_equal(a.inputs[k].numpy(), b.inputs[k].numpy()) for k in a.inputs)
    memo.MAX_PROMPTS = 2  # a new item drops the oldest prompts
    memo.prompt(eng, _items()[0])
    assert len(memo._prompts) == 2
