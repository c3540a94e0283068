"""Study config errors before the run folder exists (point 3); one-line errors before model
work for discover / overlap / evaluate (point 4)."""

import json

import numpy as np
import pytest
import torch

from tests.discovery.test_files import _record
from tests.hardening.clitools import NO_MODEL, refused, vheads
from vheads._errors import VheadsError
from vheads.discovery import save_headset

# ---- point 3: study config ------------------------------------------------------------------------

SMALL = """
corpora = ["comics"]
queries = ["ordinal"]
sources = ["last"]
n_discovery = 2
n_eval = 2
splits = 2
"""


@pytest.mark.parametrize("toml,key", [
    ("seed = -1", "seed"),
    ("algebra_controls = -5", "algebra_controls"),
    ("algebra_controls = 100000000", "algebra_controls"),
    ("k_sweep = [0]", "k_sweep"),
    ("k_sweep = [2, 2]", "k_sweep"),
    ("beta_sweep = [nan]", "beta_sweep"),
    ("beta_sweep = [1.0, 1.0]", "beta_sweep"),
    ("device = \"cuda:99\"", "device"),
    ("device = \"gpu\"", "device"),
    ("corpora = [\"comics\", \"comics\"]", "corpora"),
    ("tests = []", "tests"),
    ("row_groups = []", "row_groups"),
    ("controls = {}", "controls"),
    ("controls = {layer-matched = 100000000}", "controls.layer-matched"),
    ("n_eval = 100000000", "n_eval"),
    ("[run]\ntorch_threads = -1", "run.torch_threads"),
    ("[templates]\nordinal = \"what is in this panel ?\"", "templates"),
    ("[templates]\ncell = \"[cell] {k} ?\"", "templates"),
    ("templates = \"what ?\"", "templates"),
    # second pass: ints fit 64 bits, R is whole, beta > 0, cells bounded
    ("seed = 99999999999999999999", "seed"),
    ("n_eval = 99999999999999999999", "n_eval"),
    ("k_sweep = [1, 99999999999999999999]", "k_sweep[1]"),
    ("[run]\nbatch_size = 99999999999999999999", "run.batch_size"),
    ("controls = {layer-matched = 1.5}", "controls.layer-matched"),
    ("controls = {layer-matched = 99999999999999999999}", "controls.layer-matched"),
    ("beta = 0", "beta"),
    ("beta = -1.0", "beta"),
    ("beta_sweep = [0.0, 1.0]", "beta_sweep"),
    ("eval_cell = 30000", "eval_cell"),
])
def test_bad_study_config_is_refused_before_the_run_folder_exists(tmp_path, toml, key):
    cfg = tmp_path / "c.toml"
    base = SMALL if not any(toml.startswith(k) for k in ("corpora", "n_eval")) else ""
    cfg.write_text((base + "\n" + toml).replace("corpora = [\"comics\"]\n", "") if toml.startswith("corpora") else base + "\n" + toml)
    r = vheads("study", cfg, "--out", tmp_path / "run", "--model", NO_MODEL)
    refused(r, f"config key '{key}'")
    assert not (tmp_path / "run").exists()


def test_a_template_the_tiny_model_cannot_read_is_refused_naming_the_word(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SMALL + "\n[templates]\nreferring = \"where is [the {object}] ?\"\n")
    r = vheads("study", cfg, "--out", tmp_path / "run")
    refused(r, "config key 'templates'", "'templates.referring'", "word 'where'")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("toml,key", [("k = 100000", "'k'"), ("k_sweep = [1, 100000]", "'k_sweep'"), ("selection = \"per-layer\"\nk_sweep = [9]", "'k_sweep'"),
                                      ("selection = \"per-layer\"\nk = 9", "'k'")])
def test_k_too_large_for_the_model_is_refused_before_the_run_folder(tiny_random_dirs, tmp_path, toml, key):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SMALL + toml)
    r = vheads("study", cfg, "--out", tmp_path / "run", "--model", tiny_random_dirs["qwen3_vl"])
    refused(r, f"config key {key}", "model")
    assert not (tmp_path / "run").exists()


def test_a_random_n_control_larger_than_the_model_is_refused_before_the_run_folder(tiny_random_dirs, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SMALL + '[controls]\nlayer-matched = 2\n"random-n@100000" = 2\n')
    r = vheads("study", cfg, "--out", tmp_path / "run", "--model", tiny_random_dirs["qwen3_vl"])
    refused(r, "config key 'controls.random-n@100000'", "100000 heads")
    assert not (tmp_path / "run").exists()


def test_a_run_folder_left_before_its_first_unit_takes_the_corrected_config(tmp_path):
    """A run that stopped before committing anything holds only its claim; the corrected
    config is not refused as "a different configuration". Once a unit is committed it is."""
    from vheads.store import Store
    from vheads.study import config_from_dict
    from vheads.study._runner import _claim

    first, fixed, other = (config_from_dict({"seed": s}) for s in (1, 2, 3))
    store = Store(tmp_path)
    _claim(store, first, tmp_path, model_id="tiny")
    _claim(store, fixed, tmp_path)
    assert store.get_meta("config_hash") == fixed.science_hash() and store.get_meta("model_id") is None
    store.commit_unit("u1", "discovery", 0.0, {})
    with pytest.raises(VheadsError, match="holds a run of a different configuration"):
        _claim(store, other, tmp_path)
    assert Store(tmp_path).get_meta("config_hash") == fixed.science_hash()


def test_study_out_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "run"
    f.write_text("x")
    refused(vheads("study", "--out", f), "is a file")
    assert f.read_text() == "x"


# ---- point 4: one line, before the model ----------------------------------------------------------


@pytest.fixture()
def headset_file(tmp_path):
    return save_headset(_record(), tmp_path / "h.json")


