"""LLaVA family (LLaVA-1.5 style): fixed square grid of patch tokens, resize + centre crop."""

from __future__ import annotations

from typing import Any

import torch

from vheads.models._adapter import Adapter, register_adapter
from vheads.models._layout import grid_token_boxes


@register_adapter
class LlavaAdapter(Adapter):
    family = "llava"
    model_types = ("llava",)
    image_token = "<image>"
    user_prefix = "USER: "
    image_suffix = "\n"
    assistant_prefix = " ASSISTANT:"
    template_wrap = ("", "")  # the template writes the newline after <image> itself
    notes = (
        "CLIP-style processor: resize (shortest edge) then centre crop to a square; "
        "one token per vision patch (CLS dropped); plain 1-D positions."
    )
    image_structure = "<image> expanded to rows x cols patch tokens (row-major), then a newline; one image, no tiles"
    box_mapping = "token (r, c) covers one patch of the resized, centre-cropped image, mapped back to original pixels; a box selects tokens it covers >= min_cover"

    def vision_module(self, model):
        return model.model.vision_tower

    cross_item = True

    def items_pixel_inputs(self, per_item, counts):
        # one image per distinct item; the engine repeats the tower's output for its rows
        return {"pixel_values": torch.cat([x["pixel_values"] for x in per_item])}

    def items_vision_call(self, args, kwargs, counts):
        return args, kwargs  # the model already passes the distinct images

    def image_grid(self, processor: Any, image):
        ip = processor.image_processor
        out = ip(images=[image], return_tensors="pt")
        _, _, ph, pw = out["pixel_values"].shape
        patch = int(processor.patch_size)
        rows, cols = ph // patch, pw // patch
        w, h = image.size
        size = ip.size
        shortest = size.get("shortest_edge") if isinstance(size, dict) else getattr(size, "shortest_edge", None)
        if shortest:
            s = shortest / min(w, h)
            rw, rh = w * s, h * s
        else:
            rw, rh = float(size["width"] if isinstance(size, dict) else size.width), float(size["height"] if isinstance(size, dict) else size.height)
        off_x = (rw - pw) / 2 if getattr(ip, "do_center_crop", False) else 0.0
        off_y = (rh - ph) / 2 if getattr(ip, "do_center_crop", False) else 0.0
        if not getattr(ip, "do_center_crop", False):
            rw, rh = float(pw), float(ph)
        kx, ky = w / rw, h / rh  # original pixels per processed pixel
        boxes = grid_token_boxes(rows, cols, patch * kx, patch * ky, off_x * kx, off_y * ky)
        # clip tokens to the image (a centre crop keeps them inside; this guards rounding)
        boxes[:, 0::2] = boxes[:, 0::2].clamp(0, w)
        boxes[:, 1::2] = boxes[:, 1::2].clamp(0, h)
        return {"pixel_values": out["pixel_values"]}, rows, cols, boxes
