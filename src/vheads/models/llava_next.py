"""LLaVA-NeXT (``llava_next``) and LLaVA-OneVision (``llava_onevision``): any-resolution tiles
plus a base image, an image-newline embedding after every row of the tiles.

The image processor picks the best resolution among ``image_grid_pinpoints`` (a canvas of
nph x npw tiles of S x S pixels), resizes the image onto it keeping its aspect ratio,
pads it centred, and cuts the tiles; the *base image* is the whole image resized to
S x S. The model encodes every view into g x g patch features (g = S / patch), puts the
base image's g² tokens first, then joins the tiles into one (nph·g) x (npw·g) grid, cuts
off the token rows (or columns) that are padding, and appends the learned
``image_newline`` embedding after each row. OneVision also shrinks that grid
(bilinear) when it has more than ``anyres_max_N`` tiles' worth of tokens.

Every slot of the block is an ``<image>`` token in the prompt, but the newline slots
carry no pixels: they are not image keys (DESIGN.md), they count as text.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from vheads.models._adapter import Adapter, register_adapter
from vheads.models._layout import ImageBlock, grid_rc, grid_token_boxes


def anyres_canvas(width: int, height: int, best_h: int, best_w: int) -> tuple[int, int, int, int]:
    """Where the image sits on the best-resolution canvas: (new_w, new_h, pad_x, pad_y), as
    the processor resizes (aspect kept, ``ceil``) and pads (centred) it."""
    sw, sh = best_w / width, best_h / height
    if sw < sh:
        new_w, new_h = best_w, min(math.ceil(height * sw), best_h)
    else:
        new_h, new_w = best_h, min(math.ceil(width * sh), best_w)
    return new_w, new_h, (best_w - new_w) // 2, (best_h - new_h) // 2


def unpadded_rows_cols(width: int, height: int, rows: int, cols: int) -> tuple[int, int, int, int]:
    """The token rows [r0, r1) and columns [c0, c1) of a rows x cols canvas grid the model
    keeps (its ``unpad_image``, in token units)."""
    if width / height > cols / rows:
        new_rows = int(round(height * (cols / width), 7))
        pad = (rows - new_rows) // 2
        return pad, rows - pad, 0, cols
    new_cols = int(round(width * (rows / height), 7))
    pad = (cols - new_cols) // 2
    return 0, rows, pad, cols - pad


@register_adapter
class LlavaNextAdapter(Adapter):
    family = "llava-next"
    model_types = ("llava_next",)
    pixel_keys = ("pixel_values", "image_sizes")  # image_sizes: the tile grid of each image
    image_token = "<image>"
    user_prefix = "USER: "
    image_suffix = "\n"
    template_wrap = ("", "")  # the template writes the newline after <image> itself
    assistant_prefix = " ASSISTANT:"
    image_structure = (
        "base image g x g <image> tokens (g = image_size/patch), then the tiles joined into one "
        "grid with padding rows/cols cut, each row followed by a newline slot: an <image> token "
        "filled with the learned image_newline embedding, which counts as text"
    )
    box_mapping = (
        "base image: the box scaled to the g x g grid; tiles: the box mapped through the "
        "aspect-keeping resize and centred padding onto the canvas grid; a box selects tokens in "
        "the base image and in every tile it overlaps"
    )
    notes = "any-resolution tiling over image_grid_pinpoints; plain 1-D positions."
    #: whether the joined tile grid is shrunk above the ``anyres_max_N`` budget (OneVision)
    pools_tiles: ClassVar[bool] = False

    def image_block(self, processor: Any, image) -> ImageBlock:
        from transformers.image_processing_utils import select_best_resolution

        cfg = processor.config
        out = processor.image_processor(images=[image], return_tensors="pt")
        S, p = int(cfg.vision_config.image_size), int(cfg.vision_config.patch_size)
        g = S // p
        w, h = image.size
        best_h, best_w = select_best_resolution((h, w), cfg.image_grid_pinpoints)
        nph, npw = best_h // S, best_w // S
        new_w, new_h, pad_x, pad_y = anyres_canvas(w, h, best_h, best_w)
        r0, r1, c0, c1 = unpadded_rows_cols(w, h, nph * g, npw * g)
        rows, cols = r1 - r0, c1 - c0
        step_r = step_c = 1.0  # canvas tokens per kept token (OneVision pools large grids)
        if self.pools_tiles:
            budget = int(str(getattr(cfg, "vision_aspect_ratio", "anyres_max_9")).strip("anyres_max_"))
            ratio = math.sqrt(rows * cols / (budget * g * g))
            if ratio > 1.1:
                step_r, step_c = rows / int(rows // ratio), cols / int(cols // ratio)
                rows, cols = int(rows // ratio), int(cols // ratio)
        # canvas pixels -> original pixels: x = (x_canvas - pad_x) * w / new_w
        kx, ky = w / new_w, h / new_h
        tile_boxes = grid_token_boxes(rows, cols, step_c * p * kx, step_r * p * ky, (c0 * p - pad_x) * kx, (r0 * p - pad_y) * ky)
        rc = grid_rc(rows, cols)
        centre_r = ((r0 + (rc[:, 0].float() + 0.5) * step_r) // g).long()  # source tile of each kept token
        centre_c = ((c0 + (rc[:, 1].float() + 0.5) * step_c) // g).long()
        boxes = torch.cat([grid_token_boxes(g, g, w / g, h / g), tile_boxes])
        tile = torch.cat([torch.zeros(g * g, dtype=torch.long), 1 + centre_r * npw + centre_c])
        names = ["base image"] + [f"tile r{r}c{c}" for r in range(nph) for c in range(npw)]
        # slots: g² base tokens, then per row `cols` tokens and one newline slot
        is_pixel = torch.cat([torch.ones(g * g, dtype=torch.bool), torch.cat([torch.ones(rows, cols, dtype=torch.bool), torch.zeros(rows, 1, dtype=torch.bool)], 1).flatten()])
        return ImageBlock(
            {"pixel_values": out["pixel_values"], "image_sizes": out["image_sizes"]},
            self.image_token * len(is_pixel), boxes, torch.cat([grid_rc(g, g), rc]), tile, names, (g, g), is_pixel,
        )

    def vision_module(self, model):
        return model.model.vision_tower


@register_adapter
class LlavaOnevisionAdapter(LlavaNextAdapter):
    family = "llava-onevision"
    model_types = ("llava_onevision",)
    user_prefix = "<|im_start|>user\n"
    assistant_prefix = "<|im_end|>\n<|im_start|>assistant\n"
    notes = (
        "any-resolution tiling over image_grid_pinpoints; the joined tile grid is shrunk "
        "(bilinear) above anyres_max_N tiles' worth of tokens; plain 1-D positions."
    )
    pools_tiles = True
