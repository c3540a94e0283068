"""A hybrid model's linear-attention layers have no heads: the report's layer axis shows them as such."""

import io

import numpy as np
from PIL import Image

from tests.report.synth import make_run
from vheads.report import load_run
from vheads.report._figures import score_map_figure

GREY = (217, 217, 217)  # the score map's colour for a layer with no heads


def _grey_pixels(png: bytes) -> int:
    px = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    return int((px == GREY).all(-1).sum())


def test_score_map_greys_out_the_layers_without_heads(tmp_path):
    settings = ["cm-ord-last"]
    lean = dict(row_groups=False, text=False, extra_controls=False, sweeps=False, overlap=False, strips=False)
    plain = load_run(make_run(tmp_path / "plain", settings=settings, **lean))
    hybrid = load_run(make_run(tmp_path / "hybrid", settings=settings, meta_extra={"attention_layers": [1, 3]}, **lean))
    assert plain.attention_layers is None and hybrid.attention_layers == [1, 3]
    # two of the four layers are blank: a large grey area that the plain map does not have
    assert _grey_pixels(score_map_figure(hybrid)) > 2000 + 20 * _grey_pixels(score_map_figure(plain))
