"""Qwen3.5 (dense and MoE): Qwen3-VL's image layout on a hybrid text model.

Only every few layers of the language model are softmax attention (``layer_types`` entry
``full_attention``: every 4th in the released configs); the others are Gated DeltaNet
linear-attention layers, a recurrence with no attention map. Heads — what vheads
captures, masks and steers — exist only in the softmax layers, and keep the model's own
layer numbering: :meth:`Adapter.attention_layers` lists those layers, and every head
index in another layer is refused. The softmax layers' query projection also yields an
output gate (``o · sigmoid(gate)``); it acts after the attention function, so the
engine's attention rows stay exact.

The image processor, the ``<|vision_start|> <|image_pad|>… <|vision_end|>`` block, the
M-RoPE position ids and the one-vision-pass batching are Qwen3-VL's; rows of different
items never share a forward (``cross_item`` off), since the recurrence would run over the
padding between an item's prefix and suffix. The assistant turn
starts with an empty thinking block (``<think>\\n\\n</think>\\n\\n``), as Qwen3's chat
template writes it with thinking disabled.
"""

from __future__ import annotations

from vheads.models._adapter import register_adapter
from vheads.models.qwen_vl import QwenVLAdapter


@register_adapter
class Qwen35Adapter(QwenVLAdapter):
    family = "qwen3.5"
    model_types = ("qwen3_5", "qwen3_5_moe")
    assistant_prefix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    softmax_layers_rule = (
        "only the layers whose text_config.layer_types entry is full_attention (every 4th in the released "
        "configs); the others are Gated DeltaNet linear attention with no heads"
    )
    #: one item per forward: packing items pads between each prefix and its suffix, and the
    #: Gated DeltaNet recurrence would run over those pads (measured: |dP| 4e-3 on the tiny model)
    cross_item = False
    notes = (
        "Qwen3-VL image layout and M-RoPE; hybrid text model (Gated DeltaNet + gated softmax attention, "
        "dense or sparse-expert MLPs); heads are (layer, head) of the softmax layers, in the model's layer numbering."
    )
