"""Figures that read on the page (issue 36.3): at most 16 panels per figure, every text at
least 8 pt at the size the page shows the figure (a 1,400 px wide window), every PNG at most
300 kB — on a study with every figure: twelve settings, the causal setting, score points,
sweeps, strips.

The size a figure is shown at is read off the page's CSS (``main``'s max-width and padding,
the two-column grid's gap), not from the report code: a wide figure takes the content width,
a narrow one a grid column, neither more than its own pixels or its ``max_width``."""

from __future__ import annotations

import re

import matplotlib.figure
import matplotlib.text
import pytest

from tests.report.synth import SETTINGS, make_run
from vheads.report import build_sections, load_run
from vheads.report._doc import CSS, Figure

WINDOW = 1400  # px
MIN_PT = 8.0
MAX_PANELS = 16
MAX_BYTES = 300_000
CSS_PX_PER_INCH = 96  # CSS: 1 in = 96 px; 1 pt = 1/72 in


def page_widths() -> tuple[float, float]:
    """(content width, grid column width) in CSS px at :data:`WINDOW`, from the CSS rules."""
    main = re.search(r"main\s*\{([^}]*)\}", CSS).group(1)
    max_w = float(re.search(r"max-width:\s*(\d+)px", main).group(1))
    pad = [float(v) for v in re.search(r"padding:\s*([\d\spx]+);", main).group(1).replace("px", "").split()]
    side = pad[1] if len(pad) > 1 else pad[0]
    content = min(WINDOW - 2 * side, max_w)  # content-box: max-width bounds the content, padding outside it
    grid = re.search(r"\.grid\s*\{([^}]*)\}", CSS).group(1)
    gaps = [float(v) for v in re.search(r"gap:\s*([\d\spx]+);", grid).group(1).replace("px", "").split()]
    col_gap = gaps[1] if len(gaps) > 1 else gaps[0]
    assert "repeat(2," in grid and "box-sizing" not in main
    return content, (content - col_gap) / 2


def shown_width(block: Figure, png_px: int) -> float:
    """The CSS px a figure is shown at: a wide one at most the content width, a narrow one at
    most a grid column, neither more than its own pixels nor its ``max_width``."""
    content, column = page_widths()
    return min(png_px, content if block.wide else column, block.max_width or png_px)


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    """Each figure block of the report with what its drawing recorded: panels, the smallest
    font size drawn (pt), the saved image's width (px) and dpi."""
    mp = pytest.MonkeyPatch()
    saved, texts = [], []
    draw_text, savefig = matplotlib.text.Text.draw, matplotlib.figure.Figure.savefig

    def record_text(self, renderer):
        draw_text(self, renderer)
        if self.get_visible() and self.get_text().strip():
            texts.append(self.get_fontsize())

    def record_figure(self, *args, **kwargs):
        texts.clear()
        out = savefig(self, *args, **kwargs)
        dpi = kwargs.get("dpi") or self.dpi
        panels = sum(1 for ax in self.axes if ax.get_visible() and not hasattr(ax, "_colorbar"))
        saved.append({"panels": panels, "min_pt": min(texts, default=99.0), "dpi": float(dpi)})
        return out

    mp.setattr(matplotlib.text.Text, "draw", record_text)
    mp.setattr(matplotlib.figure.Figure, "savefig", record_figure)
    try:
        d = make_run(tmp_path_factory.mktemp("figs"), settings=SETTINGS, R=9, causal=True, atp=True,
                     k_sweep_tests=("cers", "cers-sym", "ncs-all"), k_points=(1, 2, 4, 8, 16),
                     score_points={"cm-ord-gaze": "cm-ord-last", "cm-ord-vrh": None})
        sections, _ = build_sections(load_run(d))
    finally:
        mp.undo()
    blocks = [b for s in sections for b in s.blocks if isinstance(b, Figure)]
    assert len(blocks) == len(saved) and len(blocks) >= 10  # one drawing per figure, in order
    return list(zip(blocks, saved))


def png_width(png: bytes) -> int:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(png[16:20], "big")  # IHDR width


def test_every_figure_has_at_most_16_panels(figures):
    for block, rec in figures:
        assert 1 <= rec["panels"] <= MAX_PANELS, (block.name, rec["panels"])


def test_every_png_is_at_most_300_kb(figures):
    for block, _ in figures:
        assert len(block.png) <= MAX_BYTES, (block.name, len(block.png))


def test_every_text_is_at_least_8_pt_as_the_page_shows_it(figures):
    small = []
    for block, rec in figures:
        px = png_width(block.png)
        shown = shown_width(block, px)
        # a text of s pt is s·dpi/72 image px; shown at shown/px of its size, in CSS pt (96 px = 72 pt)
        pt = rec["min_pt"] * rec["dpi"] / CSS_PX_PER_INCH * shown / px
        if pt < MIN_PT - 1e-6:
            small.append(f"{block.name}: {rec['min_pt']:g} pt drawn, {pt:.1f} pt shown ({px} px shown at {shown:.0f})")
    assert not small, "\n".join(small)
