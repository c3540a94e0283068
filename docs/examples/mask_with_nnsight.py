"""Mask a vheads head-set with nnsight: replace each attention layer's mask inside a trace.

The same intervention as ``mask_with_hooks.py`` (and as vheads' own mask): the heads of
the head-set get −∞ on every image key at every query row. nnsight runs the code inside
``trace`` alongside the forward pass, so layers are visited in the order they execute.
"""

from __future__ import annotations

import torch
from nnsight import NNsight

from mask_with_hooks import per_head_mask  # the mask is the same; only the plumbing differs


def option_probs_with_heads_hidden(model, inputs: dict, headset: dict[int, list[int]], image_positions: torch.Tensor,
                                   letter_ids: list[int]) -> torch.Tensor:
    """P over the option letters at the last prompt position with ``headset`` hidden from
    the image tokens: [4]."""
    traced = NNsight(model)
    n_heads = model.config.text_config.num_attention_heads
    T = inputs["input_ids"].shape[1]
    with torch.no_grad(), traced.trace(**inputs):
        for layer in sorted(headset):
            attn = traced.model.language_model.layers[layer].self_attn
            args, kwargs = attn.inputs
            mask = per_head_mask(T, n_heads, headset[layer], image_positions, kwargs["hidden_states"].dtype)
            attn.inputs = (args, {**kwargs, "attention_mask": mask})  # [1, H, T, T]
        logits = traced.output.logits[0, -1].save()  # [V]
    return torch.softmax(logits[letter_ids].float(), dim=-1)
