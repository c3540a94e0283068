"""Names from data never choose where files go; outputs never overwrite another run (points 1 and 6)."""

import json
import os
import stat

import numpy as np
import pytest

from tests.discovery.test_loaders import make_strip_folder
from tests.hardening.clitools import NO_MODEL, files_under, refused, vheads
from vheads._errors import VheadsError, path_inside


def _edit_index(folder, **top):
    p = folder / "strips.json"
    d = json.loads(p.read_text())
    d.update(top)
    p.write_text(json.dumps(d))


@pytest.mark.parametrize("key,value", [
    ("abbrev", "../../elsewhere/x"), ("abbrev", "/tmp/vheads-abs"), ("abbrev", "c-m"), ("abbrev", ""),
    ("corpus", "../x"), ("corpus", "a/b"), ("corpus", 7),
])
def test_a_path_in_strips_json_names_is_refused_and_nothing_is_written(tmp_path, key, value):
    work = tmp_path / "work"
    strips = make_strip_folder(work / "deep" / "strips", n=2)
    _edit_index(strips, **{key: value})
    before = files_under(tmp_path)
    out = work / "deep" / "hs"
    r = vheads("discover", "--model", NO_MODEL, "--corpus", f"strips:{strips}", "--query", "ordinal", "--n", "2", "--out", out)
    line = refused(r, "strips.json", f"'{key}'")
    assert "plain name" in line or "file name" in line
    assert files_under(tmp_path) == before  # not one file anywhere, out not made
    if key == "abbrev" and value.startswith("/"):
        assert not os.path.exists(value + "-ord-last.json")


@pytest.mark.parametrize("image", ["../outside.png", "/etc/hostname", "sub/../../x.png"])
def test_an_image_outside_the_strip_folder_is_refused(tmp_path, image):
    strips = make_strip_folder(tmp_path / "strips", n=2)
    d = json.loads((strips / "strips.json").read_text())
    d["strips"][0]["image"] = image
    (strips / "strips.json").write_text(json.dumps(d))
    refused(vheads("discover", "--model", NO_MODEL, "--corpus", f"strips:{strips}", "--query", "ordinal", "--out", tmp_path / "hs"),
            "strips.json", "'image'", "relative")
    assert not (tmp_path / "hs").exists()


def test_output_paths_are_resolved_and_kept_inside_their_folder(tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    assert path_inside(root, "cm-ord-last.json") == (root / "cm-ord-last.json").resolve()
    for bad in ("../x.json", "/etc/x.json", "a/../../x.json"):
        with pytest.raises(VheadsError, match="outside the output folder"):
            path_inside(root, bad)
    (root / "link").symlink_to(tmp_path)  # a symlink inside the folder that leads out of it
    with pytest.raises(VheadsError, match="outside the output folder"):
        path_inside(root, "link/x.json")


def test_a_folder_name_that_is_not_a_plain_name_becomes_one(tmp_path):
    from vheads.discovery import load_corpus

    strips = make_strip_folder(tmp_path / "my comics (v2)", n=2)
    d = json.loads((strips / "strips.json").read_text())
    del d["corpus"], d["abbrev"]
    (strips / "strips.json").write_text(json.dumps(d))
    c = load_corpus(f"strips:{strips}", "ordinal", 2)
    assert c.name == "my_comics__v2_" and c.abbrev == "my"
    assert all("/" not in it.id for it in c.items)


def test_discover_refuses_an_out_folder_holding_head_sets_unless_forced(tmp_path):
    out = tmp_path / "hs"
    out.mkdir()
    (out / "cm-ord-last.json").write_text("{}")
    refused(vheads("discover", "--model", NO_MODEL, "--corpus", "comics", "--out", out), "already holds head-set files", "--force")
    assert files_under(out) == {"cm-ord-last.json"} and (out / "cm-ord-last.json").read_text() == "{}"
    # with --force the check passes and the run goes on to the model (which does not exist here)
    r = vheads("discover", "--model", NO_MODEL, "--corpus", "comics", "--query", "ordinal", "--n", "2", "--out", out, "--force")
    assert r.exit_code == 2 and NO_MODEL in r.stderr


def test_discover_refuses_an_out_that_is_a_file_before_work(tmp_path):
    f = tmp_path / "hs"
    f.write_text("keep me")
    refused(vheads("discover", "--model", NO_MODEL, "--corpus", "comics", "--out", f), "is a file")
    assert f.read_text() == "keep me"


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_head_set_files_follow_the_umask(tmp_path, umask):
    from tests.discovery.test_files import _record
    from vheads.discovery import save_headset
    from vheads.discovery._files import save_per_item

    old = os.umask(umask)
    try:
        p = save_headset(_record(), tmp_path / "h.json")
        q = save_per_item(tmp_path / "h.items.npz", np.zeros((2, 1, 1)), ["a", "b"], "sha256:x")
    finally:
        os.umask(old)
    for f in (p, q):
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask
