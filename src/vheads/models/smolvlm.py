"""Idefics3 (``idefics3``) and SmolVLM (``smolvlm``): image splitting into sub-images plus a
global image, each sub-image announced by a ``<row_r_col_c>`` marker.

The image processor resizes the image (longest edge ``size``), then stretches it to
multiples of M = ``max_image_size`` on both sides; when that is larger than M x M it is
cut into rows x cols sub-images of M x M (row-major) and the whole image, resized to
M x M, follows as the global image. Each view becomes (M / patch / scale_factor)² image
tokens (pixel shuffle, row-major). The block reads::

    <fake_token_around_image><row_1_col_1><image>… <fake_token_around_image><row_1_col_2><image>… \\n
    …
    \\n<fake_token_around_image><global-img><image>…<fake_token_around_image>

(an unsplit image is the global part alone). Markers and newlines count as text.
"""

from __future__ import annotations

from typing import Any

from vheads.models._adapter import Adapter, register_adapter
from vheads.models._layout import ImageBlock, tiled_views, views_token_grid

AROUND = "<fake_token_around_image>"
GLOBAL = "<global-img>"


def split_image_text(rows: int, cols: int, n_tokens: int, image_token: str) -> str:
    """The processor's text for an image split into rows x cols sub-images (0 x 0: unsplit)."""
    view = image_token * n_tokens
    glob = f"{AROUND}{GLOBAL}{view}{AROUND}"
    if rows == 0 and cols == 0:
        return glob
    tiles = "".join("".join(f"{AROUND}<row_{r + 1}_col_{c + 1}>{view}" for c in range(cols)) + "\n" for r in range(rows))
    return tiles + "\n" + glob


@register_adapter
class SmolVLMAdapter(Adapter):
    family = "smolvlm"
    model_types = ("idefics3", "smolvlm")
    image_token = "<image>"
    user_prefix = "<|im_start|>User:"
    assistant_prefix = "<end_of_utterance>\nAssistant:"
    template_image = "<image>"
    pixel_keys = ("pixel_values", "pixel_attention_mask")
    expand_pixels = False  # the model flattens [batch, views] with .view()
    image_structure = (
        "per sub-image (row-major) <fake_token_around_image><row_r_col_c> then (M/patch/scale_factor)^2 "
        "<image> tokens, a newline after each row, then <fake_token_around_image><global-img> and the "
        "global image's tokens; markers and newlines count as text"
    )
    box_mapping = (
        "per view: the box scaled into the sub-image's (or global image's) token grid; a box selects "
        "tokens in every sub-image it overlaps and in the global image"
    )
    notes = "image splitting at max_image_size; plain 1-D positions."

    def image_block(self, processor: Any, image) -> ImageBlock:
        ip = processor.image_processor
        out = ip(images=[image], return_tensors="pt", return_row_col_info=True)
        rows, cols = int(out["rows"][0][0]), int(out["cols"][0][0])
        cfg = processor.config
        side = int(ip.max_image_size["longest_edge"]) // processor.patch_size // int(cfg.scale_factor)
        w, h = image.size
        views, names = tiled_views(w, h, max(cols, 1), max(rows, 1))
        names = [("global image" if n in ("thumbnail", "image") else n) for n in names]
        boxes, rc, tile = views_token_grid(views, side, side)
        pixels = {"pixel_values": out["pixel_values"], "pixel_attention_mask": out["pixel_attention_mask"]}
        return ImageBlock(pixels, split_image_text(rows, cols, side * side, self.image_token), boxes, rc, tile, names, (side, side))

    def vision_module(self, model):
        return model.model.vision_model

    def single_vision_call(self, args, kwargs, batch):
        kwargs = dict(kwargs)
        for k in ("pixel_values", "patch_attention_mask"):
            kwargs[k] = kwargs[k][: len(kwargs[k]) // batch]
        return args, kwargs
