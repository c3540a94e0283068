"""Gemma 3: a fixed square grid of pooled SigLIP tokens, bidirectional inside the image, sliding windows.

The image is resized (no crop, aspect not kept) to the tower's square input; the tower's
``P × P`` patches are average-pooled to ``t × t`` tokens (``t² = mm_tokens_per_image``,
256 on the released models). The prompt holds ``\\n\\n<start_of_image>`` + t² ×
``<image_soft_token>`` + ``<end_of_image>\\n\\n``.

Gemma's language-model mask is not plain causal, and vheads reproduces it exactly:

- ``token_type_ids`` (1 on image tokens) make the tokens of one image block attend to each
  other bidirectionally (``OR(causal, same block)``);
- ``sliding_attention`` layers add a window: key k is visible to query q only when
  ``k > q − sliding_window`` (``AND(window, OR(causal, block))``).

transformers builds both from mask functions through the mask interface that vheads
registers (``sdpa_mask``), so the vheads attention receives the model's own boolean mask
and its explicit rows apply it as is. With prefix reuse the sliding layers keep every key
(a full cache, not the window-sized one), so key positions stay absolute; the window is in
the mask. Rows of different items never share a forward (``cross_item`` off): packing pads
between a prefix and its suffix, which the window would count. Pan-and-scan crops are not
supported (one clear error).
"""

from __future__ import annotations

from typing import Any

import torch

from vheads.models._adapter import register_adapter
from vheads.models._layout import grid_token_boxes
from vheads.models.llava import LlavaAdapter


@register_adapter
class Gemma3Adapter(LlavaAdapter):
    family = "gemma3"
    model_types = ("gemma3",)
    image_token = "<image_soft_token>"
    user_prefix = "<bos><start_of_turn>user\n"
    image_prefix = "\n\n<start_of_image>"
    image_suffix = "<end_of_image>\n\n"
    assistant_prefix = "<end_of_turn>\n<start_of_turn>model\n"
    template_image = "<start_of_image>"  # the processor expands it to \n\n<start_of_image> + tokens + <end_of_image>\n\n
    template_wrap = None  # (image_prefix, image_suffix), not LLaVA's
    image_structure = "\\n\\n<start_of_image> + t x t <image_soft_token> (row-major, t^2 = mm_tokens_per_image) + <end_of_image>\\n\\n; one image, no pan-and-scan crops"
    box_mapping = "image resized to the tower's square input; token (r, c) is the average of a k x k patch block, covering a (W/t) x (H/t) cell of the original image"
    softmax_layers_rule = "every layer (sliding_attention and full_attention alike); image tokens attend bidirectionally inside their block, sliding layers see k > q - sliding_window"
    notes = "SigLIP tower pooled to t x t tokens; model mask = OR(causal, image block) [AND sliding window]; plain 1-D positions."
    #: one item per forward: packing items pads between each prefix and its suffix, and the
    #: sliding window counts padded positions (k > q - window), so a shorter prefix's suffix
    #: rows would lose keys the window holds when the item runs alone
    cross_item = False

    def image_grid(self, processor: Any, image):
        ip = processor.image_processor
        if getattr(ip, "do_pan_and_scan", False):
            raise ValueError("Gemma 3 pan-and-scan crops are not supported by vheads; load the processor with do_pan_and_scan=False")
        out = ip(images=[image], return_tensors="pt")
        pv = out["pixel_values"]  # [1, 3, S, S]
        n = int(processor.config.mm_tokens_per_image)
        t = int(round(n ** 0.5))
        if t * t != n:
            raise ValueError(f"Gemma 3 mm_tokens_per_image {n} is not a square number")
        w, h = image.size
        boxes = grid_token_boxes(t, t, w / t, h / t)
        return {"pixel_values": pv}, t, t, boxes

    def extra_inputs(self, input_ids, image_mask):
        return {"token_type_ids": image_mask.long()}  # Gemma's bidirectional image blocks
