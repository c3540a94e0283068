"""A researcher's first afternoon (issue 44), as a new user runs it: their own checkpoint of a
real family saved locally with its tokenizer, image processor and chat template, discovery
on it, a head list of their own tested from another working folder, the JSON read back.

No network (every socket connect fails the test), no traceback, and each bad input one
``error:`` line with exit 2.
"""

from __future__ import annotations

import json
import shutil
import socket

import pytest

from tests.hardening.clitools import refused, vheads


@pytest.fixture(scope="module", autouse=True)
def no_network():
    """Any attempt to reach the network (the hub) fails at once, for the whole module (its
    module fixtures included)."""

    def connect(self, address):
        raise AssertionError(f"network access attempted: {address!r}")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", connect)
        mp.setattr(socket.socket, "connect_ex", connect)
        yield


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """``byom/qwen25vl-tiny``: a random Qwen2.5-VL with its files, as save_pretrained writes them."""
    from vheads.models.tiny_random import build_tiny_random

    root = tmp_path_factory.mktemp("afternoon")
    folder = build_tiny_random("qwen2_5_vl", root / "byom" / "qwen25vl-tiny")
    assert {"config.json", "preprocessor_config.json", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    return root, folder


@pytest.fixture(scope="module")
def discovered(checkpoint):
    """``vheads discover`` run from the folder above ``byom``, the model given as a relative path."""
    import os

    root, folder = checkpoint
    here = os.getcwd()
    os.chdir(root)
    try:
        r = vheads("discover", "--model", "byom/qwen25vl-tiny", "--corpus", "comics", "--query", "ordinal",
                   "--source", "last", "--n", "3", "--k", "2", "--out", "byom/hs", "--quiet")
    finally:
        os.chdir(here)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    return root / "byom" / "hs" / "cm-ord-last.json"


def test_a_head_set_file_finds_its_local_model_from_another_folder(checkpoint, discovered, tmp_path, monkeypatch):
    _, folder = checkpoint
    record = json.loads(discovered.read_text())
    assert record["model"]["id"] == "byom/qwen25vl-tiny"  # as the user gave it
    assert record["model"]["path"] == str(folder.resolve())  # and where it really is
    monkeypatch.chdir(tmp_path)  # somewhere else: the relative id means nothing here
    out = tmp_path / "results.json"
    r = vheads("evaluate", "--headset", discovered, "--test", "ncs", "--controls", "layer-matched:2", "--n", "3",
               "--seed", "5", "--quiet", "--out", out)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    (res,) = json.loads(out.read_text())
    assert res["model"]["fingerprint"] == record["model"]["fingerprint"]
    assert sorted(map(tuple, res["heads"])) == sorted(map(tuple, record["heads"]))
    assert (res["n"], res["seed"]) == (3, 5)
    assert len(res["per_item"]["arms"]["matched"]["S"]) == 3


def test_a_head_list_on_the_command_line_is_tested_and_recorded(checkpoint, tmp_path, monkeypatch):
    _, folder = checkpoint
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config", config)
    L, H = text["num_hidden_layers"], text["num_attention_heads"]
    heads = [(L - 1, 0), (0, H - 1)]
    monkeypatch.chdir(tmp_path)
    r = vheads("evaluate", "--model", folder, "--heads", ",".join(f"L{l}H{h}" for l, h in heads), "--test", "cers",
               "--controls", "layer-matched:2", "--n", "3", "--json", "--quiet")
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    (res,) = json.loads(r.stdout)
    assert sorted(map(tuple, res["heads"])) == sorted(heads)
    assert res["headset"] == "heads" and res["beta"] == 1e4 and res["beta_rule"]["rule"] == "fixed"
    assert res["model"]["path"] == str(folder.resolve())
    # the same heads as a notebook writes them, in a file: the same outcomes
    (tmp_path / "mine.json").write_text(json.dumps(heads))
    r2 = vheads("evaluate", "--model", folder, "--headset", tmp_path / "mine.json", "--test", "cers",
                "--controls", "layer-matched:2", "--n", "3", "--json", "--quiet")
    assert r2.exit_code == 0, r2.output
    (res2,) = json.loads(r2.stdout)
    assert res2["headset"] == "mine" and res2["per_item"]["values"]["S"] == res["per_item"]["values"]["S"]


def test_a_moved_model_folder_is_one_line_and_no_hub_call(checkpoint, discovered, tmp_path, monkeypatch):
    root, folder = checkpoint
    moved = tmp_path / "elsewhere.json"
    d = json.loads(discovered.read_text())
    d["model"]["path"] = str(tmp_path / "gone")
    moved.write_text(json.dumps(d))
    monkeypatch.chdir(tmp_path)
    line = refused(vheads("evaluate", "--headset", moved, "--test", "ncs", "--n", "3"), "not found", "--model FOLDER")
    assert "gone" in line and d["model"]["fingerprint"] in line


def _without(name):
    def damage(folder):
        for p in folder.glob(name):
            p.unlink()
    return damage


@pytest.mark.parametrize("damage,fragments", [
    (_without("preprocessor_config.json"), ["preprocessor_config.json", "a model folder needs"]),
    (_without("tokenizer*"), ["no tokenizer files", "tokenizer.json"]),
])
def test_a_model_folder_missing_a_processor_file_is_one_line(checkpoint, tmp_path, damage, fragments):
    _, folder = checkpoint
    copy = shutil.copytree(folder, tmp_path / "model")
    damage(copy)
    refused(vheads("audit", "--model", copy, "--n", "2"), str(copy), *fragments)
    refused(vheads("discover", "--model", copy, "--n", "2", "--out", tmp_path / "hs"), *fragments)
    refused(vheads("evaluate", "--model", copy, "--heads", "L0H0", "--n", "2"), *fragments)


@pytest.mark.parametrize("heads,fragment", [
    ("L1X0", "write L<layer>H<head> pairs"),
    ("L99H0", "out of range"),
    ("L0H0,L0H0", "more than once"),
])
def test_a_bad_head_list_is_one_line(checkpoint, heads, fragment):
    _, folder = checkpoint
    refused(vheads("evaluate", "--model", folder, "--heads", heads, "--test", "ncs", "--n", "2"), fragment)


@pytest.mark.parametrize("content,fragment", [
    ([[0, "a"]], "two integers"),
    ([[0, 0, 1]], "two integers"),
    ({"heads": []}, "empty head list"),
])
def test_a_bad_head_list_file_is_one_line(checkpoint, tmp_path, content, fragment):
    _, folder = checkpoint
    (tmp_path / "h.json").write_text(json.dumps(content))
    refused(vheads("evaluate", "--model", folder, "--headset", tmp_path / "h.json", "--n", "2"), "h.json", fragment)


def test_heads_without_a_model_are_refused_before_loading(tmp_path):
    refused(vheads("evaluate", "--heads", "L0H0", "--n", "2"), "need --model")
    refused(vheads("evaluate", "--n", "2"), "--heads L1H0,L2H3")


def test_panels_that_straddle_image_tokens_are_warned_about(tmp_path):
    """Qwen2.5-VL's released processor has 28-pixel tokens (patch 14, merge 2): a built-in strip
    of six 32-pixel panels becomes 7 tokens across, and panels share tokens (issue 44)."""
    import re

    from vheads.models.tiny_random import build_tiny_random

    folder = build_tiny_random("qwen2_5_vl", tmp_path / "q25", patch=14)
    with pytest.warns(UserWarning) as caught:
        r = vheads("discover", "--model", folder, "--corpus", "comics", "--query", "ordinal", "--source", "last",
                   "--n", "2", "--out", tmp_path / "hs", "--quiet")
    assert r.exit_code == 0, r.output
    (msg,) = [str(w.message) for w in caught if "tokens across" in str(w.message)]
    width, across, panels, split = map(int, re.search(r"(\d+)-pixel-wide strip (\d+) image tokens across for (\d+) "
                                                      r"panels, so (\d+) of", msg).groups())
    # independently: tokens of width/across pixels; a panel holds a token it covers at least half of, and
    # shares it when it covers it only in part
    tok = width / across
    want = 0
    for p in range(panels):
        x0, x1 = p * width / panels, (p + 1) * width / panels
        covers = [(min(x1, (t + 1) * tok) - max(x0, t * tok)) / tok for t in range(across)]
        want += any(0.5 - 1e-9 <= c < 1 - 1e-6 for c in covers)
    assert (width, across, panels) == (192, 7, 6) and split == want > 0
