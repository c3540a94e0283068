"""Tiny random models see their images: two different images give different image-token
embeddings in every family (a model that embeds every image alike would let every pixel,
region and steering test pass whatever the layout does)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from tests.conftest import family_params
from vheads.data import Item
from vheads.doctor._pixels import lm_input_embeds
from vheads.models.tiny_random import FAMILY_BUILDERS, randomize_constant_weights


def _lm_input_embeds(lm, prompt) -> torch.Tensor:
    """The embeddings the model hands its language model (vision tower as it is): [T, D]."""
    return lm_input_embeds(lm.model, prompt.inputs)


def _noise(seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (64, 64, 3), dtype=np.uint8))


@pytest.mark.parametrize("family", family_params())
def test_two_different_images_give_different_image_token_embeddings(loaded, family):
    lm = loaded[family]
    p0, p1 = (lm.adapter.build(Item(f"i{s}", "test", _noise(s), "what is in panel 1 ?", "red"), lm.processor) for s in (1, 2))
    assert torch.equal(p0.inputs["input_ids"], p1.inputs["input_ids"])
    e0, e1 = _lm_input_embeds(lm, p0), _lm_input_embeds(lm, p1)  # [T, D]
    pos = p0.layout.image_positions
    text = torch.ones(len(e0), dtype=torch.bool)
    text[pos] = False
    diff = (e0[pos] - e1[pos]).abs().amax(-1)  # [N_img]
    scale = e0[pos].abs().amax()
    assert scale > 0, f"{family}: image tokens embed as zeros"
    assert (diff > 1e-3 * scale).all(), f"{family}: {(diff <= 1e-3 * scale).sum()} of {len(pos)} image tokens embed alike"
    assert torch.equal(e0[text], e1[text])  # the text is the same: only the image tokens move


def test_no_builder_leaves_a_weight_matrix_constant():
    """The fix at its source: after :func:`randomize_constant_weights`, no family's weight
    matrix holds one value (Gemma 3's zero image projection was one)."""
    for family in ("gemma3", "internvl", "gemma4"):
        model, _, _ = FAMILY_BUILDERS[family]()
        assert randomize_constant_weights(model), family  # this family had one
        for name, p in model.named_parameters():
            flat = p.detach().flatten()
            assert not (p.ndim >= 2 and flat.numel() > 1 and (flat == flat[0]).all()), (family, name)
