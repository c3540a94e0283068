"""Every PIL mode becomes the RGB it means, or is refused with the file named (point 2).

Expected pixels are computed here with numpy from the stored values, independently of
``image_to_rgb``; the strip folder is read through the loader every corpus uses.
"""

import json

import numpy as np
import pytest
from PIL import Image

from tests.discovery.test_loaders import make_strip_folder
from tests.hardening.clitools import NO_MODEL, refused, vheads
from vheads.data.loaders import BACKGROUND, load_strip_folder

W, HT = 6 * 32, 32


def _strip_with(tmp_path, img: Image.Image, name="s0.png"):
    """A one-strip folder whose image is ``img`` (saved as PNG/TIFF by the name's suffix)."""
    folder = make_strip_folder(tmp_path / "strips", n=1)
    (folder / "s0.png").unlink()
    img.save(folder / name)
    d = json.loads((folder / "strips.json").read_text())
    d["strips"][0]["image"] = name
    (folder / "strips.json").write_text(json.dumps(d))
    return folder


def _pixels(folder) -> np.ndarray:
    (item,) = load_strip_folder(folder, "ordinal")
    return np.asarray(item.image)  # [H, W, 3] uint8


def test_16_bit_grey_is_scaled_not_clipped_to_white(tmp_path):
    v = (np.arange(W)[None, :] * 341 + np.arange(HT)[:, None] * 7).astype(np.uint16)  # 0 … 65,327
    got = _pixels(_strip_with(tmp_path, Image.fromarray(v)))
    want = np.rint(v / 65535 * 255).astype(np.uint8)
    assert np.abs(got.astype(int) - want[..., None].astype(int)).max() <= 1
    assert (got == 255).mean() < 0.01  # the old conversion made 99.9% of pixels 255


def test_alpha_is_composited_on_white(tmp_path):
    rng = np.random.default_rng(0)
    rgba = rng.integers(0, 256, size=(HT, W, 4), dtype=np.uint8)
    got = _pixels(_strip_with(tmp_path, Image.fromarray(rgba, "RGBA"))).astype(float)
    a = rgba[..., 3:] / 255.0
    want = a * rgba[..., :3] + (1 - a) * np.array(BACKGROUND)
    assert BACKGROUND == (255, 255, 255)
    assert np.abs(got - want).max() <= 1.0


def test_grey_with_alpha_and_palette_transparency(tmp_path):
    la = np.stack([np.full((HT, W), 40, np.uint8), np.tile(np.array([0, 255], np.uint8), (HT, W // 2))], axis=-1)
    got = _pixels(_strip_with(tmp_path, Image.fromarray(la, "LA")))
    assert (got[:, 0::2] == 255).all() and (got[:, 1::2] == 40).all()  # transparent → white, opaque → grey 40
    p = Image.new("P", (W, HT), 1)
    p.putpalette([0, 0, 0, 10, 20, 30] + [0] * 762)
    p.paste(0, (0, 0, 32, 32))
    p.info["transparency"] = 0
    got = _pixels(_strip_with(tmp_path / "p", p))
    assert (got[:, :32] == 255).all() and (got[:, 32:] == [10, 20, 30]).all()


def test_one_bit_and_cmyk(tmp_path):
    bw = np.zeros((HT, W), bool)
    bw[:, ::3] = True
    got = _pixels(_strip_with(tmp_path, Image.fromarray(bw)))
    assert (got[bw] == 255).all() and (got[~bw] == 0).all()
    cmyk = np.zeros((HT, W, 4), np.uint8)
    cmyk[:, :96, 0] = 255  # full cyan → no red
    got = _pixels(_strip_with(tmp_path / "c", Image.fromarray(cmyk, "CMYK"), "s0.tif"))
    assert (got[:, :96] == [0, 255, 255]).all() and (got[:, 96:] == 255).all()


def test_float_image_in_unit_range_is_scaled(tmp_path):
    f = (np.arange(W)[None, :] / (W - 1) * np.ones((HT, 1))).astype(np.float32)
    got = _pixels(_strip_with(tmp_path, Image.fromarray(f, "F"), "s0.tif"))
    assert np.abs(got[..., 0].astype(int) - np.rint(f * 255).astype(int)).max() <= 1


@pytest.mark.parametrize("make,name,fragment", [
    (lambda: Image.fromarray((np.ones((HT, W)) * 3.0).astype(np.float32), "F"), "s0.tif", "not [0, 1]"),
    (lambda: Image.fromarray(np.full((HT, W), 1 << 20, np.int32), "I"), "s0.tif", "not 16-bit"),
    (lambda: Image.new("RGB", (1, 1)), "s0.png", "1x1 pixels"),
    (lambda: Image.new("RGB", (10000, 40)), "s0.png", "aspect ratio"),
])
def test_images_that_cannot_be_read_faithfully_are_refused_naming_the_file(tmp_path, make, name, fragment):
    folder = _strip_with(tmp_path, make(), name)
    r = vheads("discover", "--model", NO_MODEL, "--corpus", f"strips:{folder}", "--query", "ordinal", "--out", tmp_path / "hs")
    refused(r, name, fragment)
    assert not (tmp_path / "hs").exists()


def _panels(folder, edit):
    d = json.loads((folder / "strips.json").read_text())
    edit(d["strips"][0]["panels"])
    (folder / "strips.json").write_text(json.dumps(d))
    return folder


def test_whole_number_float_boxes_are_accepted(tmp_path):
    folder = _panels(make_strip_folder(tmp_path / "f", n=1), lambda ps: [p.update(box=[float(v) for v in p["box"]]) for p in ps])
    (item,) = load_strip_folder(folder, "ordinal")
    assert item.regions["panel2"] == (32, 0, 64, 32)


@pytest.mark.parametrize("edit,fragment", [
    (lambda ps: ps[1].update(box=[32.5, 0, 64, 32]), "whole pixels"),
    (lambda ps: ps[1].update(box=list(ps[0]["box"])), "same box"),
    (lambda ps: ps[2].update(label="  "), "non-empty string"),
    (lambda ps: ps[2].update(label=None), "non-empty string"),
    (lambda ps: ps[0].update(box=[0, 0, True, 32]), "4 numbers"),
])
def test_bad_panels_are_refused_naming_the_strip(tmp_path, edit, fragment):
    folder = _panels(make_strip_folder(tmp_path / "f", n=2), edit)
    r = vheads("discover", "--model", NO_MODEL, "--corpus", f"strips:{folder}", "--query", "ordinal", "--out", tmp_path / "hs")
    refused(r, "strips.json", "strip 0", fragment)
    assert not (tmp_path / "hs").exists()
