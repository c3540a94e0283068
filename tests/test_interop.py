"""Interop: a vheads head-set used from plain transformers (docs/examples/mask_with_hooks.py)
and from nnsight (docs/examples/mask_with_nnsight.py) gives the same P(option) as vheads'
own masking on the built-in tiny model."""

import importlib.util
from pathlib import Path

import pytest
import torch

DOCS = Path(__file__).resolve().parents[1] / "docs" / "examples"


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A head-set file from a discovery run on the tiny model, the three least-sure of 24 NCS items built as
    vheads builds them, and vheads' own P(option) with the head-set hidden from the image."""
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from vheads.data.synthetic import kind_items
    from vheads.discovery import discover_headsets, load_headset
    from vheads.engine import Engine
    from vheads.evaluation import Action, option_probs
    from vheads.models import load_model, tiny_model_path

    lm = load_model("tiny")
    out = tmp_path_factory.mktemp("interop")
    discover_headsets(lm, ["comics"], ["referring"], ["last"], k=8, n=4, seed=0, out=out, progress=False)
    path = out / "cm-ref-last.json"
    engine = Engine(lm)
    S = load_headset(path).headset
    # the retrained tiny model is near-certain on most matched items (P(key) ~ 1 - 1e-5), where
    # hiding any head-set moves P(option) by ~1e-5: take the 3 least-sure of 24 (smallest
    # top option probability in a plain forward), where the image still has room to matter
    pool = [lm.adapter.build(it, lm.processor) for it in kind_items("class-matched", 24, seed=11)]
    sure = [float(option_probs(engine, p, [], None)[0].max()) for p in pool]
    prompts = [pool[i] for i in sorted(range(len(pool)), key=lambda i: sure[i])[:3]]
    want = [torch.from_numpy(option_probs(engine, p, [S], Action("mask", rows="all", keys="image"))[0]).float() for p in prompts]
    base = [torch.from_numpy(option_probs(engine, p, [], None)[0]).float() for p in prompts]
    # the outside user's side: a plain transformers model of its own, its own tokenizer
    plain = AutoModelForImageTextToText.from_pretrained(str(tiny_model_path())).eval()
    tok = AutoTokenizer.from_pretrained(str(tiny_model_path()))
    letter_ids = [tok.convert_tokens_to_ids(x) for x in "ABCD"]
    return {"path": path, "prompts": prompts, "want": want, "base": base, "plain": plain, "letter_ids": letter_ids}


def image_positions(model, inputs):
    return (inputs["input_ids"][0] == model.config.image_token_id).nonzero()[:, 0]  # [N_img]


def test_the_head_set_matters_on_these_items(setup):
    """Otherwise agreement below would prove nothing."""
    assert max(float((w - b).abs().max()) for w, b in zip(setup["want"], setup["base"])) > 0.01


def test_plain_transformers_hooks_reproduce_vheads_masking(setup):
    ex = load_example("mask_with_hooks")
    model, headset = setup["plain"], ex.read_headset(setup["path"])
    for prompt, want, base in zip(setup["prompts"], setup["want"], setup["base"]):
        inputs = dict(prompt.inputs)
        assert torch.allclose(ex.option_probs(model, inputs, setup["letter_ids"]), base, atol=1e-5)
        with ex.hide_image_from_heads(model, headset, image_positions(model, inputs)):
            got = ex.option_probs(model, inputs, setup["letter_ids"])
        assert torch.allclose(got, want, atol=1e-5), (got, want)
    # the hooks are gone afterwards
    assert torch.allclose(ex.option_probs(model, dict(setup["prompts"][0].inputs), setup["letter_ids"]), setup["base"][0], atol=1e-5)


def test_nnsight_reproduces_vheads_masking(setup, monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS))  # the example imports its sibling mask_with_hooks
    ex = load_example("mask_with_nnsight")
    headset = load_example("mask_with_hooks").read_headset(setup["path"])
    model = setup["plain"]
    for prompt, want in zip(setup["prompts"], setup["want"]):
        inputs = dict(prompt.inputs)
        got = ex.option_probs_with_heads_hidden(model, inputs, headset, image_positions(model, inputs), setup["letter_ids"])
        assert torch.allclose(got, want, atol=1e-5), (got, want)
