"""`vheads data preview`: a contact sheet of built items, with the target region framed."""

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from tests.data.photos import make_ilsvrc, make_photo_strips
from vheads.cli import app
from vheads.data.preview import TILE, contact_sheet, preview_items


def test_sheet_frames_each_items_target_in_green(tmp_path):
    train = make_ilsvrc(tmp_path)
    items = preview_items(f"imagenet:{train}", "grid-oracle", n=3, cell=32)
    sheet = np.asarray(contact_sheet(items, cols=3)).astype(int)
    for k, it in enumerate(items):
        x0, y0, x1, y1 = it.regions[it.target]
        s = TILE / it.image.width
        px = sheet[4 + int(y0 * s) + 1, k * (TILE + 8) + 4 + int((x0 + x1) / 2 * s)]  # top edge of the target's frame
        assert tuple(px) == (0, 200, 0), (it.id, px)


def test_preview_command_writes_the_sheet(tmp_path):
    strips = make_photo_strips(tmp_path / "s")
    out = tmp_path / "sheet.png"
    r = CliRunner().invoke(app, ["data", "preview", f"strips:{strips}", "--kind", "strip-referring", "--n", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    with Image.open(out) as im:
        assert im.width == 3 * (TILE + 8)


def test_preview_bad_input_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "sheet.png"
    for args, msg in [(["imagenet:/no/such/dir", "--kind", "grid-neutral"], "does not exist"),
                      (["synthetic", "--kind", "video"], "unknown item kind 'video'"),
                      (["synthetic", "--kind", "grid-neutral", "--n", "0"], "--n must be an integer from 1")]:
        r = CliRunner().invoke(app, ["data", "preview", *args, "--out", str(out)])
        assert r.exit_code == 2 and msg in r.output, r.output
        assert not out.exists()
