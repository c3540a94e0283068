"""GLM-4V: a Qwen2-VL-like merged patch grid with GLM's own tokens, template and 3D RoPE.

The image processor resizes to multiples of ``patch · merge`` pixels and merges 2 × 2
patches into one ``<|image|>`` token, row-major, between ``<|begin_of_image|>`` and
``<|end_of_image|>`` — so a box maps to tokens as on Qwen-VL. The language model's
rotary embedding is 3D (temporal, height, width sections, on half of each head's dims):
position ids come from the model's own ``get_rope_index`` once per prompt, and the
engine sees only the rotated queries and keys, so its attention rows stay exact.
"""

from __future__ import annotations

from vheads.models._adapter import register_adapter
from vheads.models.qwen_vl import QwenVLAdapter


@register_adapter
class Glm4vAdapter(QwenVLAdapter):
    family = "glm-4v"
    model_types = ("glm4v",)
    image_token = "<|image|>"
    user_prefix = "[gMASK]<sop><|user|>\n"
    image_prefix = "<|begin_of_image|>"
    image_suffix = "<|end_of_image|>"
    assistant_prefix = "<|assistant|>\n"
    template_image = "<|begin_of_image|><|image|><|end_of_image|>"
    image_structure = "<|begin_of_image|> + rows x cols <|image|> (row-major, one per merged 2x2 patch) + <|end_of_image|>; one image, no tiles"
    notes = "GLM vision tower; image resized to multiples of patch*merge pixels; 3D M-RoPE (partial rotary) position ids from the model's get_rope_index."
