"""The attention function accepts the masks transformers passes: None (causal), boolean, additive."""

import math

import torch

from tests.engine.reference import hand_gqa_attention
from vheads.engine import ProbePlan, _attention, active_plan, mask_keys, steer_keys, vheads_attention


class _Layer(torch.nn.Module):
    def __init__(self, layer_idx, groups):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_key_value_groups = groups
        self.is_causal = True


def _inputs(B=2, H=4, Hkv=2, T=9, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g)
    k = torch.randn(B, Hkv, T, D, generator=g)
    v = torch.randn(B, Hkv, T, D, generator=g)
    return q, k, v


def _plan(B, L, H, T):
    heads = torch.zeros(B, L, H, dtype=torch.bool)
    heads[0, 1, 2] = True
    heads[1, 1, :] = True
    rows = torch.zeros(B, T, dtype=torch.bool)
    rows[:, 5:] = True
    keys = torch.zeros(B, T, dtype=torch.bool)
    keys[:, 1:4] = True
    return ProbePlan(B, L, H, [mask_keys(heads, rows, keys)])


def test_none_boolean_and_additive_masks_give_the_same_output():
    B, H, T = 2, 4, 9
    q, k, v = _inputs(B, H, 2, T)
    mod = _Layer(1, 2)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    bool_mask = causal[None, None].expand(B, 1, T, T)
    additive = torch.zeros(B, 1, T, T).masked_fill(~bool_mask, torch.finfo(torch.float32).min)
    with active_plan(_plan(B, 2, H, T)):
        a, _ = vheads_attention(mod, q, k, v, None, scaling=8 ** -0.5)
        b, _ = vheads_attention(mod, q, k, v, bool_mask, scaling=8 ** -0.5)
        c, _ = vheads_attention(mod, q, k, v, additive, scaling=8 ** -0.5)
    assert torch.allclose(a, b, atol=1e-6) and torch.allclose(a, c, atol=1e-6)
    # and the plan acted: head (1, 2) of row 0 at row 6 differs from plain attention
    plain, _ = vheads_attention(mod, q, k, v, bool_mask, scaling=8 ** -0.5)
    assert (a[0, 6, 2] - plain[0, 6, 2]).abs().max() > 1e-4
    assert torch.allclose(a[0, 6, 0], plain[0, 6, 0], atol=1e-6)  # untouched head


def test_hand_written_masked_softmax_for_one_head():
    B, H, T, D = 2, 4, 9, 8
    q, k, v = _inputs(B, H, 2, T, D, seed=1)
    mod = _Layer(1, 2)
    with active_plan(_plan(B, 2, H, T)):
        out, _ = vheads_attention(mod, q, k, v, None, scaling=D ** -0.5)
    # batch row 1, head 3 (KV head 1), query row 7: keys 1..3 hidden, causal up to 7
    logits = (q[1, 3, 7] @ k[1, 1].T) / D ** 0.5
    allowed = torch.arange(T) <= 7
    allowed[1:4] = False
    logits[~allowed] = float("-inf")
    want = torch.softmax(logits, -1) @ v[1, 1]
    assert torch.allclose(out[1, 7, 3], want, atol=1e-5)


def _hand_written(q, k, v, allowed, bias, scale):
    """softmax(q·kᵀ·scale + bias) · v over the allowed keys, one (row, head) at a time; a row
    with no key left attends nowhere (0). q [T, D], k/v [T, D], allowed [T, T], bias [T]."""
    T = q.shape[0]
    out = torch.zeros_like(q)
    for i in range(T):
        logits = [float(q[i] @ k[j]) * scale + float(bias[j]) for j in range(T)]
        keep = [j for j in range(T) if allowed[i, j] and logits[j] != float("-inf")]
        if not keep:
            continue
        m = max(logits[j] for j in keep)
        w = {j: math.exp(logits[j] - m) for j in keep}
        z = sum(w.values())
        out[i] = sum(w[j] / z * v[j] for j in keep)
    return out


