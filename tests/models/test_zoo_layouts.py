"""Layouts of the families whose image block is more than one grid (tiles, thumbnails, row
breaks, markers), checked against the model itself.

A region's tokens must be the tokens whose vision features change when the region's
pixels change. The check reads the embeddings the model itself scatters into the prompt
(the language model's ``inputs_embeds``) while every attention module of the vision tower
outputs zeros: every token's feature then depends on its own patches only, so "this
token changed" means "this token's processed pixels changed" — in every tile and in the
thumbnail, with no knowledge of the adapter's geometry.
"""

from __future__ import annotations


import pytest
import torch
from PIL import Image

from tests.conftest import ZOO_FAMILIES
from vheads.data import Item
from vheads.doctor._pixels import lm_input_embeds
from vheads.models import load_model
from vheads.models.tiny_random import build_tiny_random


def _lm_input_embeds(lm, prompt) -> torch.Tensor:
    """The embeddings the model hands its language model, its vision tower patch-local: [T, D]
    (the doctor's pixel check, ``vheads.doctor._pixels``, is the same code)."""
    return lm_input_embeds(lm.model, prompt.inputs, local_vision=True)


def _pair(size, box, colour=(255, 0, 0)):
    base = Image.new("RGB", size, (0, 0, 255))
    for x in range(0, size[0], 3):  # some texture, so no two patches are alike
        for y in range(0, size[1], 4):
            base.putpixel((x, y), ((x * 7) % 255, (y * 11) % 255, 200))
    changed = base.copy()
    changed.paste(colour, box)
    return base, changed


CASES = [((96, 64), (0, 0, 40, 40)), ((64, 64), (16, 16, 48, 48)), ((150, 50), (50, 0, 110, 50)), ((70, 130), (10, 60, 60, 120))]


@pytest.mark.parametrize("family", ZOO_FAMILIES + ["gemma4"])  # and Gemma 4's aspect-preserving, pooled grid
@pytest.mark.parametrize("size,box", CASES)
def test_region_tokens_are_the_tokens_whose_pixels_change(loaded, family, size, box):
    _check_region_tokens_against_pixel_changes(loaded[family], size, box)


@pytest.fixture(scope="module")
def onevision_pooled(tmp_path_factory):
    """OneVision with a budget of one tile's worth of tokens: every tiled grid is shrunk."""
    path = build_tiny_random("llava_onevision", tmp_path_factory.mktemp("ov") / "m", vision_aspect_ratio="anyres_max_1")
    return load_model(str(path))


@pytest.mark.parametrize("size,box", CASES)
def test_pooled_onevision_region_tokens_are_the_tokens_whose_pixels_change(onevision_pooled, size, box):
    lay = _check_region_tokens_against_pixel_changes(onevision_pooled, size, box)
    g = lay.grid[0]
    assert (lay.image_tile > 0).sum() < 2 * g * g  # the tiles' grid was shrunk (unpooled: >= 2 tiles of g x g)


