"""The vision tower's output kept across forwards (:mod:`vheads.engine._vision_cache`): a
forward of images already seen runs no tower and gives the logits a fresh tower gives; the
segments and their join match a hand-made split and repeat; nothing is kept under autograd;
the byte limit evicts the oldest image first."""

import pytest
import torch

from vheads.engine import Batching, Engine, RowBatch
from vheads.engine._vision_cache import VisionCache, join, pixel_key, segments


def _counted(lm, monkeypatch):
    """Count the vision tower's forwards: an instance forward (the engine's wrapper calls
    whatever forward the module has, and puts it back)."""
    vision = lm.adapter.vision_module(lm.model)
    calls, forward = [], vision.forward

    def counting(*a, **k):
        calls.append(1)
        return forward(*a, **k)

    monkeypatch.setattr(vision, "forward", counting)
    return calls


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava"])
def test_kept_images_run_no_tower_and_give_the_same_logits(loaded, family, monkeypatch):
    from tests.evaluation.test_cross_item import _items

    lm = loaded[family]
    items = _items()[:3]
    fresh = Engine(lm, Batching(vision_cache=False))
    kept = Engine(lm)
    prompts = [lm.adapter.build(it, lm.processor) for it in items]
    calls = _counted(lm, monkeypatch)
    first = RowBatch(prompts[:2], [3, 2], [0, 0])
    again = RowBatch([prompts[1], prompts[0]], [1, 2], [0, 0])  # the same images, other order and counts
    mixed = RowBatch([prompts[0], prompts[2]], [2, 2], [0, 0])  # one image not seen yet
    for batch, tower_runs in [(first, 1), (again, 0), (mixed, 1)]:
        calls.clear()
        got = kept.run(batch, None, logits_at=[batch.length - 1]).logits
        assert len(calls) == tower_runs
        want = fresh.run(batch, None, logits_at=[batch.length - 1]).logits
        assert torch.allclose(got, want, atol=1e-5, rtol=0)
    assert kept.vision_cache.hits == 1 and kept.vision_cache.misses == 2
    # the prompts of another build (equal pixels, new objects) are the same images
    rebuilt = [lm.adapter.build(it, lm.processor) for it in items[:2]]
    calls.clear()
    kept.run(RowBatch(rebuilt, [1, 1], [0, 0]), None, logits_at=[0])
    assert not calls


def test_nothing_is_kept_under_autograd(loaded):
    from tests.evaluation.test_cross_item import _items

    lm = loaded["qwen2_5_vl"]
    eng = Engine(lm)
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()[:2]]
    batch = RowBatch(prompts, [2, 2], [0, 0])
    inputs = eng._inputs(batch, "full")
    vision = lm.adapter.vision_module(lm.model)
    for grad, kept in [(True, 0), (False, 2)]:  # AtP's forward + backward runs the shared pass with autograd on
        with torch.set_grad_enabled(grad), eng._shared_vision(batch):
            vision(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"])
        assert len(eng.vision_cache.entries) == kept


def test_segments_and_join_match_a_hand_split_and_repeat():
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    g = torch.Generator().manual_seed(0)
    counts = [2, 1, 3]
    flat = torch.randn(24, 5, generator=g)  # two rows a token: outputs flat over patches (Qwen-VL)
    per_image = torch.randn(3, 7, generator=g)  # one row an image (LLaVA), images of equal token counts
    for weights, bounds, image_rows in [([4, 2, 6], [0, 8, 12, 24], None), ([4, 4, 4], [0, 8, 16, 24], per_image)]:
        out = BaseModelOutputWithPooling(last_hidden_state=flat, pooler_output=image_rows)
        segs = segments((out, [flat], {"x": flat}, torch.tensor(1.5)), weights)
        assert len(segs) == 3
        for u, seg in enumerate(segs):
            assert torch.equal(seg[0].last_hidden_state, flat[bounds[u]: bounds[u + 1]])
            assert torch.equal(seg[1][0], flat[bounds[u]: bounds[u + 1]]) and torch.equal(seg[2]["x"], flat[bounds[u]: bounds[u + 1]])
            if image_rows is not None:
                assert torch.equal(seg[0].pooler_output, per_image[u: u + 1])
        joined = join(segs, counts)
        want = torch.cat([flat[bounds[u]: bounds[u + 1]] for u in range(3) for _ in range(counts[u])])
        assert torch.equal(joined[0].last_hidden_state, want) and torch.equal(joined[1][0], want) and torch.equal(joined[2]["x"], want)
        assert float(joined[3]) == 1.5
        if image_rows is not None:
            assert torch.equal(joined[0].pooler_output, per_image[[0, 0, 1, 2, 2, 2]])
        assert joined[0].last_hidden_state.data_ptr() != flat.data_ptr()  # copies, never the kept tensors
    with pytest.raises(ValueError, match="cannot be split"):
        segments(torch.zeros(5, 2), [2, 1])


def test_the_byte_limit_evicts_the_least_recently_used_image():
    cache = VisionCache(max_bytes=3 * 40)
    for k in (b"a", b"b", b"c"):
        cache.put(k, torch.zeros(10))  # 40 bytes each
    assert cache.get_all([b"a"]) is not None  # a is now the most recent
    cache.put(b"d", torch.zeros(10))
    assert set(cache.entries) == {b"a", b"c", b"d"} and cache.bytes == 120
    cache.put(b"big", torch.zeros(31))  # larger than the whole limit: not kept
    assert b"big" not in cache.entries
    assert cache.get_all([b"a", b"b"]) is None  # one missing: a miss


def test_pixel_key_follows_the_pixels_not_the_object():
    class P:
        def __init__(self, x):
            self.inputs = {"pixel_values": x, "input_ids": torch.tensor([[1, 2]])}

    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert pixel_key(P(x), ["pixel_values"]) == pixel_key(P(x.clone()), ["pixel_values"])
    y = x.clone()
    y[2, 3] += 1e-6
    assert pixel_key(P(x), ["pixel_values"]) != pixel_key(P(y), ["pixel_values"])
    assert pixel_key(P(x), ["pixel_values"]) != pixel_key(P(x.reshape(4, 3)), ["pixel_values"])
    assert pixel_key(P(x.bfloat16()), ["pixel_values"]) != pixel_key(P(x), ["pixel_values"])
