"""Cross-item batching: rows of different items (lengths, images) in one forward give what
each item gives alone (the per-item path is checked against a hand-written softmax in
tests/engine/test_engine.py)."""

import numpy as np
import pytest
import torch
from PIL import Image

from vheads.data import Item
from vheads.engine import Batching, Capture, Engine, RowBatch, positions_mask
from vheads._headset import HeadSet
from vheads.evaluation._probe import Action, Probe, run_probes

QUESTIONS = ["what is in panel 3 ?", "what is the answer ?", "which option shows the a cell of 1 2 3 ?"]
SIZES = [(96, 64), (64, 64), (128, 96)]  # Qwen-VL: 6, 4 and 12 image tokens; LLaVA: a fixed grid


def _items():
    out = []
    for i, ((w, h), q) in enumerate(zip(SIZES, QUESTIONS)):
        img = Image.new("RGB", (w, h), "white")
        for x in range(0, w, 7):
            for y in range(0, h, 5):
                img.putpixel((x, y), ((x * 5 + 40 * i) % 255, (y * 9) % 255, 100))
        out.append(Item(f"x{i}", "test", img, q, "A", regions={"left": (0, 0, w // 2, h // 2), "right": (w // 2, h // 2, w, h)},
                        options=("red", "blue", "green", "white")))
    return out


def _counting(eng):
    """Record (prompts, counts, prefix, length) of every forward the engine runs."""
    calls, run = [], eng.run

    def counted(batch, *a, **k):
        calls.append((len(batch.prompts), list(batch.counts), batch.prefix, batch.length))
        return run(batch, *a, **k)

    eng.run = counted
    return calls


def _headsets(L, H, n=5, k=3):
    rng = np.random.default_rng(0)
    return [HeadSet.from_flat(rng.choice(L * H, k, replace=False), L, H) for _ in range(n)]


@pytest.mark.parametrize("family", ["qwen3_vl", "qwen2_5_vl", "llava"])
def test_cross_item_probes_equal_per_item_probes(loaded, family):
    lm = loaded[family]
    eng = Engine(lm)
    calls = _counting(eng)
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    assert len({p.layout.n_tokens for p in prompts}) == 3  # mixed lengths
    hs = _headsets(lm.n_layers, lm.n_heads)
    full = [Action("mask", rows="all"), Action("steer", rows="all", target="left", beta=3.0), Action("mask", rows="image", keys="right")]
    prefix = [Action("mask", rows="question"), Action("steer", rows="last", target="left", beta=3.0), Action("mask", rows="last", keys="text"),
              Action("mask", rows="all", keys="text")]  # acts at every row, but no row before the question sees a question key
    for actions in (full, prefix):  # without, then with a shared prefix per item
        probes = [Probe(pr, None) for pr in prompts] + [Probe(pr, a, hs) for pr in prompts for a in actions]
        eng.batching = Batching(cross_item=False)
        alone = run_probes(eng, probes)
        assert all(n == 1 for n, *_ in calls)
        calls.clear()
        eng.batching = Batching(cross_item=True, max_rows=24)
        together = run_probes(eng, probes)
        assert any(n > 1 for n, *_ in calls)  # items did share forwards
        if actions is prefix:
            assert any(n > 1 and p > 0 for n, _, p, _ in calls)  # with one prefix per item
        calls.clear()
        for a, b in zip(alone, together):
            assert a.shape == b.shape
            assert np.abs(a - b).max() <= 1e-5
        # the actions did something, so the comparison is not vacuous
        assert max(np.abs(p - alone[i % 3]).max() for i, p in enumerate(alone[3:])) > 1e-4


@pytest.mark.parametrize("family", ["gemma3", "gemma4", pytest.param("qwen3_5", marks=pytest.mark.slow)])
def test_position_sensitive_families_run_one_item_per_forward(loaded, family):
    """Packing items pads between each prefix and its suffix. A sliding window (Gemma) counts
    padded positions, and a linear-attention recurrence (Qwen3.5) runs over them: a shorter
    prefix's suffix rows would not see what they see when the item runs alone. So these
    families never share a forward across items, and asking for cross-item batching gives
    exactly the per-item probes."""
    lm = loaded[family]
    eng = Engine(lm, Batching(cross_item=True, max_rows=24))
    assert not eng.cross_item
    calls = _counting(eng)
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    A = lm.attention_layers
    hs = [HeadSet([(A[i % len(A)], i % lm.n_heads), (A[(i + 1) % len(A)], (i + 2) % lm.n_heads)], lm.n_layers, lm.n_heads, A) for i in range(5)]
    probes = [Probe(pr, Action("mask", rows="question"), hs) for pr in prompts]
    together = run_probes(eng, probes)
    assert calls and all(n == 1 for n, *_ in calls)
    assert any(p > 0 for *_, p, _ in calls)  # each item still shares its own prefix across head-sets
    eng.batching = Batching(cross_item=False)
    for a, b in zip(run_probes(eng, probes), together):
        assert np.abs(a - b).max() == 0


@pytest.mark.parametrize("family", ["qwen3_vl", "llava"])
def test_capture_many_equals_one_capture_per_item(loaded, family):
    lm = loaded[family]
    eng = Engine(lm, Batching(cross_item=True))
    calls = _counting(eng)
    reqs = []
    for it in _items():
        pr = lm.adapter.build(it, lm.processor, answer_text="red")
        T = pr.layout.n_tokens
        rows = {"last": positions_mask(T, pr.layout.spans["last"]), "out": positions_mask(T, pr.layout.spans["answer"])}
        groups = torch.stack([positions_mask(T, pr.layout.image_positions), positions_mask(T, pr.layout.regions["left"].positions)])
        reqs.append((pr, rows, groups))
    many = eng.capture_many(reqs)
    assert calls[0][:2] == (3, [1, 1, 1])
    for (pr, rows, groups), got in zip(reqs, many):
        one = eng.forward(pr, eng.plan(1, captures=[Capture(r[None], groups[None], n) for n, r in rows.items()]), logits_at=[]).captures
        for n in rows:
            assert torch.allclose(got[n], one[n][0], atol=1e-5)
        assert got["last"][..., 0].min() > 0  # every head puts some mass on the image


def test_row_batch_layout_puts_every_last_token_last_and_prefixes_first(loaded):
    lm = loaded["qwen3_vl"]
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    splits = [p.layout.spans["question"][0] for p in prompts]
    b = RowBatch(prompts, [2, 1, 3], splits)
    assert b.prefix == max(splits)
    assert b.length == max(splits) + max(p.layout.n_tokens - s for p, s in zip(prompts, splits))
    for u, p in enumerate(prompts):
        idx = b.index(u)
        assert idx[-1] == b.length - 1
        assert idx[: splits[u]].tolist() == list(range(splits[u]))  # prefix left-aligned
        assert (idx[splits[u]:] >= b.prefix).all() and (idx.diff() > 0).all()
        ids = b.place(u, p.inputs["input_ids"][0], -1)
        assert ids[ids >= 0].tolist() == p.inputs["input_ids"][0].tolist()
    assert b.row_items().tolist() == [0, 0, 1, 2, 2, 2]


def test_token_budget_bounds_every_forward(loaded):
    lm = loaded["llava"]
    eng = Engine(lm)
    calls = _counting(eng)
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    hs = _headsets(lm.n_layers, lm.n_heads, n=7)
    longest = max(p.layout.n_tokens for p in prompts)
    budget = 16 * longest  # two items of 7 rows fit, three do not
    for rows in ("all", "question"):  # without and with a shared prefix (padded length P + S)
        probes = [Probe(pr, Action("mask", rows=rows), hs) for pr in prompts]
        eng.batching = Batching(cross_item=True, max_rows=64, token_budget=budget)
        got = run_probes(eng, probes)
        assert len(calls) > 1 and all(sum(c) * T <= budget for _, c, _, T in calls)
        assert any(len(c) > 1 for _, c, _, _ in calls)
        calls.clear()
        eng.batching = Batching(cross_item=False)
        want = run_probes(eng, probes)
        assert max(np.abs(a - b).max() for a, b in zip(got, want)) <= 1e-5
        calls.clear()


def test_cross_item_with_qwen3_vl_deepstack_features(tmp_path):
    """Qwen3-VL adds vision features of some blocks to the first language-model layers
    (deepstack): the repeated vision output must carry them to the right rows too."""
    from vheads.models import load_model
    from vheads.models.tiny_random import build_tiny_random

    lm = load_model(str(build_tiny_random("qwen3_vl", tmp_path / "m", layers=3, deepstack=(0,))))
    eng = Engine(lm)
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    probes = [Probe(pr, Action("mask", rows="all"), _headsets(lm.n_layers, lm.n_heads, n=3)) for pr in prompts] + [Probe(pr, None) for pr in prompts]
    eng.batching = Batching(cross_item=False)
    alone = run_probes(eng, probes)
    eng.batching = Batching(cross_item=True)
    together = run_probes(eng, probes)
    assert max(np.abs(a - b).max() for a, b in zip(alone, together)) <= 1e-5
    assert max(np.abs(alone[i] - alone[3 + i]).max() for i in range(3)) > 1e-4  # hiding the image moves P: not vacuous


@pytest.mark.parametrize("family", ["qwen3_vl", "llava"])
def test_hiding_the_question_at_every_row_shares_the_prefix_before_the_question(loaded, family):
    """No row before the question's first token sees a question key (causal text), so the
    text arm's mask at all rows runs the system prompt and image once per item: equal to the
    same probes run without a prefix."""
    lm = loaded[family]
    eng = Engine(lm)
    calls = _counting(eng)
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    hs = _headsets(lm.n_layers, lm.n_heads)
    probes = [Probe(pr, Action("mask", rows="all", keys="text"), hs) for pr in prompts]
    for pb in probes:
        spans = pb.prompt.layout.spans
        assert pb.first_row() == min(spans["question"] + spans["options"])  # the first question token
    shared = run_probes(eng, probes)
    assert all(p > 0 for _, _, p, _ in calls)
    whole = run_probes(eng, probes, prefix_reuse=False)
    for a, b in zip(shared, whole):
        assert np.abs(a - b).max() <= 1e-5
    assert max(np.abs(a - run_probes(eng, [Probe(pr, None)])[0]).max() for a, pr in zip(whole, prompts)) > 1e-4  # it acted


def test_a_plan_first_changes_the_first_acted_row_after_its_first_biased_key():
    from vheads.engine import ProbePlan, mask_keys

    B, L, H, T = 2, 2, 2, 10
    heads = torch.zeros(B, L, H, dtype=torch.bool)
    heads[:, 1, 0] = True
    rows = torch.ones(B, T, dtype=torch.bool)
    keys = torch.zeros(B, T, dtype=torch.bool)
    keys[0, 6:8] = True
    keys[1, 4] = True
    assert ProbePlan(B, L, H, [mask_keys(heads, rows, keys)]).first_row() == 4  # batch row 1's key
    later = rows.clone()
    later[:, :5] = False
    assert ProbePlan(B, L, H, [mask_keys(heads, later, keys)]).first_row() == 5  # acts from row 5 only
    none = torch.zeros(B, T, dtype=torch.bool)
    assert ProbePlan(B, L, H, [mask_keys(heads, rows, none)]).first_row() == 10**9  # hides nothing: changes nothing
