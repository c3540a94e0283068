"""Generic-damage controls (the seed's Table 12)."""

from __future__ import annotations

from vheads.report import _tables as T
from vheads.report._data import RunData
from vheads.report._registry import section

HOW = (
    "A head-set can hurt because it is important, not because it is visual. The discovered S is set against "
    "head-sets chosen to be generically damaging or deliberately non-visual (sinks, text-heavy heads, whole "
    "layers, larger random sets) and against the text arm (S hidden from text tokens on text-solvable items). "
    "A visual S has a high NCS with a small text-arm drop; generic damage shows as a high text-arm drop and an "
    "NCS near zero."
)


@section("damage", "Generic-damage controls", HOW, order=80, needs=("outcomes",), tables=("Generic-damage*",))
def damage(run: RunData) -> list:
    return [T.generic_damage_table(run)]
