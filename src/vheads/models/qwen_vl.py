"""Qwen-VL family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE): dynamic-resolution grid, 2x2 patch merge.

Qwen3-VL-MoE differs from Qwen3-VL only in its text model's MLPs (sparse experts): its
attention, vision tower, image layout and M-RoPE are Qwen3-VL's, so one adapter serves both.
"""

from __future__ import annotations

from typing import Any

import torch

from vheads.models._adapter import Adapter, call_with_supported, register_adapter
from vheads.models._layout import grid_token_boxes


@register_adapter
class QwenVLAdapter(Adapter):
    family = "qwen-vl"
    model_types = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
    image_token = "<|image_pad|>"
    user_prefix = "<|im_start|>user\n"
    image_prefix = "<|vision_start|>"
    image_suffix = "<|vision_end|>"
    assistant_prefix = "<|im_end|>\n<|im_start|>assistant\n"
    template_image = "<|vision_start|><|image_pad|><|vision_end|>"
    notes = (
        "Image resized to multiples of patch*merge pixels; one image token per merged "
        "patch; M-RoPE position ids computed once for the full prompt."
    )
    image_structure = "<|vision_start|> + rows x cols <|image_pad|> (row-major, one per merged 2x2 patch) + <|vision_end|>; one image, no tiles"
    box_mapping = "token (r, c) covers resized pixels [c, c+1) x [r, r+1) x (patch * merge), scaled back to the original image; a box selects tokens it covers >= min_cover"

    def image_grid(self, processor: Any, image):
        ip = processor.image_processor
        out = ip(images=[image], return_tensors="pt")
        t, gh, gw = (int(v) for v in out["image_grid_thw"][0])
        merge = int(ip.merge_size)
        patch = int(ip.patch_size)
        rows, cols = gh // merge, gw // merge
        w, h = image.size
        # the processor resized the image to (gw*patch) x (gh*patch) pixels
        sx = w / (gw * patch) * merge * patch
        sy = h / (gh * patch) * merge * patch
        boxes = grid_token_boxes(rows, cols, sx, sy)
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}, rows, cols, boxes

    def vision_module(self, model):
        return model.model.visual

    cross_item = True

    def items_pixel_inputs(self, per_item, counts):
        # each distinct image's patches once; one grid row per batch row (the model splits
        # the tower's output by grid rows, so it sees one image per row)
        return {"pixel_values": torch.cat([x["pixel_values"] for x in per_item]),
                "image_grid_thw": torch.cat([x["image_grid_thw"].repeat(n, 1) for x, n in zip(per_item, counts)])}

    def items_vision_call(self, args, kwargs, counts):
        kwargs = dict(kwargs)
        grid = kwargs.pop("grid_thw") if "grid_thw" in kwargs else args[1]
        first = torch.tensor([0, *counts[:-1]]).cumsum(0)  # the first grid row of each item
        return (args[0],), {**kwargs, "grid_thw": grid[first.to(grid.device)]}

    def extra_inputs(self, input_ids, image_mask):
        return {"mm_token_type_ids": image_mask.to(torch.int32)}

    def position_ids(self, model, inputs):
        base = model.model
        pos = call_with_supported(
            base.get_rope_index,
            input_ids=inputs["input_ids"],
            image_grid_thw=inputs.get("image_grid_thw"),
            video_grid_thw=None,
            attention_mask=inputs.get("attention_mask"),
            mm_token_type_ids=inputs.get("mm_token_type_ids"),
        )
        return pos[0] if isinstance(pos, tuple) else pos
