"""A model folder that cannot load is one line naming the file, before any work (second pass).

Each case damages a copy of a tiny random checkpoint the way a download or a hand edit
does; ``vheads audit`` (which loads the model) and ``vheads study`` (which checks the
folder before making the run folder) must refuse it with one ``error:`` line.
"""

from __future__ import annotations

import os
import pickle
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.hardening.clitools import vheads


def _one_error_line(result, *fragments: str) -> str:
    """Exit 2, no traceback, one ``error:`` line holding every fragment; transformers'
    ``Loading weights`` progress bar is the only other output allowed."""
    out = (result.stdout or "") + (result.stderr or "")
    assert result.exit_code == 2, out
    assert "Traceback" not in out and "LOAD REPORT" not in out, out
    lines = [ln for ln in result.stderr.replace("\r", "\n").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and all(ln.startswith(("error: ", "Loading weights")) for ln in lines), result.stderr
    for f in fragments:
        assert f in errors[0], (f, errors[0])
    return errors[0]


@pytest.fixture()
def folder(tiny_random_dirs, tmp_path):
    return shutil.copytree(tiny_random_dirs["qwen2_vl"], tmp_path / "model")


class _Payload:
    """Unpickling this runs code: it would create the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _not_json(d):
    (d / "config.json").write_text("{not json")
    return ["config.json", "not valid JSON"]


def _a_list(d):
    (d / "config.json").write_text("[1, 2]")
    return ["config.json", "JSON object"]


def _no_weights(d):
    (d / "model.safetensors").unlink()
    return ["holds no weights"]


def _truncated(d):
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) * 2 // 3])
    return ["model.safetensors", "truncated"]


def _header_cut(d):
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    return ["model.safetensors", "truncated"]


def _mismatched_shape(d):
    sd = load_file(d / "model.safetensors")
    key = next(k for k in sd if k.endswith("embed_tokens.weight"))
    sd[key] = torch.zeros(sd[key].shape[0] + 3, sd[key].shape[1])
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    return ["model.safetensors", "shape differs", "embed_tokens"]


@pytest.mark.parametrize("damage", [_not_json, _a_list, _no_weights, _truncated, _header_cut, _mismatched_shape])
def test_a_damaged_model_folder_is_one_line_naming_the_file(folder, damage):
    fragments = damage(folder)
    _one_error_line(vheads("audit", "--model", folder, "--n", "2"), str(folder), *fragments)


def test_pickled_weights_are_refused_without_unpickling(folder, tmp_path):
    marker = tmp_path / "payload-ran"
    (folder / "model.safetensors").unlink()
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump({"w": _Payload(marker)}, f)
    _one_error_line(vheads("audit", "--model", folder, "--n", "2"), "pytorch_model.bin", "pickled", "safetensors")
    assert not marker.exists()


@pytest.mark.parametrize("damage", [_not_json, _no_weights, _truncated])
def test_study_refuses_a_damaged_model_folder_before_the_run_folder(folder, tmp_path, damage):
    fragments = damage(folder)
    r = vheads("study", "--model", folder, "--out", tmp_path / "run")
    _one_error_line(r, "config key 'model'", *fragments)
    assert not (tmp_path / "run").exists()


def test_an_intact_folder_still_loads(folder):
    from vheads.models import check_model_folder, load_model

    assert check_model_folder(folder) == folder
    lm = load_model(str(folder))
    assert lm.n_layers >= 1 and os.path.isfile(folder / "model.safetensors")
