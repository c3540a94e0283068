"""The CPU path for short prompts (vheads.engine._short_attention) against a hand softmax."""

import pytest
import torch

from tests.engine.reference import hand_gqa_attention
from vheads.engine import _attention, _short_attention
from vheads.engine._short_attention import MAX_KEYS, applies, short_attention, short_pairs


def _qkv(B, H, Hkv, Tq, Tk, D, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, Tq, D, generator=g), torch.randn(B, Hkv, Tk, D, generator=g), torch.randn(B, Hkv, Tk, D, generator=g))


def _expected(q, k, v, keep, scale):
    """The hand softmax, with a row that sees no key attending nowhere: [B, H, Tq, D]."""
    ref = hand_gqa_attention(q, k, v, keep, scale).transpose(1, 2)
    seen = keep.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2]).any(-1, keepdim=True)
    return torch.where(seen, ref.nan_to_num(), 0.0)


@pytest.mark.parametrize("B,H,Hkv,T", [(3, 16, 4, 28), (130, 4, 2, 9), (2, 6, 6, 17)])
def test_short_attention_under_a_padding_mask_is_the_hand_softmax(B, H, Hkv, T):
    q, k, v = _qkv(B, H, Hkv, T, T, 8, seed=B)
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[0, :3] = False  # left padding: rows 0-2 of batch row 0 see no key at all
    valid[-1, 5] = False
    keep = (torch.ones(T, T, dtype=torch.bool).tril()[None] & valid[:, None, :])[:, None]  # [B, 1, T, T]
    out = short_attention(q, k, v, keep, 8 ** -0.5, causal=True)
    assert torch.allclose(out.double(), _expected(q, k, v, keep, 8 ** -0.5), atol=1e-6)
    assert torch.equal(out[0, :, :3], torch.zeros_like(out[0, :, :3]))


def test_short_attention_without_a_mask_is_causal_or_sees_every_key():
    q, k, v = _qkv(5, 8, 2, 12, 12, 8, seed=1)
    tril = torch.ones(12, 12, dtype=torch.bool).tril()
    assert torch.allclose(short_attention(q, k, v, None, 0.3, causal=True).double(), _expected(q, k, v, tril, 0.3), atol=1e-6)
    every = torch.ones(12, 12, dtype=torch.bool)
    assert torch.allclose(short_attention(q, k, v, None, 0.3, causal=False).double(), _expected(q, k, v, every, 0.3), atol=1e-6)
    with pytest.raises(ValueError):
        short_attention(q[:, :, :4], k, v, None, 0.3, causal=True)


def test_short_attention_reads_a_mask_shared_by_every_batch_row_and_suffix_rows():
    q, k, v = _qkv(4, 8, 4, 3, 10, 8, seed=2)  # 3 query rows over 10 keys (a prefix before them)
    keep = torch.ones(1, 1, 3, 10, dtype=torch.bool)
    keep[..., 7:] = torch.ones(3, 3, dtype=torch.bool).tril()
    keep[..., 1] = False
    assert torch.allclose(short_attention(q, k, v, keep, 0.5, causal=True).double(), _expected(q, k, v, keep, 0.5), atol=1e-6)


def test_short_pairs_is_a_causal_softmax_under_the_key_bias():
    g = torch.Generator().manual_seed(4)
    P, e, D = 300, 11, 8  # more pairs than one chunk holds when the budget is small
    q, k, v = (torch.randn(P, e, D, generator=g) for _ in range(3))
    bias = torch.randn(P, e, generator=g)
    bias[::7, 2:5] = -1e9
    logits = (q.double() @ k.double().transpose(-1, -2)) * 0.35 + bias.double()[:, None, :]
    logits = logits.masked_fill(~torch.ones(e, e, dtype=torch.bool).tril(), float("-inf"))
    w = torch.exp(logits - logits.amax(-1, keepdim=True))
    want = (w / w.sum(-1, keepdim=True)) @ v.double()
    old = _short_attention.CHUNK_LOGITS
    try:
        _short_attention.CHUNK_LOGITS = 5 * e * e
        got = short_pairs(q, k, v, bias, 0.35)
    finally:
        _short_attention.CHUNK_LOGITS = old
    assert torch.allclose(got.double(), want, atol=1e-6)


def test_the_path_is_taken_only_where_it_applies():
    q, k, v = _qkv(2, 4, 2, 9, 9, 8, seed=0)
    assert applies(q, k, None, 0.0)
    assert not applies(q, k, None, 0.1)  # dropout
    assert not applies(q.double(), k.double(), None, 0.0)
    assert not applies(q[:, :, :1], k, None, 0.0)  # one query row (decoding)
    long_q, long_k, _ = _qkv(1, 4, 2, MAX_KEYS + 1, MAX_KEYS + 1, 8, seed=0)
    assert not applies(long_q, long_k, None, 0.0)
    assert not applies(q, k, torch.zeros(2, 1, 9, 9), 0.0)  # an additive mask


class _Layer(torch.nn.Module):
    def __init__(self, groups):
        super().__init__()
        self.layer_idx, self.num_key_value_groups, self.is_causal = 0, groups, True


@pytest.mark.parametrize("T", [9, MAX_KEYS + 5])
def test_plain_attention_agrees_with_transformers_on_either_side_of_the_limit(T, monkeypatch):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    calls = []
    original = _attention.short_attention
    monkeypatch.setattr(_attention, "short_attention", lambda *a: calls.append(1) or original(*a))
    q, k, v = _qkv(3, 8, 2, T, T, 8, seed=T)
    for mask in (None, (torch.ones(T, T, dtype=torch.bool).tril()[None, None] & torch.rand(3, 1, 1, T).ge(0.2))):
        out, _ = _attention.plain_attention(_Layer(4), q, k, v, mask, scaling=8 ** -0.5)
        ref, _ = sdpa_attention_forward(_Layer(4), q, k, v, mask, scaling=8 ** -0.5)
        assert torch.allclose(out, ref.nan_to_num(), atol=1e-6)
    assert len(calls) == (2 if T <= MAX_KEYS else 0)
