"""What the model itself says about its image tokens, read from the embeddings it hands its
language model (``inputs_embeds`` at the decoder), with no knowledge of an adapter's geometry.

- :func:`vision_filled_positions`: the positions whose embedding is not the token
  embedding of their id — the slots the vision side fills (image features, newline
  embeddings, indicator tokens).
- :func:`pixel_moved_positions`: with every attention module outside the language model
  outputting zeros (:func:`patch_local_vision`), each image token's feature depends on its
  own patches only; so the positions whose embedding changes when a box's pixels change
  are the tokens whose processed pixels lie in the box — in every tile and the thumbnail.
"""

from __future__ import annotations

import contextlib

import torch
from PIL import Image, ImageOps


@contextlib.contextmanager
def patch_local_vision(model):
    """Every attention module outside the language model outputs zeros: no image token mixes
    with another before it reaches the language model."""

    def zero(module, args, out):
        return (torch.zeros_like(out[0]), *out[1:]) if isinstance(out, tuple) else torch.zeros_like(out)

    text = set(map(id, model.get_decoder().modules()))
    handles = [m.register_forward_hook(zero) for m in model.modules() if type(m).__name__.endswith("Attention") and id(m) not in text]
    if not handles:
        raise RuntimeError(f"{type(model).__name__}: no attention module found in the vision tower")
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def lm_input_embeds(model, inputs: dict, local_vision: bool = False) -> torch.Tensor:
    """The embeddings the model hands its language model for one prompt: [T, D] (float32, CPU)."""
    seen = {}

    def grab(module, args, kwargs):
        seen["e"] = kwargs["inputs_embeds"][0].detach().float().cpu()
        raise _Stop  # the language model itself is not needed

    handle = model.get_decoder().register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad(), patch_local_vision(model) if local_vision else contextlib.nullcontext():
            model(**inputs)
    except _Stop:
        pass
    finally:
        handle.remove()
    return seen["e"]


class _Stop(Exception):
    """Raised by the decoder's pre-hook once the embeddings are read."""


def vision_filled_positions(model, inputs: dict) -> list[int]:
    """Positions whose language-model input is not the token embedding of their id."""
    e = lm_input_embeds(model, inputs)  # [T, D]
    with torch.no_grad():
        table = model.get_input_embeddings()(inputs["input_ids"])[0].float().cpu()  # [T, D]
    return ((e - table).abs().amax(-1) > 1e-6 * (1 + table.abs().amax())).nonzero().flatten().tolist()


def invert_box(image: Image.Image, box: tuple[int, int, int, int]) -> Image.Image:
    """``image`` with the pixels inside ``box`` inverted (every value v becomes 255 − v, so
    each pixel of the box changes and none outside it)."""
    changed = image.convert("RGB").copy()
    changed.paste(ImageOps.invert(changed.crop(box)), box[:2])
    return changed


def pixel_moved_positions(model, inputs_a: dict, inputs_b: dict) -> list[int]:
    """Positions whose (patch-local) language-model input differs between two prompts of
    the same token ids."""
    diff = (lm_input_embeds(model, inputs_a, True) - lm_input_embeds(model, inputs_b, True)).abs().amax(-1)  # [T]
    return (diff > 1e-6).nonzero().flatten().tolist()
