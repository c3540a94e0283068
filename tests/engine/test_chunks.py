"""A touched layer's fp32 working set is chunked by a byte budget (issue 34.9): with a budget
so small that every chunk holds one pair and one row, the folded path, the per-row mask
path, the explicit softmax of captures and the capture-only path give the unchunked result,
and a hand-written softmax."""

import math

import pytest
import torch

from tests.engine.test_attention_masks import _hand_written, _inputs, _Layer
from vheads.engine import Capture, ProbePlan, _attention, _schedule, active_plan, mask_keys, steer_keys, vheads_attention

B, H, Hkv, T, D, L = 2, 4, 2, 9, 8, 2
SCALE = D ** -0.5


def _plan(rows_from: int, capture: bool, intervene: bool = True) -> ProbePlan:
    heads = torch.zeros(B, L, H, dtype=torch.bool)
    heads[0, 1, [0, 3]] = True
    heads[1, 1, 1:] = True
    rows = torch.zeros(B, T, dtype=torch.bool)
    rows[:, rows_from:] = True
    hidden = torch.zeros(B, T, dtype=torch.bool)
    hidden[:, 1:3] = True
    target = torch.zeros(B, T, dtype=torch.bool)
    target[:, 6] = True
    ivs = [mask_keys(heads, rows, hidden), steer_keys(heads, rows, target, ~hidden & (torch.arange(T) >= 4), 1.5)] if intervene else []
    groups = torch.stack([hidden, target, torch.ones(B, T, dtype=torch.bool)], 1)  # [B, 3, T]
    caps = [Capture(torch.arange(T)[None].expand(B, T) >= 5, groups)] if capture else []
    return ProbePlan(B, L, H, ivs, caps)


def _run(plan, mask):
    q, k, v = _inputs(B, H, Hkv, T, D, seed=5)
    with active_plan(plan) as results:
        out, _ = vheads_attention(_Layer(1, H // Hkv), q, k, v, mask, scaling=SCALE)
        caps = {n: r.clone() for n, r in results.items()}
    return out, caps


def _by_hand(plan: ProbePlan, valid: torch.Tensor):
    """Per (batch row, head): the hand-written softmax under causal ∧ valid keys and each
    acting intervention's key bias at its rows. Output [B, T, H, D] and per-row weights."""
    q, k, v = _inputs(B, H, Hkv, T, D, seed=5)
    out = torch.zeros(B, T, H, D)
    weights = torch.zeros(B, H, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for b in range(B):
        for h in range(H):
            for i in range(T):
                bias = torch.zeros(T)
                for iv in plan.interventions:
                    if iv.heads[b, 1, h] and iv.rows[b, i]:
                        bias = bias + iv.key_bias[b]
                logits = [float(q[b, h, i] @ k[b, h // 2, j]) * SCALE + float(bias[j]) for j in range(T)]
                keep = [j for j in range(T) if causal[i, j] and valid[b, j] and logits[j] != -math.inf]
                if not keep:
                    continue
                m = max(logits[j] for j in keep)
                z = sum(math.exp(logits[j] - m) for j in keep)
                for j in keep:
                    weights[b, h, i, j] = math.exp(logits[j] - m) / z
                out[b, i, h] = weights[b, h, i] @ v[b, h // 2]
    return out, weights


@pytest.mark.parametrize("rows_from,capture,intervene", [(0, False, True), (4, False, True), (4, True, True), (0, True, False)])
def test_a_tiny_byte_budget_gives_the_unchunked_result_and_a_hand_softmax(rows_from, capture, intervene, monkeypatch):
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, 3] = False  # a padded key of batch row 1
    mask = (torch.ones(T, T, dtype=torch.bool).tril()[None] & valid[:, None, :])[:, None]  # [B, 1, T, T]
    plan = _plan(rows_from, capture, intervene)
    whole, whole_caps = _run(plan, mask)
    calls = {"pairs": [], "folded": 0}
    pair_chunks, folded_rows = _schedule.pair_chunks, _attention._folded_rows
    monkeypatch.setattr(_schedule, "CHUNK_BYTES", 1)
    monkeypatch.setattr(_attention, "pair_chunks", lambda *a: calls["pairs"].append(pair_chunks(*a)) or calls["pairs"][-1])
    chunked, chunked_caps = _run(plan, mask)
    if intervene:  # one pair per chunk (a capture: one batch row of H pairs)
        assert calls["pairs"] and all(s.stop - s.start == (H if capture else 1) for s in calls["pairs"][-1])
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-6)
    for name in whole_caps:
        torch.testing.assert_close(chunked_caps[name], whole_caps[name], rtol=0, atol=1e-6)
    want, weights = _by_hand(plan, valid)
    rows = valid  # a padded row's output is read by no real row
    for b in range(B):
        assert torch.allclose(chunked[b, rows[b]], want[b, rows[b]], atol=1e-5)
    if capture:
        c = plan.captures[0]
        mass = torch.einsum("bhqt,bgt->bhqg", weights, c.groups.float())  # [B, H, T, G]
        hand = (mass * c.rows[:, None, :, None]).sum(2) / c.rows.sum(1)[:, None, None]
        assert torch.allclose(chunked_caps[c.name][:, 1], hand, atol=1e-5)
