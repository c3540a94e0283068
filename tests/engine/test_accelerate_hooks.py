"""accelerate's device hooks survive the engine: the shared vision pass puts back an instance
forward it found (``device_map`` models carry one per module), and the results are unchanged."""

import pytest
import torch

accelerate = pytest.importorskip("accelerate")


def test_the_shared_vision_pass_keeps_accelerates_forward_hook(loaded):
    from accelerate.hooks import AlignDevicesHook, add_hook_to_module, remove_hook_from_module

    from tests.evaluation.test_cross_item import _items
    from vheads.engine import Batching, Engine, RowBatch

    lm = loaded["qwen2_5_vl"]
    eng = Engine(lm, Batching(vision_cache=False))  # every forward runs the tower (kept outputs would skip the hook)
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()[:2]]
    batch = RowBatch(prompts, [2, 2], [0, 0])  # two rows an item: the vision tower runs once per image
    want = eng.run(batch, None, logits_at=[batch.length - 1]).logits
    vision = lm.adapter.vision_module(lm.model)
    assert vision is not None
    add_hook_to_module(vision, AlignDevicesHook(execution_device=torch.device("cpu")))
    try:
        hooked = vision.__dict__["forward"]  # accelerate's wrapper, an instance attribute
        calls = []
        vision._hf_hook.pre_forward = (lambda pre: lambda m, *a, **k: calls.append(1) or pre(m, *a, **k))(vision._hf_hook.pre_forward)
        got = eng.run(batch, None, logits_at=[batch.length - 1]).logits
        assert vision.__dict__.get("forward") is hooked  # put back, not deleted
        assert calls  # and it ran inside the shared pass
        eng.run(batch, None, logits_at=[batch.length - 1])
        assert len(calls) == 2  # still in place for the next forward
    finally:
        remove_hook_from_module(vision)
    assert torch.allclose(got, want, atol=1e-5)
