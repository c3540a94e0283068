"""Held-out accuracy of a tiny model, per question kind.

Free-text kinds (strips): correct when the argmax over the whole vocabulary at the last
prompt position is the key's token. Lettered kinds: correct when the key letter has the
largest logit among the four option letters at the last prompt position; ``p_key`` is
P(key) renormalized over the four letters (DESIGN.md's P), expected 0.25 for the
mismatched and blank kinds.
"""

from __future__ import annotations

import numpy as np
import torch

from vheads.data import OPTION_LETTERS, Item
from vheads.data import synthetic as syn
from vheads.tiny._batch import build_prompts, collate, draw_items

EVAL_SEED = 990_000_000  # far from the training and validation seeds
#: reported kinds: name -> (generator kind, corpus)
EVAL_KINDS: dict[str, tuple[str, str | None]] = {
    "strip-ordinal/comics": ("strip-ordinal", "comics"),
    "strip-ordinal/photo": ("strip-ordinal", "photo"),
    "strip-referring/comics": ("strip-referring", "comics"),
    "strip-referring/photo": ("strip-referring", "photo"),
    "grid-oracle": ("grid-oracle", None),
    "grid-neutral": ("grid-neutral", None),
    "grid-blank": ("grid-blank", None),
    "class-matched": ("class-matched", None),
    "class-mismatched": ("class-mismatched", None),
    "text": ("text", None),
}


@torch.no_grad()
def predict(model, processor, items: list[Item], batch_size: int = 64) -> list[dict]:
    """Per item: ``correct``, and for lettered items ``p_key`` and ``p_letters`` (over A-D)."""
    tok = processor.tokenizer
    letter_ids = [tok.convert_tokens_to_ids(x) for x in OPTION_LETTERS]
    out = []
    for i in range(0, len(items), batch_size):
        chunk = items[i:i + batch_size]
        prompts = build_prompts(chunk, processor, with_answer=False)
        logits = model(**collate(prompts, tok.pad_token_id)).logits.float()  # [B, T, V]
        for b, p in enumerate(prompts):
            row = logits[b, p.layout.last]  # [V]
            it = p.item
            if it.options is None:
                key = tok.convert_tokens_to_ids(it.answer)
                out.append({"correct": bool(row.argmax() == key)})
            else:
                pl = torch.softmax(row[letter_ids], -1)
                k = OPTION_LETTERS.index(it.answer)
                out.append({"correct": bool(pl.argmax() == k), "p_key": float(pl[k]), "p_letters": pl.tolist()})
    return out


def evaluate(model_path: str = "tiny", n_per_kind: int = 200, seed: int = EVAL_SEED, threads: int | None = None) -> dict[str, dict]:
    """Held-out accuracy per kind of the model at ``model_path`` (loaded by the generic loader).

    Returns ``{kind: {"n", "accuracy", "p_key" (lettered kinds)}}``.
    """
    from vheads.models import load_model

    if n_per_kind < 1:
        raise ValueError(f"n_per_kind must be at least 1, got {n_per_kind}")
    if threads:
        torch.set_num_threads(threads)
    lm = load_model(str(model_path))
    report = {}
    for g, (name, (kind, corpus)) in enumerate(EVAL_KINDS.items()):
        items = draw_items(kind, corpus, n_per_kind, seed + g)
        res = predict(lm.model, lm.processor, items)
        entry = {"n": n_per_kind, "accuracy": round(float(np.mean([r["correct"] for r in res])), 4)}
        if "p_key" in res[0]:
            entry["p_key"] = round(float(np.mean([r["p_key"] for r in res])), 4)
        report[name] = entry
    return report


__all__ = ["EVAL_KINDS", "evaluate", "predict", "syn"]
