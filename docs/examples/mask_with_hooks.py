"""Mask a vheads head-set with plain transformers: forward pre-hooks on the attention modules.

Nothing here imports vheads: the head-set file is plain JSON (its schema ships as
``vheads/schemas/headset.schema.json``) and the masking is a per-head attention mask that
the hooks hand to each language-model attention layer. It reproduces vheads' own mask
(DESIGN.md "Mask"): for every head ``(l, h)`` in the head-set, every query row, and every
image key, the attention logit is −∞ and the softmax renormalizes over the keys left.
"""

from __future__ import annotations

import contextlib
import json

import torch


def read_headset(path) -> dict[int, list[int]]:
    """``{layer: [query heads]}`` of a ``vheads.headset/1`` file."""
    with open(path) as f:
        d = json.load(f)
    by_layer: dict[int, list[int]] = {}
    for layer, head in d["heads"]:
        by_layer.setdefault(layer, []).append(head)
    return by_layer


def per_head_mask(T: int, n_heads: int, heads: list[int], image_positions: torch.Tensor, dtype) -> torch.Tensor:
    """Additive attention mask ``[1, H, T, T]``: causal for every head, and the image keys
    hidden (−∞) from ``heads`` at every query row."""
    mask = torch.full((T, T), float("-inf")).triu(1)  # [T, T] causal: key t > query q is hidden
    mask = mask.expand(1, n_heads, T, T).clone()  # [1, H, T, T]
    for h in heads:
        mask[0, h][:, image_positions] = float("-inf")
    return mask.to(dtype)


@contextlib.contextmanager
def hide_image_from_heads(model, headset: dict[int, list[int]], image_positions: torch.Tensor):
    """While active, the language model's heads in ``headset`` cannot see the image tokens.

    Works for one prompt without padding (batch 1) and a transformers VLM whose decoder
    layers live at ``model.model.language_model.layers`` (Qwen2/2.5/3-VL, LLaVA); eager and
    sdpa attention both add the mask to the logits. The vision tower is not touched.
    """
    layers = model.model.language_model.layers
    n_heads = model.config.text_config.num_attention_heads
    handles = []
    for layer, heads in headset.items():

        def hook(module, args, kwargs, heads=heads):
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]  # [B, T, D]
            kwargs["attention_mask"] = per_head_mask(hidden.shape[1], n_heads, heads, image_positions, hidden.dtype)
            return args, kwargs

        handles.append(layers[layer].self_attn.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def option_probs(model, inputs: dict, letter_ids: list[int]) -> torch.Tensor:
    """P over the option letters at the last prompt position, renormalized over them: [4]."""
    with torch.no_grad():
        logits = model(**inputs).logits[0, -1]  # [V]
    return torch.softmax(logits[letter_ids].float(), dim=-1)
