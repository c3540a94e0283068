"""Layer-prefix sharing: a decoder layer run once per distinct hidden state gives the logits
of running it on every batch row (the per-row path is checked against a hand-written
softmax in tests/engine/test_engine.py)."""


import numpy as np
import pytest
import torch

from vheads.engine import Batching, Engine, Intervention, RowBatch, mask_keys, positions_mask, steer_keys
from vheads.engine._layers import decoder_layers, distinct_rows
from tests.evaluation.test_cross_item import _items


def test_distinct_rows_keeps_acted_rows_and_one_idle_row_per_item():
    rng = np.random.default_rng(1)
    for _ in range(50):
        B, U, L = int(rng.integers(1, 12)), int(rng.integers(1, 4)), 4
        items = torch.as_tensor(np.sort(rng.integers(0, U, B)))
        first = torch.as_tensor(rng.integers(0, L + 1, B))
        for layer in range(L):
            cut = distinct_rows(first, items, layer)
            # by hand: row b reads itself when acted on at or below the layer, else the first
            # idle row of its item
            reads = []
            for b in range(B):
                if first[b] <= layer:
                    reads.append(b)
                else:
                    reads.append(min(c for c in range(B) if items[c] == items[b] and first[c] > layer))
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
    # by hand: a layer computes the rows acted on at or below it and one idle row per item
    expect = [sum(f is not None and f <= layer for f in firsts) + len({u for u, f in zip(items, firsts) if f is None or f > layer})
              for layer in (0, lm.n_layers - 1)]
    if lm.adapter.rows_independent_layers:
        assert expect[0] < batch.n_rows  # the test is not vacuous
    else:  # the family's layers read other layers' rows (Gemma 4's KV sharing): it opts out
        expect = [batch.n_rows] * 2
    seen = []
    layers = decoder_layers(lm.model)
    # a forward hook registered first sees the layer's own output, before it is gathered
    hooks = [layers[i].register_forward_hook(lambda m, a, out: seen.append(_rows(out))) for i in (0, lm.n_layers - 1)]
    try:
        shared = _logits(eng, batch, plan, True)
        plain = _logits(eng, batch, plan, False)
    finally:
        for h in hooks:
            h.remove()
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
