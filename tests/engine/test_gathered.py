"""The gathered path: a pair left few keys with a finite bias is recomputed over those keys
alone, under the model's own mask at them — equal to a hand-written softmax over every key."""

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from tests.engine.test_attention_masks import _hand_written, _inputs, _Layer
from vheads.engine import ProbePlan, _attention, _prefix, _schedule, active_plan, mask_keys, steer_keys, vheads_attention


def spy_gathered(monkeypatch) -> list:
    """Record every call of the gathered path."""
    calls = []
    original = _attention._gathered_rows
    monkeypatch.setattr(_attention, "_gathered_rows", lambda *a: calls.append(1) or original(*a))
    return calls


@pytest.fixture
def spy(monkeypatch):
    return spy_gathered(monkeypatch)


def _mask_cases(T):
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    window = causal & (torch.arange(T)[None, :] > torch.arange(T)[:, None] - 5)  # a sliding window of 5
    block = causal.clone()
    block[3:13, 3:13] = True  # a bidirectional image block
    return {"none": None, "causal+padding": causal, "sliding window": window, "image block": block}


@pytest.mark.parametrize("case", ["none", "causal+padding", "sliding window", "image block"])
def test_a_mask_hiding_most_keys_equals_a_hand_softmax(case, spy):
    """Two masks on different heads leave their pairs different numbers of keys (slots
    padded), a steer adds a finite bias to some of the keys left, one row sees no key."""
    B, H, Hkv, T, D = 2, 4, 2, 16, 8
    q, k, v = _inputs(B, H, Hkv, T, D, seed=5)
    mod = _Layer(1, 2)
    allowed = _mask_cases(T)[case]
    valid = torch.ones(B, T, dtype=torch.bool)
    if case == "causal+padding":
        valid[1, 1] = False  # a padded key of batch row 1
    mask = None if allowed is None else (allowed[None] & valid[:, None, :])[:, None]  # [B, 1, T, T]
    every = torch.ones(B, T, dtype=torch.bool)
    hide_a = torch.zeros(B, T, dtype=torch.bool)
    hide_a[:, 2:14] = True  # the "image": 12 of 16 keys
    hide_a[0, 0] = True  # batch row 0, row 0 is left no key
    hide_b = hide_a.clone()
    hide_b[:, 14] = True  # one key fewer for the second mask's heads
    heads_a = torch.zeros(B, 2, H, dtype=torch.bool)
    heads_a[0, 1, [0, 3]] = True
    heads_a[1, 1, 1] = True
    heads_b = torch.zeros(B, 2, H, dtype=torch.bool)
    heads_b[0, 1, 2] = True
    heads_b[1, 1, 1] = True  # both masks act on pair (1, 1)
    steer_target = torch.zeros(B, T, dtype=torch.bool)
    steer_target[:, 15] = True
    steer_image = torch.zeros(B, T, dtype=torch.bool)
    steer_image[:, [1, 14, 15]] = True
    ivs = [mask_keys(heads_a, every, hide_a), mask_keys(heads_b, every, hide_b), steer_keys(heads_a, every, steer_target, steer_image, 1.5)]
    plan = ProbePlan(B, 2, H, ivs)
    with active_plan(plan):
        out, _ = vheads_attention(mod, q, k, v, mask, scaling=D ** -0.5)
    assert spy  # the gathered path ran
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for b, h in [(0, 0), (0, 2), (0, 3), (1, 1)]:
        bias = sum(iv.key_bias[b] for iv in ivs if iv.heads[b, 1, h])
        see = (causal if allowed is None else allowed) & valid[b][None, :]
        want = _hand_written(q[b, h], k[b, h // 2], v[b, h // 2], see, bias, D ** -0.5)
        real = valid[b]  # a padded row's output is read by no real row
        assert torch.allclose(out[b, real, h], want[real], atol=1e-5), (b, h)
    assert out[0, 0, 0].abs().max() == 0  # a row left no key attends nowhere
    plain, _ = vheads_attention(mod, q, k, v, mask, scaling=D ** -0.5)
    assert torch.equal(out[0, :, 1], plain[0, :, 1])  # an untouched head keeps sdpa's output
    assert (out[0, 5:, 0] - plain[0, 5:, 0]).abs().max() > 1e-3  # and the plan acted


def test_rows_of_their_own_per_batch_row_equal_a_hand_softmax(spy):
    """Batch rows acted on at different rows (items of different lengths in one forward): a
    pair's acted rows see the keys the mask leaves, its other rows every key (sdpa's output)."""
    B, H, Hkv, T, D = 2, 4, 2, 16, 8
    q, k, v = _inputs(B, H, Hkv, T, D, seed=7)
    mod = _Layer(1, 2)
    rows = torch.zeros(B, T, dtype=torch.bool)
    rows[0, 8:] = True
    rows[1, 12:] = True
    hide = torch.zeros(B, T, dtype=torch.bool)
    hide[:, 2:14] = True
    heads = torch.zeros(B, 2, H, dtype=torch.bool)
    heads[0, 1, 1] = True
    heads[1, 1, [0, 3]] = True
    plan = ProbePlan(B, 2, H, [mask_keys(heads, rows, hide)])
    with active_plan(plan):
        out, _ = vheads_attention(mod, q, k, v, None, scaling=D ** -0.5)
    assert spy
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for b, h in [(0, 1), (1, 0), (1, 3)]:
        masked = _hand_written(q[b, h], k[b, h // 2], v[b, h // 2], causal, plan.interventions[0].key_bias[b], D ** -0.5)
        plain = _hand_written(q[b, h], k[b, h // 2], v[b, h // 2], causal, torch.zeros(T), D ** -0.5)
        want = torch.where(rows[b][:, None], masked, plain)
        assert torch.allclose(out[b, :, h], want, atol=1e-5), (b, h)
    assert (out[1, 12:, 0] - _hand_written(q[1, 0], k[1, 0], v[1, 0], causal, torch.zeros(T), D ** -0.5)[12:]).abs().max() > 1e-3


def _layer_work(ivs, B, H, T, layer=1):
    plan = ProbePlan(B, 2, H, ivs)
    return _schedule.Schedule(plan, 0, "cpu").layer(layer)


def test_the_gathered_path_is_chosen_only_where_few_keys_are_left():
    B, H, T = 2, 4, 40
    heads = torch.zeros(B, 2, H, dtype=torch.bool)
    heads[:, 1, 0] = True
    every = torch.ones(B, T, dtype=torch.bool)
    image = torch.zeros(B, T, dtype=torch.bool)
    image[:, 4:36] = True  # 32 of 40 keys
    work = _layer_work([mask_keys(heads, every, image)], B, H, T)
    assert work.gathered is not None
    assert work.gathered.idx.tolist() == [[0, 1, 2, 3, 36, 37, 38, 39]] * 2  # the keys left, ascending
    assert torch.equal(work.gathered.bias, torch.zeros(2, 8))
    # a steer biases every image key finitely: every key is left
    target = image & (torch.arange(T) < 8)
    assert _layer_work([steer_keys(heads, every, target, image, 2.0)], B, H, T).gathered is None
    # half the keys hidden: the folded path (all rows of a full forward) is cheaper there
    half = torch.zeros(B, T, dtype=torch.bool)
    half[:, 10:30] = True
    work = _layer_work([mask_keys(heads, every, half)], B, H, T)
    assert work.gathered is None and work.folded_e == T
    # ... but not at some rows, where the alternative reads every key at those rows
    some = torch.zeros(B, T, dtype=torch.bool)
    some[:, 32:] = True
    assert _layer_work([mask_keys(heads, some, half)], B, H, T).gathered is not None
    # each batch row its own rows (items of different lengths): the rows each pair is acted on at are written
    ragged = some.clone()
    ragged[1, 32:34] = False
    work = _layer_work([mask_keys(heads, ragged, image)], B, H, T)
    assert work.gathered is not None and work.gathered.write.tolist() == [[True] * 8, [False] * 2 + [True] * 6]
    # two interventions acting on one pair at different rows: the pair sees other keys at each
    other = torch.zeros(B, T, dtype=torch.bool)
    other[:, 39] = True
    assert _layer_work([mask_keys(heads, some, image), mask_keys(heads, ragged, other)], B, H, T).gathered is None
    # a capture reads the weights over every key
    plan = ProbePlan(B, 2, H, [mask_keys(heads, every, image)], [_capture(B, T)])
    assert _schedule.Schedule(plan, 0, "cpu").layer(1).gathered is None


def _capture(B, T):
    from vheads.engine import Capture

    return Capture(torch.ones(B, T, dtype=torch.bool), torch.ones(B, 1, T, dtype=torch.bool))


def test_gathered_keys_of_a_shared_prefix_are_the_full_keys_there():
    g = torch.Generator().manual_seed(0)
    prefix = DynamicLayer()
    prefix.keys, prefix.values = torch.randn(2, 2, 7, 4, generator=g), torch.randn(2, 2, 7, 4, generator=g)
    prefix.is_initialized = True
    layer = _prefix.SharedPrefixLayer(prefix, [2, 1], [7, 5])
    with _prefix.suffix_pass():
        layer.update(torch.randn(3, 2, 3, 4, generator=g), torch.randn(3, 2, 3, 4, generator=g))
        k_full, v_full = layer.full()
        rows, kvh = torch.tensor([0, 2, 1]), torch.tensor([1, 0, 1])
        idx = torch.tensor([[0, 3, 7, 9], [1, 8, 2, 6], [9, 8, 7, 0]])
        k, v = layer.gather_keys(rows, kvh, idx)
    want_k = torch.stack([k_full[r, h, i] for r, h, i in zip(rows, kvh, idx)])
    want_v = torch.stack([v_full[r, h, i] for r, h, i in zip(rows, kvh, idx)])
    assert torch.equal(k, want_k) and torch.equal(v, want_v)
