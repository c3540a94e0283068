"""Answers in fp32: a bf16 model's option logits and log-sum-exp equal a float64 product of
the same final hidden state with the head's weight, in the engine and in AtP, on a CPU."""

import contextlib

import pytest
import torch

from tests.engine.test_engine import _item
from vheads.engine import Engine
from vheads.engine import _lm_head


@contextlib.contextmanager
def _bf16(lm):
    dtype = lm.model.dtype
    lm.model.to(torch.bfloat16)
    try:
        yield
    finally:
        lm.model.to(dtype)


def _hidden_spy(model) -> list:
    """Every input of the output embedding (the final hidden state), as it is."""
    seen = []
    handle = model.get_output_embeddings().register_forward_pre_hook(lambda m, args: seen.append(args[0].detach()))
    return seen, handle


def _reference_scores(hidden, head, ids) -> torch.Tensor:
    """The four letters' logits and the log-sum-exp over the vocabulary in float64: [B, 5]."""
    logits = hidden.double() @ head.weight.double().T  # [B, V]
    if head.bias is not None:
        logits = logits + head.bias.double()
    return torch.cat([logits[:, ids], torch.logsumexp(logits, -1, keepdim=True)], -1)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava"])
def test_a_bf16_models_answers_are_computed_in_fp32_from_the_hidden_state(loaded, family):
    lm = loaded[family]
    eng = Engine(lm)
    prompt = lm.adapter.build(_item(), lm.processor)
    ids = lm.adapter.letter_token_ids(lm.processor)
    head = lm.model.get_output_embeddings()
    with _bf16(lm):
        assert _lm_head.head_needs_fp32(head)
        seen, handle = _hidden_spy(lm.model)
        try:
            got = eng.letter_scores(eng.forward(prompt, logits_at=[prompt.layout.n_tokens - 1]).logits[:, -1]).double()
            plain = lm.model(**{k: v for k, v in eng._inputs(_one(prompt), "full").items()}, logits_to_keep=1).logits[:, -1]
        finally:
            handle.remove()
        want = _reference_scores(seen[0][:, -1], head, ids)
        bf16 = torch.cat([plain[:, ids].double(), torch.logsumexp(plain.double(), -1, keepdim=True)], -1)
    assert (got - want).abs().max() <= 1e-5 * max(1.0, want.abs().max().item())
    assert (bf16 - want).abs().max() > 10 * (got - want).abs().max()  # the bf16 head's rounding is what was removed


def _one(prompt):
    from vheads.engine import RowBatch

    return RowBatch([prompt], [1], [0])


def test_an_fp32_head_is_left_alone(loaded):
    lm = loaded["qwen2_5_vl"]
    head = lm.model.get_output_embeddings()
    assert head.weight.dtype == torch.float32 and not _lm_head.head_needs_fp32(head)
    with _lm_head.fp32_logits(lm.model):
        assert not head._forward_hooks  # no hook: the model's own fp32 product


def test_the_fp32_product_in_vocabulary_chunks_equals_one_product(monkeypatch):
    g = torch.Generator().manual_seed(0)
    h, w, b = torch.randn(3, 2, 16, generator=g).bfloat16(), torch.randn(50, 16, generator=g).bfloat16(), torch.randn(50, generator=g)
    monkeypatch.setattr(_lm_head, "VOCAB_CHUNK", 7)
    got = _lm_head.fp32_product(h, w, b)
    want = h.double() @ w.double().T + b.double()
    assert got.dtype == torch.float32 and got.shape == (3, 2, 50)
    assert (got.double() - want).abs().max() <= 1e-5


def test_atp_metrics_of_a_bf16_model_are_fp32(loaded):
    from vheads.causal._atp import scaled_ablation

    lm = loaded["qwen2_5_vl"]
    eng = Engine(lm)
    prompt = lm.adapter.build(_item(), lm.processor)
    ids = lm.adapter.letter_token_ids(lm.processor)
    head = lm.model.get_output_embeddings()
    L, H = eng.shape
    with _bf16(lm):
        seen, handle = _hidden_spy(lm.model)
        try:
            alpha = torch.zeros(1, L, H, requires_grad=True)
            m, grad = scaled_ablation(eng, [prompt], [0], alpha, metric="logprob", checkpoint=False)
        finally:
            handle.remove()
        want = _reference_scores(seen[0][:, -1], head, ids)
    assert grad is not None and grad.dtype == torch.float32
    assert abs(m.double().item() - (want[0, 0] - want[0, 4]).item()) <= 1e-5 * max(1.0, want.abs().max().item())
