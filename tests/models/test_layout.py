"""Token layouts against the processed pixels, and bad-input errors of the model layer."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from tests.conftest import FAMILIES, family_params
from vheads.data import Item
from vheads.models import load_model


def _processed_token_redness(lm, prompt):
    """Fraction of 'red' processed pixels under each image token, read from pixel_values."""
    pv = prompt.inputs["pixel_values"]
    rows, cols = prompt.layout.grid
    if "image_position_ids" in prompt.inputs:  # Gemma 4: [1, max_patches, p*p*3] patches at (x, y), padding (-1, -1), pixels in [0, 1]
        pos = prompt.inputs["image_position_ids"][0]
        real = (pos >= 0).all(-1)
        k = lm.model.config.vision_config.pooling_kernel_size  # k x k patches pool into one token
        patches = pv[0][real].reshape(int(real.sum()), -1, 3)  # [n, p*p, 3] (convert_image_to_patches: channels last)
        red = ((patches[..., 0] > 0.5) & (patches[..., 2] < 0.5)).float().mean(-1)  # [n]
        token = (pos[real, 1] // k) * cols + pos[real, 0] // k
        return torch.zeros(rows * cols).index_add_(0, token, red) / (k * k)
    if pv.dim() == 4:  # [1, 3, H, W] (LLaVA, Gemma 3): a token is an (H/rows) x (W/cols) cell (a patch, a pooled block)
        ph, pw = pv.shape[-2] // rows, pv.shape[-1] // cols
        red = (pv[0, 0] > 0.5) & (pv[0, 2] < -0.5)  # normalized with mean=std=0.5
        return red.reshape(rows, ph, cols, pw).float().mean(dim=(1, 3)).flatten()
    # Qwen: [n_patches, 3 * temporal * p * p], merge x merge consecutive patches per token
    ip = lm.processor.image_processor
    p, m, t = ip.patch_size, ip.merge_size, ip.temporal_patch_size
    patches = pv.reshape(-1, 3, t, p, p)
    red = (patches[:, 0] > 0.5) & (patches[:, 2] < -0.5)  # [n, t, p, p]
    return red.float().mean(dim=(1, 2, 3)).reshape(rows * cols, m * m).mean(1)


@pytest.mark.parametrize("family", family_params(FAMILIES))  # one grid per image; tiled families: test_zoo_layouts
@pytest.mark.parametrize("size,box", [((96, 64), (32, 0, 64, 32)), ((97, 45), (0, 0, 70, 45)), ((131, 77), (60, 20, 131, 77)), ((200, 90), (20, 10, 120, 80))])
def test_region_tokens_lie_under_their_box(loaded, family, size, box):
    lm = loaded[family]
    img = Image.new("RGB", size, (0, 0, 255))
    img.paste((255, 0, 0), box)
    item = Item("r", "test", img, "what is in panel 1 ?", "red", regions={"r": box})
    prompt = lm.adapter.build(item, lm.processor)
    redness = _processed_token_redness(lm, prompt)
    chosen = set(prompt.layout.regions["r"].positions.tolist())
    pos = prompt.layout.image_positions.tolist()
    # tokens clearly inside (mostly red pixels) are chosen; clearly outside are not
    checked = 0
    for i, r in enumerate(redness.tolist()):
        if r > 0.8:
            assert pos[i] in chosen, (i, r)
            checked += 1
        elif r < 0.2:
            assert pos[i] not in chosen, (i, r)
    assert checked >= 1
    # tokens reported partial are those the box covers only in part
    cov = prompt.layout.regions["r"].coverage
    assert set(prompt.layout.regions["r"].partial) == {int(p) for p, c in zip(prompt.layout.regions["r"].positions, cov) if c < 1 - 1e-6}


def test_region_outside_the_image_is_refused():
    with pytest.raises(ValueError, match="outside the 50x40 image"):
        Item("bad", "test", Image.new("RGB", (50, 40)), "q ?", "x", regions={"p": (40, 0, 60, 20)})


def test_prompt_with_no_image_is_refused(loaded):
    lm = loaded["qwen3_vl"]
    with pytest.raises(ValueError, match="has no image"):
        lm.adapter.build(Item("t", "text", None, "what ?", "x"), lm.processor)


def test_text_only_model_is_not_a_vlm(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="not a vision-language model"):
        load_model(str(tmp_path))


def test_unsupported_family_is_named(tiny_random_dirs, tmp_path):
    import shutil

    src = tiny_random_dirs["llava"]
    dst = tmp_path / "m"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["model_type"] = "fuyu"
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="'fuyu' is not a supported VLM family"):
        load_model(str(dst))


def test_missing_model_folder_is_named():
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model("./no/such/model")


@pytest.mark.parametrize("family", family_params())
def test_query_span_positions_decode_to_the_span_text(loaded, family):
    lm = loaded[family]
    item = Item("q", "test", Image.new("RGB", (64, 64)), "which panel shows the answer letter ?", "1", query_span=(18, 35))
    prompt = lm.adapter.build(item, lm.processor)
    ids = prompt.inputs["input_ids"][0, prompt.layout.spans["query"]].tolist()
    assert lm.processor.tokenizer.decode(ids).replace(" ", "") == "theanswerletter"


def test_loaded_model_runs_in_bfloat16(tiny_random_dirs):
    lm = load_model(str(tiny_random_dirs["qwen3_vl"]), dtype="bf16")
    from vheads.engine import Engine, mask_keys, positions_mask, row_mask

    item = Item("b", "test", Image.new("RGB", (64, 64)), "what is in panel 1 ?", "red")
    prompt = lm.adapter.build(item, lm.processor)
    eng = Engine(lm)
    T = prompt.layout.n_tokens
    heads = torch.ones(1, lm.n_layers, lm.n_heads, dtype=torch.bool)
    iv = mask_keys(heads, row_mask(prompt.layout, "last")[None], positions_mask(T, prompt.layout.image_positions)[None])
    out = eng.forward(prompt, eng.plan(1, [iv])).logits
    assert torch.isfinite(out).all()
