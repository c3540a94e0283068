"""Mistral 3 / Pixtral (``mistral3``): one grid of image tokens with a break token after
every row and an end token after the last.

The Pixtral image processor shrinks the image to fit ``longest_edge`` and stretches it to
multiples of P = patch · spatial_merge_size; the patch merger turns each P x P square into
one image token (row-major). The block reads ``[IMG]×cols [IMG_BREAK]`` per row, the last
row ending in ``[IMG_END]`` instead; break and end tokens count as text.
"""

from __future__ import annotations

from typing import Any

import torch

from vheads.models._adapter import Adapter, register_adapter
from vheads.models._layout import ImageBlock, grid_rc, grid_token_boxes

BREAK, END = "[IMG_BREAK]", "[IMG_END]"


@register_adapter
class Mistral3Adapter(Adapter):
    family = "mistral3"
    model_types = ("mistral3",)
    image_token = "[IMG]"
    user_prefix = "[INST]"
    assistant_prefix = "[/INST]"
    template_image = "[IMG]"
    pixel_keys = ("pixel_values", "image_sizes")
    image_structure = (
        "rows x cols [IMG] tokens (one per (patch*spatial_merge_size)^2 square), each row followed "
        "by [IMG_BREAK], the last by [IMG_END]; break and end tokens count as text"
    )
    notes = (
        "Pixtral resize to multiples of patch*merge; the vision tower runs once per batch row "
        "(it packs all images into one sequence); plain 1-D positions."
    )

    def image_block(self, processor: Any, image) -> ImageBlock:
        P = processor.patch_size * int(processor.config.spatial_merge_size)
        out = processor.image_processor(images=[image], patch_size={"height": P, "width": P}, return_tensors="pt")
        ph, pw = (int(v) for v in out["image_sizes"][0])
        rows, cols = ph // P, pw // P
        w, h = image.size
        boxes = grid_token_boxes(rows, cols, P * w / pw, P * h / ph)
        text = (BREAK.join([self.image_token * cols] * rows)) + END
        return ImageBlock({"pixel_values": out["pixel_values"], "image_sizes": out["image_sizes"]}, text, boxes,
                          grid_rc(rows, cols), torch.zeros(rows * cols, dtype=torch.long), ["image"], (rows, cols))

    def vision_module(self, model):
        return None  # Pixtral packs a batch of images into one sequence: no shared vision pass
