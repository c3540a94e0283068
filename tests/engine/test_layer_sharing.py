"""Layer-prefix sharing: a decoder layer run once per distinct hidden state gives the logits
of running it on every batch row (the per-row path is checked against a hand-written
softmax in tests/engine/test_engine.py)."""


import numpy as np
import pytest
import torch

from vheads.engine import Batching, Engine, Intervention, ProbePlan, RowBatch, mask_keys, positions_mask, steer_keys
from vheads.engine._layers import decoder_layers, distinct_rows
from tests.evaluation.test_cross_item import _items


def test_distinct_rows_group_rows_by_item_action_and_heads_up_to_the_layer():
    rng = np.random.default_rng(1)
    for _ in range(60):
        B, U, L, H = int(rng.integers(1, 14)), int(rng.integers(1, 4)), 4, 3
        T = 6
        items = torch.as_tensor(np.sort(rng.integers(0, U, B)))
        # few distinct heads and actions, so that groups form
        heads = torch.as_tensor(rng.random((B, L, H)) < 0.15)
        pool_rows = torch.as_tensor(rng.random((2, T)) < 0.7)
        pool_bias = torch.as_tensor(np.where(rng.random((2, T)) < 0.4, -np.inf, 0.0), dtype=torch.float32)
        a = torch.as_tensor(rng.integers(0, 2, B))
        plan = ProbePlan(B, L, H, [Intervention(heads, pool_rows[a], pool_bias[a])])
        for layer in range(L):
            cut = distinct_rows(plan, items, layer)

            # by hand: row b reads the first row of its item with the same heads in layers
            # 0..layer and, when it has any there, the same action
            def same(b, c):
                hb, hc = heads[b, : layer + 1], heads[c, : layer + 1]
                return (items[b] == items[c] and torch.equal(hb, hc)
                        and (not hb.any() or (torch.equal(pool_rows[a[b]], pool_rows[a[c]])
                                              and torch.equal(pool_bias[a[b]], pool_bias[a[c]]))))

            reads = [min(c for c in range(B) if same(b, c)) for b in range(B)]
            if len(set(reads)) == B:
                assert cut is None
                continue
            keep, src = cut
            assert keep.tolist() == sorted(set(reads))
            assert [keep[s].item() for s in src] == reads


def _plan(eng, batch, first_layers):
    """Row b masks the image from a head of layer ``first_layers[b]`` and one of the last
    attention layer (None: no action), at all rows; odd rows also steer onto the first
    region with small β."""
    L, H = eng.shape
    last = eng.lm.attention_layers[-1]
    T, B = batch.length, batch.n_rows
    heads = torch.zeros(B, L, H, dtype=torch.bool)
    for b, f in enumerate(first_layers):
        if f is not None:
            heads[b, f, b % H] = True
            heads[b, last, (b + 1) % H] = True
    prompts = [batch.prompts[int(u)] for u in batch.row_items()]
    image = torch.stack([batch.place(int(u), positions_mask(p.layout.n_tokens, p.layout.image_positions), False)
                         for u, p in zip(batch.row_items(), prompts)])  # [B, T]
    target = torch.stack([batch.place(int(u), positions_mask(p.layout.n_tokens, next(iter(p.layout.regions.values())).positions), False)
                          for u, p in zip(batch.row_items(), prompts)])  # [B, T]
    rows = torch.ones(B, T, dtype=torch.bool)
    steer_heads = heads & (torch.arange(B) % 2 == 1)[:, None, None]
    return eng.plan(B, [mask_keys(heads, rows, image), steer_keys(steer_heads, rows, target, image, 2.0)])


def _rows(out):
    return (out[0] if isinstance(out, tuple) else out).shape[0]


def _logits(eng, batch, plan, share):
    eng.batching = Batching(share_layers=share)
    return eng.run(batch, plan).logits


def _shared_and_plain(eng, batch, plan, watched):
    """The logits with sharing on, then off, and the rows each ``watched`` layer computed
    in both forwards (a forward hook registered first sees the layer's own output, before
    it is gathered)."""
    seen = []
    layers = decoder_layers(eng.lm.model)
    hooks = [layers[i].register_forward_hook(lambda m, a, out: seen.append(_rows(out))) for i in watched]
    try:
        shared = _logits(eng, batch, plan, True)
        plain = _logits(eng, batch, plan, False)
    finally:
        for h in hooks:
            h.remove()
    return seen, shared, plain


@pytest.mark.parametrize("family", ["tiny", "qwen3_vl", "qwen2_5_vl", "llava",
                                    *(pytest.param(f, marks=pytest.mark.slow) for f in ("qwen3_5", "gemma3", "gemma4", "internvl", "idefics3"))])
