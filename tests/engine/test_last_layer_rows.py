"""The last decoder layer on the read rows only (vheads.engine._last_layer_rows): the logits at the rows a
forward reads equal those of the unmodified model computing every row (whose per-row path
is checked against a hand-written softmax in tests/engine/test_engine.py), and the layer's
MLP really ran on the read rows only."""

import pytest
import torch

from vheads.engine import Batching, Engine, RowBatch, mask_keys, positions_mask
from vheads.engine._layers import decoder_layers
from tests.engine.test_layer_sharing import _plan
from tests.evaluation.test_cross_item import _items


def _mlp_rows(lm, seen):
    """Record the positions of every output of the last decoder layer's MLP (registered
    before the engine's hooks, so it sees the MLP's own output)."""
    mlp = decoder_layers(lm.model)[-1].mlp
    return mlp.register_forward_hook(lambda m, a, out: seen.append((out[0] if isinstance(out, tuple) else out).shape[1]))


def _load(loaded, family):
    if family == "tiny":
        from vheads.models import load_model

        return load_model("tiny")
    return loaded[family]


@pytest.mark.parametrize("family", ["tiny", "qwen3_vl", "llava",
                                    *(pytest.param(f, marks=pytest.mark.slow) for f in
                                      ("qwen2_5_vl", "qwen3_vl_moe", "qwen3_5", "gemma3", "gemma4", "glm4v", "internvl", "idefics3"))])
def test_read_rows_give_the_logits_of_every_row_computed(loaded, family):
    lm = _load(loaded, family)
    eng = Engine(lm)
    att = lm.attention_layers
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    batch = RowBatch(prompts, [3, 2, 2], [0, 0, 0]) if lm.adapter.cross_item else RowBatch(prompts[:1], [7], [0])
    plan = _plan(eng, batch, [None if i is None else att[i] for i in (None, -1, 0, 1, -1, None, 0)])
    T = batch.length
    for read in ([T - 1], [T - 4, T - 1]):
        seen: list[int] = []
        hook = _mlp_rows(lm, seen)
        try:
            eng.batching = Batching(last_layer_rows=True)
            cut = eng.run(batch, plan, logits_at=read).logits
            eng.batching = Batching(last_layer_rows=False, share_layers=False)
            full = eng.run(batch, plan, logits_at=read).logits
        finally:
            hook.remove()
        assert seen[0] == len(read) and seen[-1] == T  # the cut forward, then every row
        assert torch.isfinite(full).all()
        torch.testing.assert_close(cut, full, rtol=0, atol=1e-5)
        assert (full[1] - full[0]).abs().max() > 1e-4  # the plan acts: the test is not vacuous


def test_prefix_and_suffix_passes_read_one_row_each(loaded):
    """With a prefix cache, the prefix pass only fills the cache and the suffix pass reads the
    last row: each runs its last MLP on one row, and the logits are those of the whole model."""
    lm = loaded["qwen3_vl"]
    eng = Engine(lm)
    pr = lm.adapter.build(_items()[0], lm.processor)
    L, H = eng.shape
    heads = torch.zeros(3, L, H, dtype=torch.bool)
    heads[0, L - 1, 0] = heads[1, 0, 1] = heads[2, 1, 2] = True
    rows = positions_mask(pr.layout.n_tokens, pr.layout.spans["question"])[None].expand(3, -1)
    keys = positions_mask(pr.layout.n_tokens, pr.layout.image_positions)[None].expand(3, -1)
    plan = eng.plan(3, [mask_keys(heads, rows, keys)])
    out = {}
    for on in (True, False):
        seen: list[int] = []
        hook = _mlp_rows(lm, seen)
        try:
            eng.batching = Batching(last_layer_rows=on)
            out[on] = eng.forward(pr, plan, prefix_reuse=True, logits_at=[pr.layout.last]).logits
        finally:
            hook.remove()
        split = plan.first_row()
        assert seen == ([1, 1] if on else [split, pr.layout.n_tokens - split])
    torch.testing.assert_close(out[True], out[False], rtol=0, atol=1e-5)


def test_a_capture_runs_every_row(loaded):
    """A capture reads the queries of its rows in every layer: the last layer is not cut."""
    lm = loaded["qwen3_vl"]
    pr = lm.adapter.build(_items()[1], lm.processor)
    T = pr.layout.n_tokens
    request = (pr, {"q": positions_mask(T, pr.layout.spans["question"])}, positions_mask(T, pr.layout.image_positions)[None])
    res = {}
    for on in (True, False):
        seen: list[int] = []
        hook = _mlp_rows(lm, seen)
        try:
            res[on] = Engine(lm, Batching(last_layer_rows=on)).capture_many([request])[0]["q"]
        finally:
            hook.remove()
        assert seen == [T]
    torch.testing.assert_close(res[True], res[False], rtol=0, atol=0)
    assert res[True][-1].sum() > 0  # the last layer's heads do attend to the image
