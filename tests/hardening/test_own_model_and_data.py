"""Hostile inputs of a researcher's first afternoon (issue 44): their own data files, boxes,
counts, devices and hub ids. Each is refused with one ``error:`` line (exit 2, no
traceback), before the model loads where the input needs no model; the small annoyances
around it (a rerun of ``data preview``, ``report --screenshot`` without Chromium, the help
pages) behave as a user expects."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from PIL import Image

from tests.data.benchmarks import make_mcq_jsonl
from tests.hardening.clitools import NO_MODEL, SRC, refused, vheads


def _strips(root, boxes=None, images=("s0.png", "s1.png", "s2.png")):
    """A strip folder of 6 panels of 32 x 32 pixels per strip (192 x 32 images)."""
    root.mkdir(parents=True, exist_ok=True)
    labels = ["dog", "cat", "car", "bus", "cup", "owl"]
    for name in dict.fromkeys(images):
        Image.new("RGB", (192, 32), "white").save(root / name)
    boxes = boxes or [[p * 32, 0, (p + 1) * 32, 32] for p in range(6)]
    strips = [{"image": name, "panels": [{"box": b, "label": lab} for b, lab in zip(boxes, labels)]} for name in images]
    (root / "strips.json").write_text(json.dumps({"strips": strips}))
    return root


def _discover(folder, tmp_path, *args):
    return vheads("discover", "--model", NO_MODEL, "--corpus", f"strips:{folder}", "--query", "ordinal",
                  "--out", tmp_path / "hs", *args)


def test_boxes_given_as_x_y_w_h_are_refused_with_the_convention(tmp_path):
    xywh = [[p * 32, 0, 32, 32] for p in range(6)]  # x, y, width, height: panel 2 becomes (32, 0) to (32, 32)
    line = refused(_discover(_strips(tmp_path / "st", xywh), tmp_path), "panel 2", "[32, 0, 32, 32]",
                   "[x0, y0, x1, y1]", "looks like [x, y, width, height]")
    assert "[32, 0, 64, 32]" in line  # what to write instead
    assert not (tmp_path / "hs").exists()


def test_a_box_outside_the_image_is_not_said_to_look_like_x_y_w_h(tmp_path):
    boxes = [[p * 32, 0, (p + 1) * 32, 32] for p in range(5)] + [[160, 0, 200, 32]]  # 8 pixels past the right edge
    line = refused(_discover(_strips(tmp_path / "st", boxes), tmp_path), "panel 6", "lies outside the 192x32 image")
    assert "looks like" not in line


def test_an_image_listed_twice_in_strips_json_is_refused(tmp_path):
    refused(_discover(_strips(tmp_path / "st", images=("s0.png", "s1.png", "s0.png")), tmp_path),
            "strips 0 and 2", "'s0.png'", "list each image once")


def test_a_seed_too_large_for_64_bits_names_the_config_file(tmp_path):
    cfg = tmp_path / "study.toml"
    cfg.write_text(f"seed = {2 ** 64}\n")
    refused(vheads("study", cfg, "--out", tmp_path / "run"), str(cfg), "'seed'", "64-bit")
    assert not (tmp_path / "run").exists()


def test_more_items_than_mcq_questions_is_refused_naming_the_count(tmp_path):
    path, qa = make_mcq_jsonl(tmp_path / "m", n=6)
    usable = sum(len(c) >= 4 for _, c, _ in qa)
    line = refused(vheads("evaluate", "--model", NO_MODEL, "--heads", "L0H0", "--test", "ncs",
                          "--n", str(usable + 1), "--source", f"mcq:{path}"), f"{usable} usable questions", "never repeated")
    assert f"{usable + 1} items asked" in line


def test_every_mcq_image_is_read_before_the_model_whatever_n(tmp_path):
    path, _ = make_mcq_jsonl(tmp_path / "m", n=6)
    (tmp_path / "m" / "img" / "4.png").unlink()  # a row the first two items may never draw
    for cmd in (["evaluate", "--heads", "L0H0", "--test", "ncs"], ["audit"]):
        refused(vheads(*cmd, "--model", NO_MODEL, "--n", "2", "--source", f"mcq:{path}"), "4.png")


def test_mcq_items_are_different_questions(tmp_path):
    """--n as many items as questions: each question exactly once (no silent repeats)."""
    from vheads.data.ood import item_source

    path, qa = make_mcq_jsonl(tmp_path / "m", n=6)
    usable = sum(len(c) >= 4 for _, c, _ in qa)
    items = item_source(f"mcq:{path}", cell=32).items("class-matched", usable, seed=3)
    assert sorted(it.meta["task_question"] for it in items) == sorted({it.meta["task_question"] for it in items})
    assert len(items) == usable


def test_a_corpus_smaller_than_n_is_used_whole_with_a_warning(tmp_path):
    folder = _strips(tmp_path / "st")
    with pytest.warns(UserWarning, match="has 3 usable items, fewer than the 8 asked"):  # printed on stderr by the CLI
        r = vheads("discover", "--corpus", f"strips:{folder}", "--query", "ordinal", "--source", "last", "--n", "8",
                   "--out", tmp_path / "hs", "--quiet")
    assert r.exit_code == 0, r.output
    (f,) = (tmp_path / "hs").glob("*-ord-last.json")
    assert json.loads(f.read_text())["corpus"]["n_items"] == 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
@pytest.mark.parametrize("cmd", [["doctor"], ["audit"], ["evaluate", "--heads", "L0H0"], ["discover"]])
def test_device_cuda_without_cuda_names_the_device_flag(tmp_path, cmd):
    line = refused(vheads(*cmd, "--model", NO_MODEL, "--device", "cuda", *(["--out", tmp_path / "hs"] if cmd == ["discover"] else [])),
                   "--device:", "CUDA is not available")
    assert "--device-map" not in line


def test_evaluate_out_that_is_a_folder_is_one_line(tmp_path):
    refused(vheads("evaluate", "--model", NO_MODEL, "--heads", "L0H0", "--out", tmp_path), "is a folder", "results.json")


def test_a_hub_id_not_in_the_cache_while_offline_is_one_line(monkeypatch):
    import socket

    from huggingface_hub import constants

    def connect(self, address):
        raise AssertionError(f"network access attempted: {address!r}")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as HF_HUB_OFFLINE=1 sets it at import
    monkeypatch.setattr(socket.socket, "connect", connect)
    refused(vheads("audit", "--model", "nobody/no-such-vlm", "--n", "2"), "'nobody/no-such-vlm'",
            "not in the Hugging Face cache", "HF_HUB_OFFLINE")


@pytest.mark.slow
def test_offline_from_the_environment_is_one_line(tmp_path):
    """The same from a shell: ``HF_HUB_OFFLINE=1 vheads audit --model ID`` (a fresh process)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": SRC}
    r = subprocess.run([sys.executable, "-m", "vheads", "audit", "--model", "nobody/no-such-vlm", "--n", "2"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    refused(r, "'nobody/no-such-vlm'", "not in the Hugging Face cache", "HF_HUB_OFFLINE")


def test_data_preview_reruns_over_its_own_sheet(tmp_path):
    out = tmp_path / "sheet.png"
    for _ in range(2):
        r = vheads("data", "preview", "synthetic", "--kind", "grid-neutral", "--n", "2", "--out", out)
        assert r.exit_code == 0, r.output
    assert Image.open(out).size[0] > 0


def test_report_screenshot_without_chromium_says_so(tmp_path, monkeypatch):
    from tests.report.synth import make_run

    import vheads.report._screenshot as shot

    # a machine without Chromium: no browser name resolves on PATH (what find_chromium reads)
    real_which = shot.shutil.which
    monkeypatch.setattr(shot.shutil, "which", lambda name, *a, **kw: None if name in shot.CHROMIUM_NAMES else real_which(name, *a, **kw))
    run = make_run(tmp_path / "run", settings=["cm-ord-last"], R=3, n_items=6)
    r = vheads("report", run, "--screenshot")
    assert r.exit_code == 0, r.output
    assert not (run / "report.png").exists()
    assert "--screenshot: report.png not written: no Chromium" in r.stderr


def test_help_lists_commands_in_workflow_order_and_describes_every_audit_option():
    text = vheads("--help").stdout
    at = {name: text.index(f" {name} ") for name in ("study", "discover", "overlap", "evaluate", "report", "doctor", "models")}
    assert list(at) == sorted(at, key=at.get)
    audit = vheads("audit", "--help").stdout
    for flag in ("--seed", "--json", "--device", "--dtype", "--device-map", "--trust-remote-code", "--revision"):
        block = audit[audit.index(flag):].split("│ --", 2)[0]
        assert len(block.split()) > 3, (flag, block)  # a description, not a bare flag
