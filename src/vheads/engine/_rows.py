"""Row groups and position sets as boolean masks over a prompt's positions."""

from __future__ import annotations

import torch

from vheads.engine._constants import ROW_GROUPS
from vheads.models import TokenLayout


def positions_mask(n_tokens: int, positions) -> torch.Tensor:
    """Bool [T] that is True at ``positions``."""
    m = torch.zeros(n_tokens, dtype=torch.bool)
    pos = torch.as_tensor(list(positions) if not isinstance(positions, torch.Tensor) else positions, dtype=torch.long)
    if len(pos) and (pos.min() < 0 or pos.max() >= n_tokens):
        raise ValueError(f"positions {pos.tolist()} fall outside a prompt of {n_tokens} tokens")
    m[pos] = True
    return m


def row_mask(layout: TokenLayout, group: str) -> torch.Tensor:
    """Query rows of a row group (DESIGN.md): ``all``, ``image``, ``question`` (question and
    option rows), ``last`` (the last prompt row). Bool [T]."""
    T = layout.n_tokens
    if group == "all":
        return torch.ones(T, dtype=torch.bool)
    if group == "image":
        return positions_mask(T, layout.image_positions)
    if group == "question":
        return positions_mask(T, layout.spans.get("question", []) + layout.spans.get("options", []))
    if group == "last":
        return positions_mask(T, layout.spans["last"])
    raise ValueError(f"unknown row group {group!r}; choose one of {', '.join(ROW_GROUPS)}")
