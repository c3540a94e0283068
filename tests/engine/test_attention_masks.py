"""The attention function accepts the masks transformers passes: None (causal), boolean, additive."""

import torch

from vheads.engine import ProbePlan, active_plan, mask_keys, vheads_attention


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
