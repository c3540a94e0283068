"""Grounding against random controls: does S's attention point at the referred cell, and is
its box right, more than random head-sets' (vheads.evaluation._grounding)?"""

from __future__ import annotations

import json

import numpy as np

from vheads.report import _tables as T
from vheads.report._data import RunData
from vheads.report._registry import figure, section

HOW = (
    "Each head-set's attention from the last prompt token onto the image tokens, per head renormalised over the image "
    "and averaged over the head-set's heads, is drawn on the image through the model's exact token borders. Pointing: "
    "the share of items whose map peaks inside the referred cell (the question names it: 'what is in cell k ?'). IoU: "
    "the box of the largest connected region at least half the peak against the cell's box (Acc@0.5: IoU ≥ 0.5, stored "
    "beside it). S and every control are read from the same capture (one forward per item). Pointing and IoU against "
    "the controls stand in Table 3 and their verdicts in the Findings; here Acc@0.5, with Table 3's columns: "
    "controls' mean ± SD, z, one-sided rank p and, in parentheses, Holm over the settings. The figure shows S's map "
    "(heat) with the true box (green) and the box rule's box (red, dashed)."
)
TESTS = ["grounding-acc50"]
#: items of the figure, and settings shown (the first ones in the report's order)
FIGURE_ITEMS, FIGURE_SETTINGS = 3, 2


def load_grounding_maps(run: RunData) -> dict[str, list[dict]]:
    """S's stored maps (``grounding/<setting>--<item>.json``, :mod:`vheads.study._grounding`) by setting."""
    folder = run.run_dir / "grounding"
    out: dict[str, list[dict]] = {}
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            m = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        m["png"] = p.with_suffix(".png")
        out.setdefault(m.get("setting", ""), []).append(m)
    return out


def grounding_figure(run: RunData) -> bytes | None:
    """For the first settings with stored maps, S's map on a few items over the image, with
    the true box (green) and the box rule's (red, dashed)."""
    import matplotlib.pyplot as plt

    from vheads.report._figures import _png

    maps = load_grounding_maps(run)
    settings = [s for s in run.settings if s in maps][:FIGURE_SETTINGS]
    if not settings:
        return None
    n = max(min(len(maps[s]), FIGURE_ITEMS) for s in settings)
    fig, axes = plt.subplots(len(settings), n, figsize=(2.0 * n, 2.1 * len(settings)), squeeze=False)
    for r, s in enumerate(settings):
        for c in range(n):
            ax = axes[r, c]
            ax.axis("off")
            if c >= len(maps[s]):
                continue
            m = maps[s][c]
            xs, ys, d = np.asarray(m["xs"]), np.asarray(m["ys"]), np.asarray(m["density"], dtype=float)
            if m["png"].is_file():
                ax.imshow(plt.imread(m["png"]), extent=(0, xs[-1], ys[-1], 0), zorder=0)
            ax.pcolormesh(xs, ys, d, cmap="inferno", alpha=0.55, shading="flat", zorder=1)
            x0, y0, x1, y1 = m["truth"]
            ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ec="#2ecc71", lw=2, zorder=2))
            if all(np.isfinite(m["box"])):
                x0, y0, x1, y1 = m["box"]
                ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ec="#e74c3c", lw=1.6, ls="--", zorder=3))
            ax.set_xlim(0, xs[-1])
            ax.set_ylim(ys[-1], 0)
            ax.set_title(f"{s}: {m.get('question', '')}" if c == 0 else m.get("question", ""), fontsize=7, loc="left")
    fig.tight_layout(pad=0.3)
    return _png(fig)


@section("grounding", "Grounding against random controls", HOW, order=27, needs=("outcomes", "headsets", "meta"),
         tables=("Grounding: *",), figures=("grounding_maps",))
def grounding_section(run: RunData) -> list:
    table = T.significance_table(
        run, TESTS, "Grounding: Acc@0.5 of every setting's S against its controls",
        "S: the share of items whose box-rule box has IoU ≥ 0.5 with the referred cell's box, with a 95% t-interval over "
        "items (pointing accuracy and mean IoU: Table 3). Controls: mean ± SD over the n distinct head-sets compared; z; one-sided "
        "rank p, Holm-adjusted p in parentheses (family: the settings, per measure and control type).")
    if table is None:
        return []
    return [table, figure("grounding_maps", grounding_figure(run),
                          "S's aggregated map (heat) on the first grid-oracle items, the referred cell's box (green) and "
                          "the box rule's box (red, dashed: the largest connected region at least half the peak).")]
