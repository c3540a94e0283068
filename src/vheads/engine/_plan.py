"""Probe plans: what one forward pass captures, masks and steers, per batch row.

Every tensor of a plan is indexed by *absolute* sequence position (0 … T-1) and carries
the batch dimension first, so batch row b can carry head-set b. A plan never stores a
per-layer attention map: an intervention is the product of three factors,
``heads [B, L, H] × rows [B, T] × key_bias [B, T]``, expanded only for the rows and the
layer being computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from vheads.engine._ablate import HeadAblation, OutputRecord
from vheads.models import check_attention_layers


def first_biased_key(key_bias: torch.Tensor) -> torch.Tensor:
    """The first position each batch row's key bias is non-zero at (``key_bias`` [B, T]): [B]
    long, T where it biases no key. The language model is causal outside image blocks, so no
    row before that position sees a biased key: the intervention cannot change it."""
    T = key_bias.shape[1]
    return torch.where(key_bias != 0, torch.arange(T, device=key_bias.device), T).amin(1)


@dataclass
class Intervention:
    """Add ``key_bias[b, t]`` to the logits of head (l, h) at query row q when
    ``heads[b, l, h]`` and ``rows[b, q]``. ``-inf`` in ``key_bias`` masks a key."""

    heads: torch.Tensor  # [B, L, H] bool
    rows: torch.Tensor  # [B, T] bool
    key_bias: torch.Tensor  # [B, T] float

    def __post_init__(self) -> None:
        b = self.heads.shape[0]
        if self.rows.shape[0] != b or self.key_bias.shape[0] != b:
            raise ValueError(
                f"intervention batch sizes disagree: heads {tuple(self.heads.shape)}, rows "
                f"{tuple(self.rows.shape)}, key_bias {tuple(self.key_bias.shape)}"
            )
        if self.rows.shape[1] != self.key_bias.shape[1]:
            raise ValueError(f"rows cover {self.rows.shape[1]} positions but key_bias {self.key_bias.shape[1]}")

    def action_key(self) -> torch.Tensor:
        """What this intervention does to each batch row's heads, as numbers (rows and key
        bias): [B, 2T] float, equal rows act alike."""
        return torch.cat([self.rows.float(), self.key_bias.float()], 1)


def mask_keys(heads: torch.Tensor, rows: torch.Tensor, keys: torch.Tensor) -> Intervention:
    """Hide ``keys [B, T]`` from ``heads [B, L, H]`` at ``rows [B, T]``: logit −∞, softmax
    renormalizes over the keys left (DESIGN.md "Mask")."""
    bias = torch.zeros(keys.shape, dtype=torch.float32)
    bias[keys.bool()] = float("-inf")
    return Intervention(heads.bool(), rows.bool(), bias)


def steer_keys(heads: torch.Tensor, rows: torch.Tensor, target: torch.Tensor, image: torch.Tensor, beta: float) -> Intervention:
    """Steer ``heads`` onto ``target [B, T]``: logit += β on the target's keys and −= β on
    every other image key (``image [B, T]``), at ``rows`` (DESIGN.md "Steer")."""
    if not torch.isfinite(torch.tensor(float(beta))):
        raise ValueError(f"steering strength beta must be finite, got {beta}")
    target, image = target.bool(), image.bool()
    bias = torch.zeros(target.shape, dtype=torch.float32)
    bias[image & ~target] = -float(beta)
    bias[target] = float(beta)
    return Intervention(heads.bool(), rows.bool(), bias)


#: what a capture reads of each query row's attention (see :class:`Capture`)
CAPTURE_STATS = ("mass", "hit")


@dataclass
class Capture:
    """Attention mass from query rows onto key groups, per (layer, head).

    Result ``[B, L, H, G]``: ``mean_{q: rows[b,q]} Σ_{t: groups[b,g,t]} A'[l,h][q,t]``
    (DESIGN.md "Region mass"). By default ``A' = A``, the raw attention (not renormalized
    over image tokens). Two options change what each row contributes:

    - ``norm [B, T]`` (bool): ``A'[q,t] = A[q,t]·1[t ∈ norm] / Σ_{u ∈ norm} A[q,u]``, the
      row's attention renormalized over those keys (0 for a row with no mass on them);
    - ``stat="hit"``: ``A'[q,t] = 1[t = argmax_u A'[q,u]]`` (after ``norm`` if given), so
      the result is the share of rows whose most-attended key lies in the group. Ties go to
      the FIRST maximal key in position order (``torch.argmax``).
    """

    rows: torch.Tensor  # [B, T] bool
    groups: torch.Tensor  # [B, G, T] bool
    name: str = "capture"
    norm: torch.Tensor | None = None  # [B, T] bool
    stat: str = "mass"

    def __post_init__(self) -> None:
        if self.stat not in CAPTURE_STATS:
            raise ValueError(f"unknown capture stat {self.stat!r}; choose one of: {', '.join(CAPTURE_STATS)}")


@dataclass
class ProbePlan:
    """The captures and interventions of one forward pass of batch ``batch_size``."""

    batch_size: int
    n_layers: int
    n_heads: int
    interventions: list[Intervention] = field(default_factory=list)
    captures: list[Capture] = field(default_factory=list)
    #: the softmax-attention layers (the only ones with heads); None: every layer. A capture
    #: leaves the rows of the other layers (linear attention: no attention map) at zero.
    attention_layers: tuple[int, ...] | None = None
    #: head-output ablations and records (:mod:`vheads.engine._ablate`)
    ablations: list[HeadAblation] = field(default_factory=list)
    records: list[OutputRecord] = field(default_factory=list)
    #: record the L2 norm of every row's hidden state at this index of transformers'
    #: ``hidden_states`` (0: the language model's input embeddings, the image tokens' as the
    #: vision tower and projector made them; ℓ ≥ 1: the output of decoder layer ℓ − 1, before
    #: any final norm) under ``"hidden_norm"``: ``[B, T]`` float32. None: nothing recorded.
    hidden_norm_layer: int | None = None

    def __post_init__(self) -> None:
        for iv in [*self.interventions, *self.ablations]:
            if tuple(iv.heads.shape) != (self.batch_size, self.n_layers, self.n_heads):
                raise ValueError(
                    f"intervention heads have shape {tuple(iv.heads.shape)}; this model and batch need "
                    f"({self.batch_size}, {self.n_layers}, {self.n_heads})"
                )
            if self.attention_layers is not None and len(self.attention_layers) < self.n_layers:  # a hybrid model
                check_attention_layers(iv.heads.any(dim=(0, 2)).nonzero().flatten().tolist(), self.attention_layers, self.n_layers)
        for c in self.captures:
            if c.rows.shape[0] != self.batch_size or c.groups.shape[0] != self.batch_size:
                raise ValueError(f"capture {c.name!r} has batch {c.rows.shape[0]}, plan has {self.batch_size}")
            if not c.rows.any(dim=1).all():
                raise ValueError(f"capture {c.name!r} selects no query row for some batch row")
        for r in self.records:
            if r.role.shape[0] != self.batch_size:
                raise ValueError(f"record {r.name!r} has batch {r.role.shape[0]}, plan has {self.batch_size}")
        if self.hidden_norm_layer is not None and not 0 <= self.hidden_norm_layer <= self.n_layers:
            raise ValueError(f"hidden-state norms at layer {self.hidden_norm_layer}: this model's hidden states are "
                             f"numbered 0 (input embeddings) … {self.n_layers} (the last decoder layer's output)")

    @property
    def actions(self) -> list:
        """Everything that acts on heads (interventions, then ablations): each has ``heads``
        [B, L, H] and ``action_key()`` (for layer-prefix sharing)."""
        return [*self.interventions, *self.ablations]

    @property
    def reads_every_row(self) -> bool:
        """A capture, a record or the hidden-state norms read every row of every layer (no
        layer-prefix sharing, no last-layer row cut)."""
        return bool(self.captures or self.records) or self.hidden_norm_layer is not None

    def first_row(self) -> int:
        """The first absolute position any action can change (for prefix reuse): a row it
        acts at, at or after the first key it biases in that batch row (the language model
        is causal outside image blocks: an earlier row sees none of the biased keys); a row
        an ablation replaces a head's output at; 0 with a record or hidden-state norms."""
        first = []
        for iv in self.interventions:
            after = torch.arange(iv.rows.shape[1])[None] >= first_biased_key(iv.key_bias)[:, None]  # [B, T]
            active = iv.rows & iv.heads.any(dim=(1, 2))[:, None] & after
            if active.any():
                first.append(int(active.any(0).nonzero()[0]))
        for ab in self.ablations:
            if ab.first_row() is not None:
                first.append(ab.first_row())
        for c in self.captures:
            first.append(int(c.rows.any(0).nonzero()[0]))
        if self.records or self.hidden_norm_layer is not None:
            first.append(0)
        return min(first) if first else 10**9

    def select(self, rows: torch.Tensor) -> "ProbePlan":
        """The plan of batch rows ``rows`` [B'] (long) only, in that order (interventions and
        ablations only)."""
        if self.reads_every_row:
            raise ValueError("a plan that captures or records cannot be cut to some of its batch rows")
        ivs = [Intervention(iv.heads[rows], iv.rows[rows], iv.key_bias[rows]) for iv in self.interventions]
        return ProbePlan(len(rows), self.n_layers, self.n_heads, ivs, [], self.attention_layers,
                         [ab.select(rows) for ab in self.ablations])

    def touches_layer(self, layer: int) -> bool:
        return bool(self.captures) or any(bool(iv.heads[:, layer].any()) for iv in self.interventions)
