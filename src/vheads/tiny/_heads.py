"""Region-specific heads of a tiny model, measured with plain eager attention.

For held-out strips of each (query, corpus) and each attention source (``last``: the last
prompt token; ``qspan``: the mean over the query-span tokens), every language-model head
(l, h) gets

- ``target[l, h]`` = mean over items of the raw attention mass onto the asked panel's tokens,
- ``other[l, h]``  = mean over items of the mean mass onto each of the five other panels,

so ``target / other`` says how many times more the head looks at the asked panel than at
a typical other panel. This is an independent check (transformers' own eager attention,
``output_attentions=True``), not the vheads engine.
"""

from __future__ import annotations

import numpy as np
import torch

from vheads.data import synthetic as syn
from vheads.tiny._batch import build_prompts, collate

HEADS_SEED = 880_000_000


@torch.no_grad()
def region_head_scores(model_path: str = "tiny", n: int = 100, seed: int = HEADS_SEED, batch_size: int = 25) -> dict[str, dict[str, np.ndarray]]:
    """``{"<query>/<corpus>/<source>": {"target": [L, H], "other": [L, H]}}`` on held-out strips."""
    from transformers import AutoModelForImageTextToText

    from vheads.models import load_model

    lm = load_model(str(model_path))
    path = model_path if model_path != "tiny" else str(__import__("vheads.tiny", fromlist=["x"]).tiny_model_path())
    model = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()
    out: dict[str, dict[str, np.ndarray]] = {}
    for g, (query, corpus) in enumerate([(q, c) for q in syn.STRIP_QUERIES for c in syn.CORPORA]):
        items = syn.strip_items(corpus, query, n, seed + g)
        acc = {src: {"target": [], "other": []} for src in ("last", "qspan")}
        for i in range(0, n, batch_size):
            prompts = build_prompts(items[i:i + batch_size], lm.processor, with_answer=False)
            att = model(**collate(prompts, lm.processor.tokenizer.pad_token_id), output_attentions=True).attentions
            att = torch.stack(att, 1)  # [B, L, H, T, T]
            for b, p in enumerate(prompts):
                panels = {k: v.positions for k, v in p.layout.regions.items()}
                rows = {"last": [p.layout.last], "qspan": p.layout.spans["query"]}
                for src, r in rows.items():
                    a = att[b][:, :, r].mean(2)  # [L, H, T]
                    mass = {k: a[..., pos].sum(-1) for k, pos in panels.items()}  # each [L, H]
                    tgt = mass[p.item.target]
                    oth = torch.stack([m for k, m in mass.items() if k != p.item.target]).mean(0)
                    acc[src]["target"].append(tgt)
                    acc[src]["other"].append(oth)
        for src, d in acc.items():
            out[f"{query}/{corpus}/{src}"] = {k: torch.stack(v).mean(0).numpy() for k, v in d.items()}
    return out


def top_heads(scores: dict[str, np.ndarray], k: int = 4) -> list[tuple[int, int, float, float]]:
    """The ``k`` heads with the largest target mass: (layer, head, target, other)."""
    t, o = scores["target"], scores["other"]
    order = np.argsort(-t, axis=None)[:k]
    return [(int(i // t.shape[1]), int(i % t.shape[1]), float(t.flat[i]), float(o.flat[i])) for i in order]


def heads_table(result: dict[str, dict[str, np.ndarray]], k: int = 4) -> str:
    """Markdown table of the top heads per setting."""
    lines = ["| setting | head (layer, head) | mass on asked panel | mean mass per other panel | ratio |", "|---|---|---|---|---|"]
    for setting, scores in result.items():
        for layer, head, t, o in top_heads(scores, k):
            lines.append(f"| {setting} | ({layer}, {head}) | {t:.3f} | {o:.3f} | {t / max(o, 1e-6):.1f} |")
    return "\n".join(lines)
