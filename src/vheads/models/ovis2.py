"""Ovis2 (``ovis2``): a visual tokenizer (each image token is a probability vector over a
visual vocabulary, embedded through a visual-embedding table), tiles after a thumbnail,
and visual indicator tokens between them.

The image processor (``crop_to_patches``) picks rows x cols tiles covering the image,
resizes the image onto them and cuts them row-major; with more than one tile the whole
image resized to one tile comes *first* (the thumbnail). Each view becomes
(⌈S / patch / hidden_stride⌉)² image tokens, row-major, each merging hidden_stride²
patches. The block reads::

    <IMG_START> thumbnail atoms <IMG_GRID> tile atoms <IMG_COL> tile atoms … <IMG_ROW> … <IMG_END>

(an untiled image: ``<IMG_START>`` atoms ``<IMG_GRID><IMG_END>``). The indicator tokens
take embeddings from the visual table but carry no pixels: they count as text.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from vheads.models._adapter import Adapter, register_adapter
from vheads.models._layout import ImageBlock, grid_rc, grid_token_boxes, tiled_views

INDICATORS = ("<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>")


def ovis_image_text(rows: int, cols: int, n_tokens: int, atom: str) -> str:
    """The processor's placeholder for an image of rows x cols tiles (1 x 1: untiled)."""
    view = atom * n_tokens
    text = f"<IMG_START>{view}<IMG_GRID>"
    if rows * cols > 1:
        text += "<IMG_ROW>".join("<IMG_COL>".join([view] * cols) for _ in range(rows))
    return text + "<IMG_END>"


@register_adapter
class Ovis2Adapter(Adapter):
    family = "ovis2"
    model_types = ("ovis2",)
    image_token = "<IMG_ATOM>"
    user_prefix = "<|im_start|>user\n"
    image_suffix = "\n"
    assistant_prefix = "<|im_end|>\n<|im_start|>assistant\n"
    template_image = "<image>"
    template_wrap = ("", "")
    image_structure = (
        "<IMG_START>, the thumbnail's <IMG_ATOM> tokens, <IMG_GRID>, then the tiles row-major "
        "(<IMG_COL> between tiles of a row, <IMG_ROW> between rows), <IMG_END>; each atom is a "
        "visual-vocabulary distribution embedded through the visual table; indicators count as text"
    )
    box_mapping = (
        "per view: the box scaled into the thumbnail's (or tile's) token grid; a box selects tokens "
        "in the thumbnail and in every tile it overlaps"
    )
    notes = "crop_to_patches tiling (covering-area grid); plain 1-D positions."

    def image_block(self, processor: Any, image) -> ImageBlock:
        out = processor.image_processor(images=[image], return_tensors="pt")
        pv = out["pixel_values"]  # [V, 3, S, S]
        rows, cols = (int(v) for v in out["grids"][0])
        vc = processor.config.vision_config
        patches = pv.shape[-1] // processor.patch_size  # patches per side of a view
        stride = int(vc.hidden_stride)
        side = math.ceil(patches / stride)  # tokens per side (the tower pads to a multiple)
        w, h = image.size
        views, names = tiled_views(w, h, cols, rows)
        if len(views) > 1:  # the thumbnail comes first
            views, names = views[-1:] + views[:-1], names[-1:] + names[:-1]
        boxes, tile = [], []
        for v, (x0, y0, x1, y1) in enumerate(views):
            boxes.append(grid_token_boxes(side, side, (x1 - x0) / patches * stride, (y1 - y0) / patches * stride, x0, y0))
            tile.append(torch.full((side * side,), v, dtype=torch.long))
        rc = grid_rc(side, side).repeat(len(views), 1)
        text = ovis_image_text(rows, cols, side * side, self.image_token)
        return ImageBlock({"pixel_values": pv}, text, torch.cat(boxes), rc, torch.cat(tile), names, (side, side))

    def vision_module(self, model):
        return model.model.vision_tower
