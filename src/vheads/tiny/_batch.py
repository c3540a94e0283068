"""Tokenize items through the family adapter and pad them into one batch."""

from __future__ import annotations

import torch

from vheads.data import Item
from vheads.data import synthetic as syn
from vheads.models import ProcessorBundle, Prompt, adapter_for

ADAPTER = adapter_for("qwen3_vl")


def answer_text(item: Item) -> str:
    """The teacher-forced answer: the key (class word, digit or letter) then end of turn."""
    return item.answer + "<|im_end|>"


def build_prompts(items: list[Item], processor: ProcessorBundle, with_answer: bool) -> list[Prompt]:
    return [ADAPTER.build(it, processor, answer_text=answer_text(it) if with_answer else None) for it in items]


def collate(prompts: list[Prompt], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a list of batch-1 prompts into one batch (images concatenated in order)."""
    T = max(p.layout.n_tokens for p in prompts)
    B = len(prompts)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    att = torch.zeros(B, T, dtype=torch.long)
    mm = torch.zeros(B, T, dtype=torch.int32)
    for b, p in enumerate(prompts):
        n = p.layout.n_tokens
        ids[b, :n] = p.inputs["input_ids"][0]
        att[b, :n] = 1
        mm[b, :n] = p.inputs["mm_token_type_ids"][0]
    out = {"input_ids": ids, "attention_mask": att, "mm_token_type_ids": mm}
    if any("pixel_values" in p.inputs for p in prompts):
        out["pixel_values"] = torch.cat([p.inputs["pixel_values"] for p in prompts if "pixel_values" in p.inputs])
        out["image_grid_thw"] = torch.cat([p.inputs["image_grid_thw"] for p in prompts if "image_grid_thw" in p.inputs])
    return out


def draw_items(kind: str, corpus: str | None, n: int, seed: int, filled: int = syn.N_PANELS) -> list[Item]:
    if kind.startswith("strip-"):
        return syn.strip_items(corpus, kind.split("-")[1], n, seed, filled=filled)
    return syn.kind_items(kind, n, seed)