@pytest.mark.parametrize("content,fragment", [
    (lambda t: t[: len(t) // 2], "not valid JSON"),
    # checked against the head-set JSON Schema first: the message names the key
    (lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "model"}), "'model' is a required property"),
    (lambda t: json.dumps({**json.loads(t), "model": {"fingerprint": "x", "n_layers": 3, "n_heads": 4}}), "'id' is a required property"),
    (lambda t: json.dumps({**json.loads(t), "selection": [1]}), "at selection: [1] is not of type 'object'"),
    (lambda t: "[]", "empty head list"),  # a plain head list (issue 44), but an empty one
    (lambda t: "3", "JSON object"),
])
def test_evaluate_reads_head_set_files_inside_the_handler(headset_file, content, fragment):
    headset_file.write_text(content(headset_file.read_text()))
    refused(vheads("evaluate", "--headset", headset_file, "--model", NO_MODEL), str(headset_file), fragment)


def test_evaluate_headset_that_is_a_folder(tmp_path):
    refused(vheads("evaluate", "--headset", tmp_path), "is a folder")


@pytest.mark.parametrize("args,fragment", [
    (["--n", "1"], "--n must be at least 2"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--controls", "layer-matched:100000000"], "more than 100,000"),
    (["--test", "nope"], "unknown test 'nope'"),
    (["--n", "1000000000000"], "--n must be an integer from 2 to 1,000,000"),
    (["--seed", "-1"], "--seed must be an integer from 0"),
    (["--beta", "0"], "--beta must be a finite number above 0"),
    (["--source", "imagefolder:/nonexistent", "--cell", "30000"], "--cell must be 8 to 2048 pixels, got 30000"),
])
def test_evaluate_arguments_are_refused_before_the_model_loads(headset_file, args, fragment):
    refused(vheads("evaluate", "--headset", headset_file, "--model", NO_MODEL, *args), fragment)


@pytest.mark.parametrize("command,args,fragment", [
    ("discover", ["--seed", "-1"], "--seed must be an integer from 0"),
    ("discover", ["--n", "1000000000000"], "--n must be an integer from 1 to 1,000,000"),
    ("audit", ["--seed", "-1"], "--seed must be an integer from 0"),
    ("audit", ["--n", "1000000000000"], "--n must be an integer from 1 to 1,000,000"),
    ("audit", ["--source", "imagefolder:/nonexistent", "--cell", "30000"], "--cell must be 8 to 2048"),
])
def test_counts_and_seeds_of_every_command_are_bounded_before_the_model(tmp_path, command, args, fragment):
    refused(vheads(command, "--model", NO_MODEL, *args, *(["--out", tmp_path / "hs"] if command == "discover" else [])), fragment)
    assert not (tmp_path / "hs").exists()


def test_overlap_seed_is_bounded(headset_file):
    refused(vheads("overlap", headset_file, "--seed", "-1"), "--seed must be an integer from 0")


@pytest.mark.parametrize("args,fragment", [
    (["--n", "1000000000"], "--n must be an integer from 1 to 1,000"),
    (["--seed", "-1"], "--seed must be an integer from 0"),
    (["--cell", "30000"], "--cell must be 8 to 2048"),
])
def test_data_preview_bounds_its_arguments(tmp_path, args, fragment):
    refused(vheads("data", "preview", "synthetic", "--kind", "grid-neutral", "--out", tmp_path / "p.png", *args), fragment)
    assert not (tmp_path / "p.png").exists()


def test_data_preview_out_that_is_a_folder_is_one_line(tmp_path):
    (tmp_path / "p.png").mkdir()
    refused(vheads("data", "preview", "synthetic", "--kind", "grid-neutral", "--out", tmp_path / "p.png"), "is a folder")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_discover_on_cuda_without_cuda_is_one_line(tmp_path):
    refused(vheads("discover", "--model", NO_MODEL, "--device", "cuda", "--out", tmp_path / "hs"), "'cuda'", "CUDA is not available")
    assert not (tmp_path / "hs").exists()


def test_overlap_of_broken_files_is_one_line(tmp_path, headset_file):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "vheads.headset/1", "model": 3}')
    refused(vheads("overlap", headset_file, bad), str(bad))
    refused(vheads("overlap", headset_file, tmp_path / "missing.json"), "does not exist")
    refused(vheads("overlap", headset_file, "--splits", "0"), "--splits must be at least 1")


def test_evaluate_json_with_one_control_draw_is_strict_json_with_null(tiny_random_dirs, tmp_path):
    from vheads.discovery import HeadSetRecord, Setting, select_heads
    from vheads.models import load_model

    lm = load_model(str(tiny_random_dirs["qwen3_vl"]))
    scores = np.random.default_rng(1).random((lm.n_layers, lm.n_heads))
    rec = HeadSetRecord(select_heads(scores, 2), Setting("comics", "ordinal", "last"), scores,
                        {"id": str(tiny_random_dirs["qwen3_vl"]), "revision": None, "fingerprint": lm.fingerprint,
                         "n_layers": lm.n_layers, "n_heads": lm.n_heads},
                        {"id": "synthetic:comics", "n_items": 2, "seed": 0}, 0, 2, "flat")
    p = save_headset(rec, tmp_path / "h.json")
    r = vheads("evaluate", "--headset", p, "--test", "ncs", "--controls", "layer-matched:1", "--n", "2", "--json")
    assert r.exit_code == 0, r.output

    def no_constants(name):
        raise AssertionError(f"{name} is not JSON")

    (res,) = json.loads(r.stdout, parse_constant=no_constants)
    assert res["controls"]["layer-matched"]["sd"] is None  # one draw has no SD
    assert res["controls"]["layer-matched"]["R"] == 1
