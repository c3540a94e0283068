"""Gemma 4: an aspect-preserving grid of pooled soft tokens; bidirectional image blocks on sliding layers only.

The image processor resizes the image (aspect kept, no crop) to ``Hr × Wr``, multiples of
``k·p`` (patch ``p``, pooling kernel ``k``: 16 and 3 on the released models) with at most
``max_soft_tokens · k²`` patches; the tower's patches are average-pooled ``k × k`` into a
``(Hr / kp) × (Wr / kp)`` grid of soft tokens, row-major (the pooler's kernel index is
``x // k + (W_p / k) · (y // k)``). The prompt holds ``<|image>`` + that many ``<|image|>`` +
``<image|>``; their ids are checked against the config's ``boi/image/eoi`` token ids.

What the engine must keep exact, and how it does (read in ``modeling_gemma4.py``):

- the mask (``create_masks_for_vision_model``): full-attention layers are causal only;
  sliding layers are ``AND(k > q − window, OR(causal, same image block))`` when the text
  config's ``use_bidirectional_attention`` is ``"vision"`` (blocks from ``mm_token_type_ids``),
  causal + window otherwise. transformers builds both through the mask interface vheads
  registers, so the vheads attention gets the model's own boolean masks;
- KV sharing: the last ``num_kv_shared_layers`` layers have no k/v projections and attend
  with the keys / values of the last earlier layer of their type. vheads acts on the
  attention probabilities of each layer's own queries, so a head of a sharing layer is a
  head like any other; masking a head of the storing layer changes its output, never the
  keys it shares. With prefix reuse the storing layers' cache holds every key, so the
  sharing layers see the whole prefix;
- per-layer shapes: full layers have their own head size and KV-head count (``k = v`` there);
  the attention scale is 1 (queries and keys are RMS-normed). Every head is a query head of
  the same count in every layer, so head indices are ``(layer, head)`` as everywhere;
- per-layer embeddings and logit soft-capping live outside attention.

The vision tower packs a batch's patches by image (its output is split by the position
ids of the images it was given), so it runs on every row's copy (no shared vision pass);
as with Gemma 3, rows of different items never share a forward (sliding windows).
"""

from __future__ import annotations

from typing import Any

import torch

from vheads.models._adapter import register_adapter
from vheads.models._layout import grid_token_boxes
from vheads.models.gemma3 import Gemma3Adapter

BOI, EOI = "<|image>", "<image|>"


@register_adapter
class Gemma4Adapter(Gemma3Adapter):
    family = "gemma4"
    model_types = ("gemma4",)
    rows_independent_layers = False  # KV-shared layers read an earlier layer's keys / values of every row
    image_token = "<|image|>"
    # the hand-written pieces render what the released chat template renders (thinking off:
    # an empty thought channel opens the model turn); tests/models/test_published_templates_v4.py
    user_prefix = "<bos><|turn>user\n"
    image_prefix = "\n\n" + BOI
    image_suffix = EOI + "\n\n"
    assistant_prefix = "<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    template_image = "<|image|>"  # the processor expands it to <|image> + tokens + <image|>
    template_wrap = (BOI, EOI)  # the template writes the newlines around its placeholder
    pixel_keys = ("pixel_values", "image_position_ids")
    image_structure = "<|image> + rows x cols <|image|> soft tokens (row-major; aspect-preserving grid, k x k patches pooled per token) + <image|>; one image"
    box_mapping = "image resized (aspect kept, no crop) to a multiple of k*patch; token (r, c) pools a k x k patch block, covering a (W/cols) x (H/rows) cell of the original image"
    softmax_layers_rule = ("every layer (sliding and full); image tokens attend bidirectionally inside their block on sliding layers only "
                           "(use_bidirectional_attention = 'vision'), sliding layers see k > q - sliding_window; KV-shared layers attend with "
                           "the keys of the last earlier layer of their type")
    notes = "variable-resolution tower pooled k x k; KV-shared last layers; per-layer head sizes; attention scale 1; plain 1-D positions."

    def vision_module(self, model):
        return None  # the tower's output is split per image by its position ids: run it on every row

    def items_pixel_inputs(self, per_item, counts):
        """Each row's own copy of its item's patches and patch positions: [B, max_patches, ...]."""
        return {k: torch.cat([x[k].repeat(n, *([1] * (x[k].dim() - 1))) for x, n in zip(per_item, counts)]) for k in self.pixel_keys}

    def image_grid(self, processor: Any, image):
        cfg = processor.config
        tok = self.tokenizer(processor)
        for name, token in (("boi_token_id", BOI), ("image_token_id", self.image_token), ("eoi_token_id", EOI)):
            if tok.convert_tokens_to_ids(token) != getattr(cfg, name):
                raise ValueError(f"Gemma 4: the tokenizer's id of {token!r} is not the config's {name} "
                                 f"({getattr(cfg, name)}); this checkpoint's image tokens differ from the adapter's")
        out = processor.image_processor(images=[image], return_tensors="pt")
        pos = out["image_position_ids"][0]  # [max_patches, 2] (x, y); padding (-1, -1)
        real = pos[(pos >= 0).all(-1)]
        k = int(cfg.vision_config.pooling_kernel_size)
        pw, ph = int(real[:, 0].max()) + 1, int(real[:, 1].max()) + 1  # the resized image in patches
        rows, cols = ph // k, pw // k
        w, h = image.size
        boxes = grid_token_boxes(rows, cols, w / cols, h / rows)
        return {"pixel_values": out["pixel_values"], "image_position_ids": out["image_position_ids"]}, rows, cols, boxes

    def extra_inputs(self, input_ids, image_mask):
        return {"mm_token_type_ids": image_mask.long()}  # 1 on image tokens: the bidirectional blocks
