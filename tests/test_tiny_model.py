"""The shipped tiny VLM: loads offline, is genuinely trained, and its training is reproducible."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from vheads.data import OPTION_LETTERS
from vheads.data import synthetic as syn
from vheads.tiny import tiny_model_path

TRAINED = ["strip-ordinal/comics", "strip-ordinal/photo", "strip-referring/comics", "strip-referring/photo",
           "grid-oracle", "class-matched", "text"]
CHANCE = ["class-mismatched", "grid-blank"]


@pytest.fixture(scope="module")
def tiny():
    """The shipped model, loaded with the hub switched off."""
    from vheads.models import load_model

    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update({k: "1" for k in saved})
    try:
        yield load_model("tiny")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_shipped_files_are_small_and_complete():
    path = tiny_model_path()
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert size <= 25 * 2**20, f"{size / 2**20:.1f} MiB"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "training.json"):
        assert (path / name).exists(), name
    record = json.loads((path / "training.json").read_text())
    assert {"seed", "steps", "train_seconds", "held_out"} <= set(record)


def test_loads_offline_through_the_generic_loader(tiny):
    assert tiny.model.config.model_type == "qwen3_vl"
    assert (tiny.n_layers, tiny.n_heads, tiny.n_kv_heads, tiny.head_dim) == (4, 16, 4, 8)
    assert tiny.adapter.family == "qwen-vl"
    assert tiny.fingerprint.startswith("sha256:")


def test_strip_prompt_has_one_image_token_per_panel(tiny):
    item = syn.strip_items("comics", "ordinal", 1, seed=0)[0]
    prompt = tiny.adapter.build(item, tiny.processor)
    assert prompt.layout.grid == (1, 6)
    for p in range(6):
        assert len(prompt.layout.regions[f"panel{p + 1}"].positions) == 1


@pytest.fixture(scope="module")
def held_out(tiny):
    from vheads.tiny import predict
    from vheads.tiny._evaluate import EVAL_KINDS
    from vheads.tiny._batch import draw_items

    torch.set_num_threads(2)
    out = {}
    for g, (name, (kind, corpus)) in enumerate(EVAL_KINDS.items()):
        items = draw_items(kind, corpus, 40, 123_456 + g)  # seeds outside training and validation
        out[name] = (items, predict(tiny.model, tiny.processor, items))
    return out


@pytest.mark.parametrize("kind", TRAINED)
def test_high_held_out_accuracy_on_trained_kinds(held_out, kind):
    _, res = held_out[kind]
    assert np.mean([r["correct"] for r in res]) >= 0.9


@pytest.mark.parametrize("kind", CHANCE)
def test_mismatched_and_blank_sit_near_chance(held_out, kind):
    _, res = held_out[kind]
    p_key = np.mean([r["p_key"] for r in res])
    assert 0.15 <= p_key <= 0.35
    assert np.mean([r["correct"] for r in res]) <= 0.5


def test_matched_answers_follow_the_image_not_the_option_order(held_out):
    """The argmax letter names the shown class, whatever letter it sits at."""
    items, res = held_out["class-matched"]
    picked = [it.options[int(np.argmax(r["p_letters"]))] for it, r in zip(items, res)]
    assert np.mean([p == it.meta["class"] for p, it in zip(picked, items)]) >= 0.9
    assert len({it.answer for it in items}) == len(OPTION_LETTERS)


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_training_twice_with_one_seed_gives_identical_weights(tmp_path):
    from vheads.tiny import train

    kw = dict(seed=3, max_steps=3, n_final_eval=0, threads=1, log=lambda *_: None)
    train(tmp_path / "a", **kw)
    train(tmp_path / "b", **kw)
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    c = _weights(train(tmp_path / "c", **{**kw, "seed": 4}) and tmp_path / "c")
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_cli_eval_prints_json_per_kind():
    from typer.testing import CliRunner

    from vheads.tiny import app

    result = CliRunner().invoke(app, ["eval", "--n", "4", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    assert set(TRAINED + CHANCE) <= set(report)


def test_bad_train_arguments_raise():
    from vheads.tiny import evaluate, train

    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        train("/nonexistent", max_steps=0)
    with pytest.raises(ValueError, match="n_per_kind must be at least 1"):
        evaluate("tiny", n_per_kind=0)
