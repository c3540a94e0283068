"""Option-letter probabilities of many head-sets on one item, batched through the engine.

Every test of DESIGN.md reduces to: for an item and a list of head-sets, run one action
(mask some keys, or steer onto a region) at a row group, and read P over the four option
letters at the last prompt position. Head-sets share a forward (batch row b = head-set
b), and the prefix before the first acted-on row is computed once when the row group
allows it (``question`` and ``last``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vheads.engine import Engine, mask_keys, positions_mask, row_mask, steer_keys
from vheads.evaluation._headsets import HeadSet
from vheads.models import Prompt


@dataclass(frozen=True)
class Action:
    """What to do to each head-set's heads.

    ``kind="mask"``: hide ``keys`` from the heads at ``rows``; ``keys`` is ``image``, a
    region name, or ``text`` (the question and option tokens).
    ``kind="steer"``: steer the heads onto region ``target`` with strength ``beta``.
    """

    kind: str
    rows: str = "all"
    keys: str = "image"
    target: str | None = None
    beta: float = 1e4


def key_positions(prompt: Prompt, keys: str) -> list[int]:
    lay = prompt.layout
    if keys == "image":
        return lay.image_positions.tolist()
    if keys == "text":
        return lay.spans.get("question", []) + lay.spans.get("options", [])
    if keys in lay.regions:
        return lay.regions[keys].positions.tolist()
    raise ValueError(f"unknown key group {keys!r} for item {prompt.item.id!r}; use image, text or a region ({', '.join(lay.regions)})")


def option_probs(engine: Engine, prompt: Prompt, headsets: list[HeadSet], action: Action | None, batch_size: int = 64, prefix_reuse: bool = True) -> np.ndarray:
    """P over the four option letters at the last prompt row, one row per head-set: [N, 4].

    ``action=None`` (or an empty list of head-sets) gives the unintervened baseline [1, 4].
    """
    T = prompt.layout.n_tokens
    last = prompt.layout.last
    if action is None or not headsets:
        logits = engine.forward(prompt, None, logits_at=[last]).logits[:, 0]
        return engine.letter_probs(logits).cpu().numpy()
    L, H = engine.shape
    rows = row_mask(prompt.layout, action.rows)
    out = []
    for start in range(0, len(headsets), batch_size):
        chunk = headsets[start : start + batch_size]
        B = len(chunk)
        heads = torch.zeros(B, L, H, dtype=torch.bool)
        for b, hs in enumerate(chunk):
            if (hs.n_layers, hs.n_heads) != (L, H):
                raise ValueError(f"head-set of a {hs.n_layers}x{hs.n_heads} model used on a {L}x{H} model")
            heads[b] = torch.from_numpy(hs.as_mask())
        r = rows.expand(B, T)
        if action.kind == "mask":
            iv = mask_keys(heads, r, positions_mask(T, key_positions(prompt, action.keys)).expand(B, T))
        elif action.kind == "steer":
            if action.target not in prompt.layout.regions:
                raise ValueError(f"steer target {action.target!r} is not a region of item {prompt.item.id!r}")
            tgt = positions_mask(T, prompt.layout.regions[action.target].positions).expand(B, T)
            img = positions_mask(T, prompt.layout.image_positions).expand(B, T)
            iv = steer_keys(heads, r, tgt, img, action.beta)
        else:
            raise ValueError(f"unknown action kind {action.kind!r}; use mask or steer")
        logits = engine.forward(prompt, engine.plan(B, [iv]), prefix_reuse=prefix_reuse, logits_at=[last]).logits[:, 0]
        out.append(engine.letter_probs(logits).cpu().numpy())
    return np.concatenate(out)