def _check_region_tokens_against_pixel_changes(lm, size, box):
    base, changed = _pair(size, box)
    p0 = lm.adapter.build(Item("a", "test", base, "what is in panel 1 ?", "red", regions={"r": box}), lm.processor)
    p1 = lm.adapter.build(Item("b", "test", changed, "what is in panel 1 ?", "red", regions={"r": box}), lm.processor)
    lay = p0.layout
    assert torch.equal(p0.inputs["input_ids"], p1.inputs["input_ids"])
    diff = (_lm_input_embeds(lm, p0) - _lm_input_embeds(lm, p1)).abs().amax(-1)  # [T]
    moved = set((diff > 1e-6).nonzero().flatten().tolist())
    pos = lay.image_positions.tolist()
    # only pixel tokens carry pixels: text, markers, row breaks and newline slots never move
    assert moved <= set(pos), sorted(moved - set(pos))
    chosen = set(lay.regions["r"].positions.tolist())
    # every token the layout assigns to the region sees its pixels change ...
    assert chosen and chosen <= moved, sorted(chosen - moved)
    # ... and every token that changes lies at the region (within half a token: resampling blur)
    x0, y0, x1, y1 = box
    tb = lay.token_boxes
    for i, p in enumerate(pos):
        if p in moved:
            bx0, by0, bx1, by1 = tb[i].tolist()
            hw, hh = (bx1 - bx0) / 2, (by1 - by0) / 2
            assert bx1 > x0 - hw and bx0 < x1 + hw and by1 > y0 - hh and by0 < y1 + hh, (i, tb[i].tolist(), box)
    # per view (tile, thumbnail): the region is found in every view where pixels under a
    # token's centre change, and only there
    view = {p: int(t) for p, t in zip(pos, lay.image_tile)}
    centre = (tb[:, :2] + tb[:, 2:]) / 2
    inside = (centre[:, 0] > x0) & (centre[:, 0] < x1) & (centre[:, 1] > y0) & (centre[:, 1] < y1)
    core = {p for i, p in enumerate(pos) if p in moved and inside[i]}
    assert {view[p] for p in chosen} == {view[p] for p in core}
    return lay


@pytest.mark.parametrize("family", [f for f in ZOO_FAMILIES if f != "mistral3"])  # mistral3: one grid
def test_a_box_maps_to_tokens_in_every_tile_and_the_thumbnail(loaded, family):
    """A box over the whole image selects every token of every view."""
    lm = loaded[family]
    size = (150, 50)
    item = Item("w", "test", Image.new("RGB", size), "what ?", "x", regions={"all": (0, 0, *size)})
    lay = lm.adapter.build(item, lm.processor).layout
    assert len(lay.tiles) > 1, "the test image should be tiled"
    assert torch.equal(lay.regions["all"].positions, lay.image_positions)
    assert set(lay.image_tile.tolist()) == set(range(len(lay.tiles)))


@pytest.mark.parametrize("family", ZOO_FAMILIES)
def test_models_command_describes_the_image_block(family):
    from typer.testing import CliRunner

    import json

    from vheads.cli import app

    res = CliRunner().invoke(app, ["models", "--json"])
    assert res.exit_code == 0, res.output
    rows = {mt: r for r in json.loads(res.output) for mt in r["model_types"]}
    assert family in rows
    assert rows[family]["image_tokens"] and rows[family]["box_to_tokens"]


@pytest.mark.parametrize("family", [pytest.param(f, marks=[] if f == "internvl" else [pytest.mark.slow]) for f in ZOO_FAMILIES])
def test_discovery_ncs_and_cers_run_through_the_cli(tiny_random_dirs, family, tmp_path):
    """Smoke: `vheads discover` then `vheads evaluate --test cers --test ncs` on the saved tiny
    folder (InternVL by default; every family with VHEADS_SLOW=1)."""
    import json
    import math

    from typer.testing import CliRunner

    from vheads.cli import app

    out = tmp_path / "hs"
    r = CliRunner().invoke(app, ["discover", "--model", str(tiny_random_dirs[family]), "--corpus", "comics", "--query", "ordinal",
                                 "--source", "last", "--n", "2", "--k", "2", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    (hs,) = json.loads(r.stdout)
    assert hs["setting"] == "cm-ord-last" and len(hs["heads"]) == 2
    r = CliRunner().invoke(app, ["evaluate", "--headset", str(out / "cm-ord-last.json"), "--test", "cers", "--test", "ncs",
                                 "--controls", "layer-matched:2", "--n", "2", "--json"])
    assert r.exit_code == 0, r.output
    res = {row["test"]: row for row in json.loads(r.stdout)}
    assert {"cers", "ncs-all"} <= set(res)
    for row in res.values():
        assert math.isfinite(row["T_S"]) and len(row["per_item"]["values"]["S"]) == len(row["per_item"]["item_ids"]) > 0
