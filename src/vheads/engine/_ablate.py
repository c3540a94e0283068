"""Head-output ablations and records: the per-head slice entering ``o_proj`` (DESIGN.md "Ablation types").

The attention function returns ``out [B, Tq, H, D]``; the attention module reshapes it to
``[B, Tq, H·D]`` and applies ``o_proj``, so ``out[b, t, h]`` is exactly head h's slice of
the projection's input. A :class:`HeadAblation` replaces that slice at some rows — by 0
(``zero``) or by a stored value per *row role* (``mean``, ``resample``) — and an
:class:`OutputRecord` sums it per row role (to build those stored values).

A row's role says which rows of two prompts play the same part (:func:`row_roles`):
``image:k`` (the k-th image token: the same grid position), ``last`` (the last prompt
row), ``question`` / ``options`` / ``answer`` (a text span: its rows pooled) and ``text``
(every other row: system prompt, template tokens). A :class:`RoleMeans` holds, per
(layer, head, role), the mean head output over a set of rows of that role.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vheads.models import TokenLayout

#: the text spans that are a role of their own (in this order of precedence)
ROLE_SPANS = ("question", "options", "answer")


def row_roles(layout: TokenLayout) -> list[str]:
    """The role of each of a prompt's positions: ``[T]`` names (module docstring)."""
    roles = ["text"] * layout.n_tokens
    for span in reversed(ROLE_SPANS):
        for t in layout.spans.get(span, []):
            roles[t] = span
    for k, t in enumerate(layout.image_positions.tolist()):
        roles[t] = f"image:{k}"
    roles[layout.last] = "last"
    return roles


@dataclass
class RoleMeans:
    """Mean head output per (layer, head, role) over some rows: ``means [L, H, R, D]``
    (float32), ``roles`` the R role names. ``label`` names where the values come from (a
    reference set, a donor item): rows ablated with the same label get the same values."""

    roles: list[str]
    means: torch.Tensor  # [L, H, R, D]
    label: str

    def index(self, roles: list[str], where: str) -> torch.Tensor:
        """The index in ``self.roles`` of each name in ``roles``: [T] long. A role these
        means lack is a ValueError naming it and ``where``."""
        at = {r: i for i, r in enumerate(self.roles)}
        missing = sorted({r for r in roles if r not in at})
        if missing:
            raise ValueError(f"{where}: the head outputs of {self.label} have no row of role(s) {', '.join(missing[:5])}"
                             f"; the reference items must have the same layout (as many image tokens, the same spans)")
        return torch.tensor([at[r] for r in roles], dtype=torch.long)


def pooled_means(sums: torch.Tensor, counts: torch.Tensor, roles: list[str], label: str) -> RoleMeans:
    """:class:`RoleMeans` from per-role sums ``[L, H, R, D]`` and row counts ``[R]``: the
    roles with no row are left out."""
    keep = (counts > 0).nonzero().flatten()
    means = sums[:, :, keep] / counts[keep].to(sums.dtype)[None, None, :, None]
    return RoleMeans([roles[i] for i in keep.tolist()], means.float(), label)


@dataclass
class HeadAblation:
    """Replace head h's output at query row q of batch row b when ``heads[b, l, h]`` and
    ``rows[b, q]``: by 0 (``values`` None) or by ``values[l, h, role[b, q]]``.

    ``values [L, H, R, D]`` (float32) holds every table this forward uses, concatenated
    along R; ``role [B, T]`` (long) is each row's index into it (-1 where none)."""

    heads: torch.Tensor  # [B, L, H] bool
    rows: torch.Tensor  # [B, T] bool
    values: torch.Tensor | None = None  # [L, H, R, D] float
    role: torch.Tensor | None = None  # [B, T] long

    def __post_init__(self) -> None:
        if self.rows.shape[0] != self.heads.shape[0]:
            raise ValueError(f"ablation batch sizes disagree: heads {tuple(self.heads.shape)}, rows {tuple(self.rows.shape)}")
        if (self.values is None) != (self.role is None):
            raise ValueError("an ablation with replacement values needs each row's role, and only then")
        if self.role is not None:
            if self.role.shape != self.rows.shape:
                raise ValueError(f"ablation roles cover {tuple(self.role.shape)}, rows {tuple(self.rows.shape)}")
            acted = self.rows & self.heads.any(dim=(1, 2))[:, None]
            if bool((acted & (self.role < 0)).any()):
                raise ValueError("an ablated row has no replacement value (role -1)")

    def action_key(self) -> torch.Tensor:
        """What this ablation does to each batch row's heads, as numbers (rows, and each
        row's replacement role; -2 for zero): [B, 2T] float, equal rows act alike."""
        role = self.role if self.role is not None else torch.full_like(self.rows, -2, dtype=torch.long)
        return torch.cat([self.rows.float(), role.float()], 1)

    def select(self, rows: torch.Tensor) -> "HeadAblation":
        return HeadAblation(self.heads[rows], self.rows[rows], self.values, None if self.role is None else self.role[rows])

    def first_row(self) -> int | None:
        """The first position this ablation changes in any batch row (None: none)."""
        on = (self.rows & self.heads.any(dim=(1, 2))[:, None]).any(0).nonzero()
        return int(on[0]) if len(on) else None


@dataclass
class OutputRecord:
    """Sum each batch row's head outputs per role: ``role [B, T]`` long (-1: not recorded),
    ``n_roles`` R. Result under ``name``: ``[B, L, H, R, D]`` float32 sums (rows of role r
    summed; the counts follow from ``role``)."""

    role: torch.Tensor  # [B, T] long
    n_roles: int
    name: str = "outputs"


def head_outputs(sched, layer: int, out: torch.Tensor, results: dict) -> torch.Tensor:
    """Apply the plan's ablations to layer ``layer``'s attention output ``out [B, Tq, H, D]``
    and add it to the plan's records; ``sched`` is the plan's work in this forward, on the
    device (:class:`vheads.engine._schedule.Schedule`: nothing is moved or tested on the host here)."""
    B, tq, H, D = out.shape
    for rec in sched.records:
        acc = results.get(rec.name)
        if acc is None:  # on the device, copied to the host once per forward (the runner)
            acc = results[rec.name] = torch.zeros(B, sched.plan.n_layers, H, rec.n_roles, D, device=out.device)
        sums = torch.zeros(B * rec.n_roles, H, D, device=out.device)  # [B·R, H, D]
        sums.index_add_(0, rec.slot, out.reshape(B * tq, H, D).index_select(0, rec.flat).float())  # every recorded row in one call
        acc[:, layer] += sums.view(B, rec.n_roles, H, D).transpose(1, 2)
    for ab in sched.ablations:
        if layer not in ab.layers:
            continue
        on = ab.on[:, :, None] & ab.heads[:, layer][:, None, :]  # [B, Tq, H]
        if ab.values is None:
            out = out.masked_fill(on[..., None], 0.0)
        else:
            v = ab.values[layer][:, ab.role]  # [H, B, Tq, D]
            out = torch.where(on[..., None], v.permute(1, 2, 0, 3).to(out.dtype), out)
    return out
