"""What the discovered heads look at: the layer × head score maps and each setting's strips."""

from __future__ import annotations

import re

from vheads.report import _figures as F
from vheads.report._data import RunData
from vheads.report._registry import figure, section

HOW = (
    "The layer × head maps show each setting's discovery score (mean region mass from the source rows to the "
    "target panel); ringed heads form S. The strip figures show what the top heads look at: for a few strips, "
    "each head's attention mass from the source rows on each of the six panels (red bar: the panel it attends "
    "to most). A visual head should put its mass on the panel the question names."
)


@section("discovery", "What the discovered heads look at", HOW, order=30, needs=("discovery", "strip_attention"),
         figures=("score_maps", "strips_*"))
def discovery(run: RunData) -> list:
    blocks = [figure("score_maps", F.score_map_figure(run), "Layer × head discovery scores per setting (shared colour scale); "
                     "green rings: the heads of S.")]
    for s in run.settings:
        blocks.append(figure("strips_" + re.sub(r"[^A-Za-z0-9._-]", "_", s), F.strip_figure(run, s),
                             f"{s}: attention mass of its top heads (by discovery score) "
                             "from the source rows on each panel of a few strips.", wide=False))
    return blocks
