"""The report page as Chromium renders it at 1,400 px (skipped without Chromium): no table,
figure or image reaches past the page's content box (folded tables opened), the page does not
scroll sideways, every image loads and is shown at the width the figure checks assume, and
every link of the page (contents, findings) leads to an element of the page."""

from __future__ import annotations

import re

import pytest

from tests.report.synth import SETTINGS, make_run
from tests.report.test_figures_read import WINDOW, png_width, shown_width
from vheads.report import build_report, build_sections, load_run
from vheads.report._doc import Figure
from vheads.report._screenshot import find_chromium, page_check

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="no chromium installed")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A report with every section and its widest tables: twelve settings, the causal setting
    and its AtP map, score points (one identical to a grid setting), NCS under two ablations."""
    d = make_run(tmp_path_factory.mktemp("page"), settings=SETTINGS, R=9, causal=True, atp=True, ablations=("zero",),
                 score_points={"cm-ord-gaze": "cm-ord-last", "cm-ord-vrh": None},
                 meta_extra={"fallbacks": {s: ["layer 3: S has 3 heads there but only 1 other head"] for s in SETTINGS}})
    html = build_report(d)
    result = page_check(html, width=WINDOW)
    assert result is not None, "chromium is installed but rendered nothing"
    sections, _ = build_sections(load_run(d))
    return html.read_text(), result, sections


def test_nothing_reaches_past_the_page_width(page):
    _, r, _ = page
    assert r["viewport"] == WINDOW
    assert r["page_width"] <= r["viewport"]  # no sideways scrolling
    assert r["overflow"] == [], r["overflow"]


def test_every_image_loads_at_the_width_the_figure_checks_assume(page):
    html, r, sections = page
    figures = {b.name: b for s in sections for b in s.blocks if isinstance(b, Figure)}
    assert r["broken_images"] == []
    assert sorted(i["name"] for i in r["images"]) == sorted(figures)  # every figure is an image of the page
    for img in r["images"]:
        block = figures[img["name"]]
        assert img["natural"] == png_width(block.png)
        assert abs(img["shown"] - shown_width(block, img["natural"])) <= 2.0, img  # its 1 px border, when squeezed


def test_every_link_resolves(page):
    html, r, sections = page
    assert r["broken_links"] == []
    nav = re.search(r"<nav>(.*?)</nav>", html, re.S).group(1)
    assert re.findall(r'href="#([^"]+)"', nav) == [s.id for s in sections]  # the contents: one link per section
    assert len(r["links"]) > len(sections)  # the findings' links were checked too