def test_shared_layers_give_the_logits_of_every_row_computed(loaded, family):
    if family == "tiny":
        from vheads.models import load_model

        lm = load_model("tiny")
    else:
        lm = loaded[family]
    eng = Engine(lm)
    att = lm.attention_layers  # the layers with heads (all but a hybrid model's linear-attention ones)
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    # mixed lengths, left padding; one prompt where the family batches one item per forward
    batch = RowBatch(prompts, [4, 3, 2], [0, 0, 0]) if lm.adapter.cross_item else RowBatch(prompts[:1], [9], [0])
    # idle rows, and rows acted on from the first, second or last attention layer
    firsts = [None if i is None else att[i] for i in (None, -1, 1, 0, -1, 1, None, 1, -1)]
    plan = _plan(eng, batch, firsts)
    items = batch.row_items().tolist()
    # by hand: a layer computes one row per item and heads acted on up to it (each item's
    # rows share their mask and steering target, so the heads decide)
    ivs = plan.interventions
    expect = [len({(u, *(tuple(iv.heads[b, : layer + 1].flatten().tolist()) for iv in ivs)) for b, u in enumerate(items)})
              for layer in (0, lm.n_layers - 1)]
    if lm.adapter.rows_independent_layers:
        assert expect[0] < batch.n_rows  # the test is not vacuous
    else:  # the family's layers read other layers' rows (Gemma 4's KV sharing): it opts out
        expect = [batch.n_rows] * 2
    seen, shared, plain = _shared_and_plain(eng, batch, plan, (0, lm.n_layers - 1))
    assert seen == expect + [batch.n_rows] * 2
    assert torch.isfinite(plain).all()
    torch.testing.assert_close(shared, plain, rtol=0, atol=1e-5)
    # the acted rows really differ from the idle row of their item
    assert (plain[1] - plain[0]).abs().max() > 1e-4


def test_no_sharing_with_a_prefix_cache_or_a_capture(loaded):
    """Prefix reuse and captures run every row through every layer (module docstring)."""
    lm = loaded["qwen3_vl"]
    eng = Engine(lm, Batching(share_layers=True))
    pr = lm.adapter.build(_items()[0], lm.processor)
    seen = []
    hook = decoder_layers(lm.model)[0].register_forward_hook(lambda m, a, out: seen.append(_rows(out)))
    try:
        L, H = eng.shape
        heads = torch.zeros(3, L, H, dtype=torch.bool)
        heads[:, L - 1, 0] = True
        rows = positions_mask(pr.layout.n_tokens, pr.layout.spans["last"])[None].expand(3, -1)
        keys = positions_mask(pr.layout.n_tokens, pr.layout.image_positions)[None].expand(3, -1)
        eng.forward(pr, eng.plan(3, [mask_keys(heads, rows, keys)]), prefix_reuse=True)
    finally:
        hook.remove()
    assert seen == [1, 3]  # the prefix pass (one row), then the suffix of every row


@pytest.mark.parametrize("family", ["tiny", "qwen3_vl", pytest.param("gemma3", marks=pytest.mark.slow)])
def test_rows_acting_alike_up_to_a_layer_share_it(loaded, family):
    """Rows of one item whose head-sets agree in the lower layers (as layer-matched draws do)
    and differ above: the lower layers run once for them, the logits are those of every row
    computed, and rows with another action (steering onto another region) do not share."""
    if family == "tiny":
        from vheads.models import load_model

        lm = load_model("tiny")
    else:
        lm = loaded[family]
    eng = Engine(lm)
    L, H = eng.shape
    att = lm.attention_layers
    pr = lm.adapter.build(_items()[0], lm.processor)
    batch = RowBatch([pr], [6], [0])
    T = batch.length
    heads = torch.zeros(6, L, H, dtype=torch.bool)
    heads[:, att[0], 0] = True  # every row: head 0 of the first attention layer
    for b in range(6):
        heads[b, att[-1], b % 3] = True  # rows b and b + 3 also agree in the last layer
    image = positions_mask(T, pr.layout.image_positions)[None].expand(6, -1)
    regions = list(pr.layout.regions.values())
    target = torch.stack([positions_mask(T, regions[0 if b < 3 else 1].positions) for b in range(6)])  # rows 3-5: another region
    plan = eng.plan(6, [steer_keys(heads, torch.ones(6, T, dtype=torch.bool), target, image, 2.0)])
    seen, shared, plain = _shared_and_plain(eng, batch, plan, (att[0], att[-1]))
    # first attention layer: one row per action (rows 0-2 alike, rows 3-5 alike); last: every row
    assert seen == [2, 6, 6, 6]
    torch.testing.assert_close(shared, plain, rtol=0, atol=1e-5)
    assert (plain[1] - plain[0]).abs().max() > 1e-4 and (plain[3] - plain[0]).abs().max() > 1e-4
