"""The shared-prefix suffix pass: attention over an un-copied prefix plus each row's suffix keys
equals a hand-written softmax over the full keys, and falls back where it does not apply."""

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from tests.engine.reference import hand_gqa_attention
from vheads.engine import _prefix


def _case(counts=(3, 2), splits=(7, 5), suffixes=(4, 2), H=4, Hkv=2, D=8, seed=0):
    """Two items (prefixes of 7 and 5 real positions padded to P = 7, suffixes of 4 and 2
    right-aligned in S = 4) as the runner lays them out: the prefix cache, the suffix
    queries and keys, and the model's mask [B, 1, S, P + S]."""
    g = torch.Generator().manual_seed(seed)
    U, B, P, S = len(counts), sum(counts), max(splits), max(suffixes)
    prefix = DynamicLayer()
    prefix.keys, prefix.values = torch.randn(U, Hkv, P, D, generator=g), torch.randn(U, Hkv, P, D, generator=g)
    prefix.is_initialized = True
    q = torch.randn(B, H, S, D, generator=g)
    ks, vs = torch.randn(B, Hkv, S, D, generator=g), torch.randn(B, Hkv, S, D, generator=g)
    mask = torch.zeros(B, 1, S, P + S, dtype=torch.bool)
    b = 0
    for n, split, s in zip(counts, splits, suffixes):
        for _ in range(n):
            for j in range(S - s, S):  # real rows: the last s; each sees its prefix and its suffix up to itself
                mask[b, 0, j, :split] = True
                mask[b, 0, j, P + S - s : P + j + 1] = True
            b += 1
    return prefix, q, ks, vs, mask


def _full_keys(prefix, ks, vs, counts):
    reps = torch.tensor(counts)
    return (torch.cat([prefix.keys.repeat_interleave(reps, 0), ks], 2), torch.cat([prefix.values.repeat_interleave(reps, 0), vs], 2))


@pytest.mark.parametrize("counts,splits,suffixes,chunked", [((3, 2), (7, 5), (4, 2), False), ((5,), (6,), (3,), False),
                                                             ((3, 2), (7, 5), (4, 2), True)])
def test_shared_prefix_attention_equals_a_hand_softmax_over_the_full_keys(counts, splits, suffixes, chunked, monkeypatch):
    if chunked:  # one row per fused call
        monkeypatch.setattr(_prefix, "CHUNK_ELEMENTS", 1)
    prefix, q, ks, vs, mask = _case(counts, splits, suffixes)
    layer = _prefix.SharedPrefixLayer(prefix, list(counts), list(splits))
    with _prefix.suffix_pass():
        k_ret, _ = layer.update(ks, vs)
        assert _prefix.owner(k_ret) is layer and _prefix.owner(ks.clone()) is None
        assert layer.get_seq_length() == max(splits) + max(suffixes)
        out = layer.attend(q, mask, 8 ** -0.5)
        k_full, v_full = layer.full()
    assert _prefix.owner(k_ret) is None  # forgotten after the pass
    assert out is not None and out.shape == (q.shape[0], q.shape[2], q.shape[1], q.shape[3])
    k_ref, v_ref = _full_keys(prefix, ks, vs, list(counts))
    assert torch.equal(k_full, k_ref) and torch.equal(v_full, v_ref)
    ref = hand_gqa_attention(q, k_ref, v_ref, mask, 8 ** -0.5)
    real = mask.any(-1)[:, 0]  # [B, S]: padded query rows are read by no real row
    assert torch.allclose(out.double()[real], ref[real], atol=1e-5)
    assert torch.isfinite(out).all()  # padded rows stay finite: their keys are read with weight 0


def test_a_mask_that_is_not_the_items_own_prefix_falls_back():
    counts, splits = [3, 2], [7, 5]
    prefix, q, ks, vs, mask = _case(counts, splits)
    window = mask.clone()
    window[..., :2] = False  # a sliding window: the first prefix keys leave the real rows' view
    layer = _prefix.SharedPrefixLayer(prefix, counts, splits)
    with _prefix.suffix_pass():
        layer.update(ks, vs)
        assert layer.attend(q, window, 8 ** -0.5) is None
        assert layer.attend(q, window.float(), 8 ** -0.5) is None  # an additive mask: not this path either
        assert layer.attend(q, mask, 8 ** -0.5) is not None


def test_a_cache_layer_serves_one_suffix_pass():
    prefix, q, ks, vs, mask = _case()
    layer = _prefix.SharedPrefixLayer(prefix, [3, 2], [7, 5])
    with _prefix.suffix_pass():
        layer.update(ks, vs)
        with pytest.raises(RuntimeError, match="one suffix pass"):
            layer.update(ks, vs)


def test_pair_keys_are_the_full_keys_of_those_pairs():
    counts, splits = [3, 2], [7, 5]
    prefix, q, ks, vs, mask = _case(counts, splits)
    layer = _prefix.SharedPrefixLayer(prefix, counts, splits)
    with _prefix.suffix_pass():
        layer.update(ks, vs)
        rows, kv = torch.tensor([0, 2, 3, 4, 4]), torch.tensor([1, 0, 1, 0, 1])
        k, v = layer.pair_keys(rows, kv)
    k_ref, v_ref = _full_keys(prefix, ks, vs, counts)
    assert torch.equal(k, k_ref[rows, kv]) and torch.equal(v, v_ref[rows, kv])
