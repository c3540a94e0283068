"""Every report figure fits its canvas: each text matplotlib draws (titles, tick labels, axis
and colour-bar labels, legends, annotations) lies inside the saved image, every axis that
shows tick labels has a label, and drawing raises no warning (one setting included, where
a tight layout used to fail)."""

from __future__ import annotations

import warnings

import matplotlib
import matplotlib.figure
import matplotlib.text
import numpy as np
import pytest

from tests.report.synth import SETTINGS, make_run
from vheads.report import load_run
from vheads.report._build import build_sections
from vheads.report._doc import Figure

SLACK = 1.0  # px: anti-aliasing rounding at the edge


@pytest.fixture
def drawn(monkeypatch):
    """Record, for each saved figure, the window extent of every text drawn into it (in the
    saved image's pixels) and the figure's own extent at that moment."""
    saved: list[dict] = []
    texts: list = []
    draw_text, savefig = matplotlib.text.Text.draw, matplotlib.figure.Figure.savefig

    def record_text(self, renderer):
        draw_text(self, renderer)
        if self.get_visible() and self.get_text().strip():
            texts.append((self, self.get_window_extent(renderer), self.get_figure(root=True).bbox.frozen()))

    def record_figure(self, *args, **kwargs):
        texts.clear()
        out = savefig(self, *args, **kwargs)
        saved.append({"figure": self, "texts": list(texts)})
        return out

    monkeypatch.setattr(matplotlib.text.Text, "draw", record_text)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record_figure)
    return saved


def figure_names(sections) -> list[str]:
    return [b.name for s in sections for b in s.blocks if isinstance(b, Figure)]


def check_saved(saved: list[dict]) -> None:
    assert saved, "no figure was drawn"
    for rec in saved:
        fig = rec["figure"]
        title = next((ax.get_title() for ax in fig.axes if ax.get_title()), "?")
        for text, bb, canvas in rec["texts"]:
            assert (bb.x0 >= canvas.x0 - SLACK and bb.y0 >= canvas.y0 - SLACK and bb.x1 <= canvas.x1 + SLACK
                    and bb.y1 <= canvas.y1 + SLACK), (
                f"figure {title!r}: text {text.get_text()!r} spans {[round(float(v)) for v in bb.extents]} and leaves "
                f"the canvas {[round(float(v)) for v in canvas.extents]} (x0, y0, x1, y1 in px)")
        drawn_texts = {id(t) for t, _, _ in rec["texts"]}
        for ax in fig.axes:
            if not ax.get_visible() or not ax.axison:
                continue
            for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
                ticks = [t for t in axis.get_ticklabels() if id(t) in drawn_texts]
                assert not ticks or label.strip(), (
                    f"figure {title!r}, panel {ax.get_title()!r}: the {axis.axis_name} axis has tick labels but no label")


@pytest.mark.parametrize("settings, meta", [(SETTINGS, None), (SETTINGS[:1], None), (["cm-ord-last", "ph-ord-last"], None),
                                            (["cm-ord-last", "cm-ref-qsp", "ph-ord-last", "ph-ref-qsp"], None),
                                            (SETTINGS[:1], {"attention_layers": [1, 3]})],
                         ids=["twelve", "one", "two", "four", "one-hybrid"])
def test_every_report_figure_fits_its_canvas_and_labels_its_axes(settings, meta, tmp_path, drawn):
    """``one-hybrid``: a hybrid model's score map greys its linear layers and says so in the
    colour-bar label, the longest label of any figure."""
    run = load_run(make_run(tmp_path / "run", settings=settings, meta_extra=meta, causal=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sections, _ = build_sections(run)
    names = figure_names(sections)
    assert {"random_band", "score_maps", "random_overlap", "beta_sweep", "k_sweep", "causal_map", "causal_vs_scores",
            "score_vs_effect"} <= set(names), names
    if len(settings) > 1:
        assert {"overlap", "overlap_curves"} <= set(names), names
    assert len(drawn) == len(names)  # each figure was checked
    assert not [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    check_saved(drawn)


def test_cross_model_figures_fit_their_canvas(tmp_path, drawn):
    """The cross-model report draws with the same functions, with longer row labels."""
    from vheads.report._figures import band_figure
    from vheads.report._overlaps import native_overlap_bars, overlap_bars_figure

    run = load_run(make_run(tmp_path / "run", settings=SETTINGS[:3]))
    labels = [f"qwen2_5_vl_7b · {s}" for s in run.settings]
    cells = {(f"qwen2_5_vl_7b · {s}", t): run.cells[(s, t)] for s in run.settings for t in ("cers", "ncs-all")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert band_figure(labels, cells, ["ncs-all", "cers"], shown=("layer-matched",))
        groups = native_overlap_bars(run)
        assert overlap_bars_figure([(f"qwen2_5_vl_7b · {g[0]}", *g[1:]) for g in groups] * 2)
    assert not [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    check_saved(drawn)


def test_the_check_catches_a_clipped_label_and_an_unlabelled_axis(drawn):
    """The checks above can fail: a label far outside the canvas, and a y axis without label."""
    import io

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot(np.arange(3))
    ax.set_xlabel("x")
    fig.text(0.9, 0.5, "a label that runs past the right edge")
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)
    with pytest.raises(AssertionError, match="leaves the canvas"):
        check_saved(drawn)
    drawn.clear()
    fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
    ax.plot(np.arange(3))
    ax.set_xlabel("x")
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)
    with pytest.raises(AssertionError, match="y axis has tick labels but no label"):
        check_saved(drawn)


def test_sweep_figures_are_one_panel_per_test_and_small(tmp_path, monkeypatch):
    """Issue 36.3: a sweep figure has one heat-map panel per test (not one per setting), and its
    PNG stays under 300 kB, with twelve settings swept over β and k."""
    import matplotlib.figure

    from tests.report.synth import make_run
    from vheads.report import load_run
    from vheads.report._data import sweep_points
    from vheads.report._figures import sweep_figure

    run = load_run(make_run(tmp_path / "run", R=5))
    seen = []
    orig = matplotlib.figure.Figure.savefig

    def savefig(self, *a, **k):
        seen.append(sum(1 for ax in self.axes if ax.get_visible() and not hasattr(ax, "_colorbar")))
        return orig(self, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    for param in ("beta", "k"):
        tests = {base for _, base in sweep_points(run, param)}
        assert len({s for s, _ in sweep_points(run, param)}) == 12
        png = sweep_figure(run, param)
        assert png is not None and len(png) <= 300_000
        assert seen[-1] == len(tests) <= 16
