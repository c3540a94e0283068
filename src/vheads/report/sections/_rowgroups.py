"""Necessity per row group and per arm (the seed's Tables 5, 13 and 11)."""

from __future__ import annotations

from vheads.report import _tables as T
from vheads.report._data import RunData
from vheads.report._registry import section

HOW = (
    "NCS masks S from all image tokens; here the mask acts only at one group of query rows (all rows, image "
    "rows, question/option rows, last row). Where the NCS sits tells at which positions the heads read the "
    "image. The arms table splits NCS into the matched drop (the image shows the keyed class) and the "
    "mismatched drop (it does not): a real visual effect lives in the matched drop."
)


@section("rowgroups", "Necessity per row group and per arm", HOW, order=70, needs=("outcomes", "arms"),
         tables=("NCS per row group*", "NCS split into its arms*"))
def rowgroups(run: RunData) -> list:
    return [T.row_group_table(run), T.arms_table(run)]
