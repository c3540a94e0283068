"""The fused RMSNorm and the in-place rotary (vheads.engine._fast_ops) against transformers'
own forward (the same bits) and a hand-written formula; the tiny model's logits unchanged."""

import pytest
import torch
import transformers.models.qwen3_vl.modeling_qwen3_vl as qm

from vheads.data.synthetic import kind_items
from vheads.engine import Engine
from vheads.engine import _fast_ops as fo


def _norm(d, seed=0):
    torch.manual_seed(seed)
    m = qm.Qwen3VLTextRMSNorm(d, eps=1e-6)
    m.weight.data = torch.randn(d)
    return m


@pytest.mark.parametrize("shape", [(512, 21, 128), (3, 1, 128), (7, 5, 64)])
def test_fused_norm_is_bitwise_transformers_and_matches_a_hand_formula(shape):
    m = _norm(shape[-1])
    x = torch.randn(*shape) * 3
    with torch.no_grad():
        ours = fo.rms_norm_forward(m, x)
        theirs = qm.Qwen3VLTextRMSNorm.forward(m, x)
        xs = x.double()
        hand = m.weight.double() * xs / torch.sqrt((xs * xs).sum(-1, keepdim=True) / shape[-1] + 1e-6)
    assert torch.equal(ours, theirs)
    assert torch.allclose(ours.double(), hand, rtol=1e-5, atol=1e-6)
    # a transposed (non-contiguous) input too
    xt = torch.randn(shape[1], shape[0], shape[2]).transpose(0, 1)
    with torch.no_grad():
        assert torch.equal(fo.rms_norm_forward(m, xt), qm.Qwen3VLTextRMSNorm.forward(m, xt))


def test_fused_norm_keeps_transformers_forward_under_autograd_and_in_bf16():
    m = _norm(128)
    x = torch.randn(4, 3, 128, requires_grad=True)
    fo.rms_norm_forward(m, x).sum().backward()
    g = x.grad.clone()
    x.grad = None
    qm.Qwen3VLTextRMSNorm.forward(m, x).sum().backward()
    assert torch.equal(g, x.grad)
    mb = _norm(128).to(torch.bfloat16)
    xb = torch.randn(2, 3, 128, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(fo.rms_norm_forward(mb, xb), qm.Qwen3VLTextRMSNorm.forward(mb, xb))


def _original_rotary():
    rot = qm.apply_rotary_pos_emb
    return getattr(rot, "vheads_original", rot)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_is_bitwise_transformers_and_matches_a_rotation(dtype):
    torch.manual_seed(1)
    B, H, Hkv, T, D = 5, 16, 4, 21, 8
    q, k = torch.randn(B, H, T, D, dtype=dtype), torch.randn(B, Hkv, T, D, dtype=dtype)
    ang = torch.rand(B, T, D // 2) * 6.28
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
    fast = fo.make_rotary(_original_rotary())
    qo, ko = fast(q, k, cos, sin)
    qt, kt = _original_rotary()(q, k, cos, sin)
    assert torch.equal(qo, qt) and torch.equal(ko, kt)
    if dtype == torch.float32:  # each pair (x_i, x_{i+D/2}) turned by its angle: a complex product
        z = torch.complex(q[..., : D // 2].double(), q[..., D // 2:].double()) * torch.polar(torch.ones(B, T, D // 2).double(), ang[..., : D // 2].double())[:, None]
        assert torch.allclose(qo.double(), torch.cat([z.real, z.imag], -1), atol=1e-5)
    # under autograd transformers' own runs (same gradients)
    qg = q.float().requires_grad_()
    fast(qg, k.float(), cos.float(), sin.float())[0].sum().backward()
    g = qg.grad.clone()
    qg.grad = None
    _original_rotary()(qg, k.float(), cos.float(), sin.float())[0].sum().backward()
    assert torch.equal(g, qg.grad)


def test_tiny_model_logits_are_the_same_bits_with_and_without_the_fast_ops(tiny, monkeypatch):
    eng = Engine(tiny)
    norms = [m for m in tiny.model.modules() if "forward" in vars(m)]
    assert len(norms) == 2 * tiny.n_layers + 1  # input, post-attention per layer, and the final norm
    assert hasattr(qm.apply_rotary_pos_emb, "vheads_original")
    items = kind_items("strip-ordinal", 3, 5)
    prompts = [tiny.adapter.build(it, tiny.processor) for it in items]
    fast = [eng.forward(p, logits_at=[p.layout.last]).logits for p in prompts]
    monkeypatch.setattr(qm, "apply_rotary_pos_emb", qm.apply_rotary_pos_emb.vheads_original)
    for m in norms:
        monkeypatch.delattr(m, "forward")
    slow = [eng.forward(p, logits_at=[p.layout.last]).logits for p in prompts]
    assert all(torch.equal(a, b) for a, b in zip(fast, slow))


def test_switch_off_patches_nothing(monkeypatch):
    monkeypatch.setenv("VHEADS_FAST_OPS", "0")
    m = torch.nn.Sequential(_norm(128))
    assert fo.install(m) == 0 and "forward" not in vars(m[0])
    monkeypatch.setenv("VHEADS_FAST_OPS", "1")
    assert fo.install(m) == 1 and "forward" in vars(m[0])
    head = torch.nn.Sequential(_norm(8))  # a head-dim norm: not faster fused, left
    assert fo.install(head) == 0
