"""Zoo families whose attention differs from a plain causal softmax stack.

Qwen3-VL-MoE (sparse-expert text model), Qwen3.5 dense / MoE (Gated DeltaNet
linear-attention layers between softmax layers: heads only in the softmax layers) and
Gemma 3 (bidirectional attention inside the image block, sliding-window layers), GLM-4V
(its own 3D RoPE and image tokens). The
engine invariants (empty plan, capture vs eager, mask / steer vs a hand-written softmax,
batched head-sets, prefix reuse) and the region layout run on these families through the
``FAMILIES`` parametrization of ``tests/engine/test_engine.py`` and
``tests/models/test_layout.py``; this file checks what is particular to them.
"""

import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.conftest import HYBRID
from tests.engine.reference import model_mask
from tests.engine.test_engine import _eager_attentions, _item
from vheads.engine import Engine, mask_keys, positions_mask, row_mask
from vheads.evaluation import HeadSet, draw_controls
from vheads.evaluation._controls import random_n_controls, text_heavy_heads
from vheads.models import load_model

ZOO = ["qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "gemma3", "gemma4", "glm4v"]


@pytest.mark.parametrize("family", ZOO)
def test_empty_plan_equals_the_model_with_its_default_attention(tiny_random_dirs, loaded, family):
    """The model loaded as transformers loads it (its own default attention and mask), not
    as vheads loads it, against the engine with no plan."""
    from transformers import AutoModelForImageTextToText

    lm = loaded[family]
    prompt = lm.adapter.build(_item(), lm.processor)
    own = AutoModelForImageTextToText.from_pretrained(str(tiny_random_dirs[family]), dtype=torch.float32).eval()
    with torch.no_grad():
        want = own(**prompt.inputs).logits
    got = Engine(lm).forward(prompt).logits
    assert (got - want).abs().max() <= 1e-5


@pytest.mark.parametrize("family", ["gemma3", "gemma4"])
def test_gemma_mask_is_bidirectional_in_the_image_and_windowed_on_sliding_layers(loaded, family):
    """The hand-written mask the reference uses (causal OR same image block — Gemma 4: on
    sliding layers only —, AND k > q − window on sliding layers) is the model's own: eager
    attention is zero exactly where it forbids, KV-shared layers included."""
    lm = loaded[family]
    prompt = lm.adapter.build(_item(), lm.processor)
    lay = prompt.layout
    T = lay.n_tokens
    attn = _eager_attentions(lm, prompt)  # L x [H, T, T]
    hand = model_mask(lm.model, lay.image_positions.tolist(), T)
    tc = lm.model.config.text_config
    assert set(tc.layer_types) == {"sliding_attention", "full_attention"} and tc.sliding_window < len(lay.image_positions)
    for layer, A in enumerate(attn):
        seen = (A > 0).any(0)  # [T, T] keys any head attends to
        assert torch.equal(seen, hand[layer]), layer
    # and the engine captures exactly these maps (all rows: image rows look ahead in their block)
    from vheads.engine import Capture

    rows = torch.ones(1, T, dtype=torch.bool)
    groups = torch.stack([positions_mask(T, lay.image_positions), ~positions_mask(T, lay.image_positions)])[None]
    res = Engine(lm).forward(prompt, Engine(lm).plan(1, captures=[Capture(rows, groups)])).captures["capture"]
    for layer, A in enumerate(attn):
        want = torch.stack([A[:, :, g].sum(-1).mean(-1) for g in groups[0]], -1)  # [H, 2]
        assert torch.allclose(res[0, layer].double(), want, atol=1e-5)


def test_gemma4_capture_without_logits_sees_every_row_of_the_kv_shared_layers(loaded):
    """Region mass with no logits requested (discovery's path) equals eager attention in every
    layer: Gemma 4 may run its KV-shared layers on the last row only when asked for one
    logit row, which would leave the other rows' maps of those layers unseen."""
    lm = loaded["gemma4"]
    tc = lm.model.config.text_config
    assert "reuse" in tc.kv_sharing_modes  # the tiny model has KV-shared layers
    prompt = lm.adapter.build(_item(), lm.processor)
    lay = prompt.layout
    T = lay.n_tokens
    rows = {"image": positions_mask(T, lay.image_positions), "question": positions_mask(T, lay.spans["question"])}
    groups = torch.stack([positions_mask(T, lay.image_positions), positions_mask(T, lay.regions["left"].positions)])  # [2, T]
    (got,) = Engine(lm).capture_many([(prompt, rows, groups)])
    attn = _eager_attentions(lm, prompt)  # L x [H, T, T]
    for name, r in rows.items():
        for layer, A in enumerate(attn):
            want = torch.stack([A[:, r][:, :, g].sum(-1).mean(-1) for g in groups], -1)  # [H, 2]
            assert torch.allclose(got[name][layer].double(), want, atol=1e-5), (name, layer, tc.kv_sharing_modes[layer])


@pytest.mark.parametrize("family", HYBRID)
def test_softmax_layers_are_those_of_the_config_layer_types(loaded, family):
    lm = loaded[family]
    types = lm.model.config.text_config.layer_types
    assert lm.attention_layers == tuple(i for i, t in enumerate(types) if t == "full_attention")
    assert 0 < len(lm.attention_layers) < lm.n_layers  # hybrid: some layers have no heads
    assert lm.n_total_heads == len(lm.attention_layers) * lm.n_heads
    # the model's own modules agree: attention modules exist exactly in those layers
    layers = lm.model.model.language_model.layers
    assert tuple(i for i, m in enumerate(layers) if hasattr(m, "self_attn")) == lm.attention_layers


@pytest.mark.parametrize("family", HYBRID)
def test_a_head_in_a_linear_attention_layer_is_one_clear_error(loaded, family):
    lm = loaded[family]
    linear = next(i for i in range(lm.n_layers) if i not in lm.attention_layers)
    msg = rf"layer\(s\) \[{linear}\] of this model are linear-attention .* softmax-attention layers \[{', '.join(map(str, lm.attention_layers))}\]"
    with pytest.raises(ValueError, match=msg):
        HeadSet([(linear, 0)], lm.n_layers, lm.n_heads, lm.attention_layers)
    eng = Engine(lm)
    prompt = lm.adapter.build(_item(), lm.processor)
    T = prompt.layout.n_tokens
    heads = torch.zeros(1, lm.n_layers, lm.n_heads, dtype=torch.bool)
    heads[0, linear, 1] = True
    iv = mask_keys(heads, row_mask(prompt.layout, "last")[None], positions_mask(T, prompt.layout.image_positions)[None])
    with pytest.raises(ValueError, match=msg):
        eng.plan(1, [iv])
    # a head-set made without the model's layers is checked when it meets the model
    from vheads.evaluation._run import evaluate_headsets

    with pytest.raises(ValueError, match=msg):
        evaluate_headsets(eng, {"bad": HeadSet([(linear, 0)], lm.n_layers, lm.n_heads)}, ["ncs"], "layer-matched:2", n=1, progress=False)


def test_controls_of_a_hybrid_model_draw_only_softmax_layer_heads():
    L, H, A = 8, 4, (3, 7)  # Qwen3.5's pattern: every 4th layer is softmax attention
    S = HeadSet([(3, 0), (3, 1), (3, 2), (7, 0)], L, H, A)  # S has 3 of layer 3's 4 heads: fallback
    heads_of = {(l, h) for l in A for h in range(H)}
    for name in ("layer-matched", "layer-matched-disjoint", "any-layer", "any-layer-disjoint", "whole-layers", "random-n"):
        draws = draw_controls(name, S, 20, seed=1)
        for d in draws:
            assert set(d.heads) <= heads_of, (name, d)
            assert d.attention_layers == A
        if name in ("layer-matched", "layer-matched-disjoint", "any-layer", "any-layer-disjoint"):
            assert all(len(d) == len(S) for d in draws)
        if name.endswith("-disjoint"):  # the S-disjoint (descriptive) draws share no head with S
            assert all(not (set(d.heads) & set(S.heads)) for d in draws)
        elif name in ("layer-matched", "any-layer"):  # exchangeable (issue 41): overlap allowed, S itself never
            assert all(d != S for d in draws)
    # exchangeable layer-matched: per layer S's count of *all* the layer's softmax heads, so no
    # fallback; its pool C(4, 3)·C(4, 1) − 1 = 15 ≤ 2R is compared whole
    lm = draw_controls("layer-matched", S, 20, seed=1)
    assert lm.fallbacks == () and len(lm) == math.comb(4, 3) * math.comb(4, 1) - 1
    assert all(np.bincount([l for l, _ in d], minlength=L)[[3, 7]].tolist() == [3, 1] for d in lm)
    assert any(set(d.heads) & set(S.heads) for d in lm)
    lm = draw_controls("layer-matched-disjoint", S, 20, seed=1)
    # layer 3 keeps its one free head; the 2 missing come from the nearest softmax layer (7), never 2 or 4
    assert [f.borrowed_from for f in lm.fallbacks] == [(7,)]
    assert all(np.bincount([l for l, _ in d], minlength=L)[[3, 7]].tolist() == [1, 3] for d in lm)
    # deterministic controls rank the softmax heads only (linear layers hold no mass: zeros)
    mass = np.zeros((L, H))
    mass[3] = [0.9, 0.8, 0.7, 0.6]
    mass[7] = [0.5, 0.4, 0.3, 0.2]
    assert set(text_heavy_heads(mass, 4, exclude=S).heads) == {(3, 3), (7, 1), (7, 2), (7, 3)}
    # every draw of random-n lands in the softmax layers, and all of them are reachable
    seen = {h for d in random_n_controls(3, 200, 0, L, H, A) for h in d}
    assert seen == heads_of


def test_selection_on_a_hybrid_model_ranks_only_softmax_heads():
    from vheads.discovery._selection import resolve_k, select_heads

    L, H, A = 4, 4, (1, 3)
    scores = np.zeros((L, H))
    scores[0] = 9.0  # a linear-attention layer's row holds no score; must never be ranked
    scores[1] = [0.1, 0.5, 0.2, 0.3]
    scores[3] = [0.4, 0.0, 0.6, 0.05]
    S = select_heads(scores, 3, "flat", A)
    assert S.heads == ((1, 1), (3, 0), (3, 2))
    per = select_heads(scores, 1, "per-layer", A)
    assert per.heads == ((1, 1), (3, 2))
    # the default k scales with the heads that exist (the seed's 100 of 1,152)
    assert resolve_k(len(A), H, None) == max(1, round(100 * len(A) * H / 1152))
    # a head-set record keeps the layers, so its controls stay in them after a round trip
    assert HeadSet.from_dict(S.to_dict()).attention_layers == A


@pytest.mark.parametrize("family", ["qwen3_5", "gemma3"] + [pytest.param(f, marks=pytest.mark.slow) for f in ("qwen3_vl_moe", "qwen3_5_moe", "glm4v", "gemma4")])
def test_discovery_ncs_and_cers_through_the_cli(tiny_random_dirs, loaded, family, tmp_path):
    from vheads.cli import app

    out = tmp_path / "hs"
    r = CliRunner().invoke(app, ["discover", "--model", str(tiny_random_dirs[family]), "--corpus", "comics", "--query", "ordinal",
                                 "--source", "last", "--n", "2", "--k", "2", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    (hs_file,) = sorted(out.glob("cm-ord-last.json"))
    rec = json.loads(hs_file.read_text())
    lm = loaded[family]
    assert {l for l, _ in rec["heads"]} <= set(lm.attention_layers)
    assert rec["model"].get("attention_layers", list(range(lm.n_layers))) == list(lm.attention_layers)
    r = CliRunner().invoke(app, ["evaluate", "--headset", str(hs_file), "--test", "ncs", "--test", "cers",
                                 "--controls", "layer-matched:2,any-layer:2", "--n", "2", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert sorted(x["test"] for x in res) == ["cers", "ncs-all"]
    for x in res:
        assert np.isfinite(x["T_S"]) and set(x["controls"]) == {"layer-matched", "any-layer"}


def test_models_lists_the_attention_zoo_families():
    from vheads.cli import app

    r = CliRunner().invoke(app, ["models", "--json"])
    assert r.exit_code == 0, r.output
    rows = {mt: row for row in json.loads(r.stdout) for mt in row["model_types"]}
    for mt in ZOO:
        row = rows[mt]
        assert row["image_tokens"] and row["box_to_tokens"] and row["tested_with_transformers"]
    assert "linear attention" in rows["qwen3_5"]["softmax_layers"] and rows["qwen3_vl_moe"]["softmax_layers"] == "every layer"
    text = CliRunner().invoke(app, ["models"]).stdout
    assert "qwen3_5_moe" in text and "softmax heads" in text


def test_unsupported_family_error_names_the_zoo_families(tiny_random_dirs, tmp_path):
    import shutil

    dst = tmp_path / "m"
    shutil.copytree(tiny_random_dirs["gemma3"], dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["model_type"] = "paligemma"  # a VLM family with no adapter
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="'paligemma' is not a supported VLM family; supported: ") as e:
        load_model(str(dst))
    for mt in ZOO:
        assert mt in str(e.value)


def test_split_half_ceiling_on_a_hybrid_model_counts_only_softmax_heads():
    from vheads.discovery import overlap_curve, split_half_ceiling

    L, H, A = 4, 4, (1, 3)
    rng = np.random.default_rng(0)
    per_item = rng.uniform(0, 1, size=(10, L, H))
    per_item[:, [0, 2]] = 0.0  # linear-attention layers: no attention map, no mass
    c = split_half_ceiling(per_item, 1, splits=30, seed=3, per_layer=True, attention_layers=A)
    # by hand: the same half-splits, top-1 of each softmax layer in each half
    rng = np.random.default_rng(3)
    want = []
    for _ in range(30):
        perm = rng.permutation(10)
        a, b = per_item[perm[:5]].mean(0), per_item[perm[5:]].mean(0)
        want.append(sum(int(a[l].argmax() == b[l].argmax()) for l in A))
    assert c.values.tolist() == want and c.values.max() <= len(A)
    # the overlap curve runs up to the model's heads, which are the softmax layers' only
    assert len(overlap_curve(per_item[0], per_item[1], attention_layers=A)) == len(A) * H


def test_gemma4_image_markers_are_checked_against_the_checkpoint(tiny_random_dirs, tmp_path):
    """The adapter writes Gemma 4's image markers itself: a checkpoint whose config names other
    ids for them is refused at the first prompt, naming the token and the config key."""
    import shutil

    from tests.engine.test_engine import _item

    dst = tmp_path / "g4"
    shutil.copytree(tiny_random_dirs["gemma4"], dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["boi_token_id"] = cfg["eoi_token_id"]  # an id that is not the tokenizer's '<|image>'
    (dst / "config.json").write_text(json.dumps(cfg))
    lm = load_model(str(dst))
    with pytest.raises(ValueError, match=r"Gemma 4: the tokenizer's id of '<\|image>' is not the config's boi_token_id"):
        lm.adapter.build(_item(), lm.processor)