def test_acting_at_every_row_equals_a_hand_written_softmax_with_padding(monkeypatch):
    """Mask and steer at every row of a full forward (the key bias folded into an extra key
    feature): equal to a hand-written softmax, with a padded key and rows left with no key."""
    B, H, Hkv, T, D = 2, 4, 2, 9, 8
    q, k, v = _inputs(B, H, Hkv, T, D, seed=3)
    mod = _Layer(1, 2)
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, 4] = False  # a padded position of batch row 1
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = (causal[None] & valid[:, None, :])[:, None]  # [B, 1, T, T], as transformers builds it
    heads = torch.zeros(B, 2, H, dtype=torch.bool)
    heads[0, 1, [0, 3]] = True
    heads[1, 1, 1] = True
    hidden = torch.zeros(B, T, dtype=torch.bool)
    hidden[0, :3] = True  # rows 0-2 of batch row 0 have no key left
    hidden[1, 6] = True
    every = torch.ones(B, T, dtype=torch.bool)
    target = torch.zeros(B, T, dtype=torch.bool)
    target[:, 7] = True
    plan = ProbePlan(B, 2, H, [mask_keys(heads, every, hidden), steer_keys(heads, every, target, ~hidden & (torch.arange(T) >= 5), 2.0)])
    calls = []
    original = _attention._folded_rows
    monkeypatch.setattr(_attention, "_folded_rows", lambda *a: calls.append(1) or original(*a))
    with active_plan(plan):
        out, _ = vheads_attention(mod, q, k, v, mask, scaling=D ** -0.5)
    assert calls  # the folded path ran
    for b, h in [(0, 0), (0, 3), (1, 1)]:
        bias = plan.interventions[0].key_bias[b] + plan.interventions[1].key_bias[b]
        allowed = causal & valid[b][None, :]
        want = _hand_written(q[b, h], k[b, h // 2], v[b, h // 2], allowed, bias, D ** -0.5)
        rows = valid[b]  # a padded row's output is read by no real row
        assert torch.allclose(out[b, rows, h], want[rows], atol=1e-5), (b, h)
    assert out[0, :3, 0].abs().max() == 0  # rows with every key hidden attend nowhere
    plain, _ = vheads_attention(mod, q, k, v, mask, scaling=D ** -0.5)
    assert torch.allclose(out[0, :, 1], plain[0, :, 1], atol=1e-6)  # an untouched head keeps sdpa's output


def test_only_a_causal_and_key_padding_mask_is_folded():
    T = 7
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    valid = torch.tensor([[1, 1, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    padded = (causal[None] & valid[:, None, :])[:, None]
    assert torch.equal(_attention._causal_keys(padded, T), valid)
    window = causal & (torch.arange(T)[None, :] > torch.arange(T)[:, None] - 3)  # sliding window of 3
    assert _attention._causal_keys(window[None, None], T) is None
    block = causal.clone()
    block[2:5, 2:5] = True  # a bidirectional image block
    assert _attention._causal_keys(block[None, None], T) is None
    assert _attention._causal_keys(torch.zeros(1, 1, T, T), T) is None  # additive masks take the general path


def test_plain_attention_reads_grouped_kv_heads_under_a_mask_as_a_hand_softmax_does():
    # the suffix rows of a prefix cache: 3 query rows over 9 keys, row 1's first two keys padding
    B, H, Hkv, T, D, tq = 2, 4, 2, 9, 8, 3
    q, k, v = _inputs(B, H, Hkv, T, D, seed=3)
    q = q[:, :, -tq:]
    keep = torch.ones(B, 1, tq, T, dtype=torch.bool)
    keep[..., T - tq :] = torch.ones(tq, tq, dtype=torch.bool).tril()
    keep[1, ..., :2] = False
    mod = _Layer(0, H // Hkv)
    out, _ = _attention.plain_attention(mod, q, k, v, keep, scaling=D ** -0.5)
    assert out.shape == (B, tq, H, D)
    assert torch.allclose(out.double(), hand_gqa_attention(q, k, v, keep, D ** -0.5), atol=1e-6)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # and as transformers' own function does

    ref, _ = sdpa_attention_forward(mod, q, k, v, keep, scaling=D ** -0.5)
    assert torch.allclose(out, ref, atol=1e-6)
