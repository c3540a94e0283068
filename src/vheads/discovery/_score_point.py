"""A discovery score as a point of the score space: :class:`ScorePoint`, a value on every axis of
:data:`AXES` (what each axis means: :mod:`vheads.discovery._score_space`), refused on creation when
the values do not fit together.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from vheads._errors import VheadsError


AXES: dict[str, tuple[str, ...]] = {
    "rows": ("last", "qspan", "out", "prompt", "image"),
    "region": ("target", "image"),
    "norm": ("raw", "image"),
    "keys": ("mass", "hit", "mean"),
    "across": ("mean", "frequency", "hit-frequency"),
    "select": ("flat", "per-layer", "elbow", "entropy"),
    "sinks": ("keep", "drop"),
}

#: the spatial entropies of the ``entropy`` selection (the point's ``entropy`` key; the first is the default)
ENTROPIES = ("shannon", "components")

#: the sink rule's defaults (``sinks="drop"``): hidden states at transformers' index 2 (the
#: output of decoder layer 1, where the massive activations of LLMs have appeared), a sink
#: above 10 × the median image-token norm of its item
SINK_LAYER, SINK_FACTOR = 2, 10.0


@dataclass(frozen=True)
class ScorePoint:
    """One discovery score: a value on every axis of :data:`AXES` and the head-set size ``k``
    (``None``: scaled to the model, :func:`resolve_k`). Bad values are refused on creation."""

    rows: str = "last"
    region: str = "target"
    norm: str = "raw"
    keys: str = "mass"
    across: str = "mean"
    select: str = "flat"
    k: int | None = None
    sinks: str = "keep"
    sink_layer: int | None = None  # sinks="drop": SINK_LAYER when unset
    sink_factor: float | None = None  # sinks="drop": SINK_FACTOR when unset
    entropy: str = "shannon"  # select="entropy": which spatial entropy (ENTROPIES)

    def __post_init__(self) -> None:
        for axis, values in AXES.items():
            if getattr(self, axis) not in values:
                raise VheadsError(f"unknown {axis} {getattr(self, axis)!r} in a score point; choose one of: {', '.join(values)}")
        if self.entropy not in ENTROPIES:
            raise VheadsError(f"unknown entropy {self.entropy!r} in a score point; choose one of: {', '.join(ENTROPIES)}")
        if self.entropy != "shannon" and self.select != "entropy":
            raise VheadsError(f"entropy {self.entropy!r} applies to select 'entropy' only; add select=entropy, or leave entropy out")
        if self.across == "hit-frequency" and self.keys != "hit":
            raise VheadsError(f"across 'hit-frequency' pools hits; it needs keys 'hit', got keys {self.keys!r}")
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1):
            raise VheadsError(f"a score point's k must be an integer of at least 1 (or unset), got {self.k!r}: it would select nothing")
        if self.sinks == "keep":
            given = [n for n in ("sink_layer", "sink_factor") if getattr(self, n) is not None]
            if given:
                raise VheadsError(f"{given[0]} applies to the sink rule only; add sinks=drop, or leave {given[0]} out")
            return
        layer = SINK_LAYER if self.sink_layer is None else self.sink_layer
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise VheadsError(f"sink_layer must be an integer of at least 0 (an index of the hidden states: 0 = the "
                              f"input embeddings, l = the output of decoder layer l-1), got {layer!r}")
        factor = SINK_FACTOR if self.sink_factor is None else self.sink_factor
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 1:
            raise VheadsError(f"sink_factor must be a finite number above 1 (a sink's hidden-state norm exceeds factor x the "
                              f"median image-token norm; at most 1 would drop about half the image), got {factor!r}")
        object.__setattr__(self, "sink_layer", layer)
        object.__setattr__(self, "sink_factor", float(factor))

    @property
    def needs_entropy(self) -> bool:
        return self.select == "entropy"

    @property
    def drops_sinks(self) -> bool:
        return self.sinks == "drop"

    def to_dict(self) -> dict:
        """The point's axes and k; the sink rule's keys only when it drops sinks (so a
        sink-blind point's record is what it was before the rule existed)."""
        d = asdict(self)
        if self.entropy == "shannon":  # the default: a point's record is what it was before the key existed
            d.pop("entropy")
        if not self.drops_sinks:
            for key in ("sinks", "sink_layer", "sink_factor"):
                d.pop(key)
        return d
