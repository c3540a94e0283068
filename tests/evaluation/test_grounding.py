"""The grounding test end to end on tiny models: the captured maps against transformers' own
eager attention, the outcomes against a hand computation from those maps and the layout's
token boxes, the controls as subsets of one capture, and `vheads evaluate --test grounding`."""

import json

import numpy as np
import pytest

from tests._flood import components
import torch

from vheads.data.synthetic import kind_items
from vheads.engine import Engine
from vheads.evaluation import GroundingRule, HeadSet, capture_maps, evaluate_headsets, grounding, rank_p


@pytest.fixture(scope="module")
def items():
    return kind_items("grid-oracle", 3, 5)


def _eager_maps(lm, item, rows: str, norm: bool):
    """[L, H, |I|] from transformers' eager attention: the chosen rows' attention onto each
    image key, renormalised over the image keys per row when ``norm``, then the mean over rows."""
    from vheads.doctor._reference import eager_attentions
    from vheads.engine import install

    pr = lm.adapter.build(item, lm.processor)
    lay = pr.layout
    inputs = {k: v.to(lm.device) for k, v in pr.inputs.items()}
    attn = eager_attentions(lm.model, inputs)  # layers x [H, T, T]
    install(lm.model)  # the vheads attention back (the model is shared by the session's tests)
    q = lay.spans["last" if rows == "last" else "query"]
    img = lay.image_positions
    out = []
    for A in attn:
        a = A[:, q][:, :, img]  # [H, |Q|, |I|]
        if norm:
            a = a / A[:, q][:, :, img].sum(-1, keepdim=True)
        out.append(a.mean(1))
    return torch.stack(out).numpy(), lay


@pytest.mark.parametrize("family", ["qwen3_vl", "llava"])
@pytest.mark.parametrize("rows,aggregation", [("last", "mean-norm"), ("qspan", "mean-raw")])
def test_captured_maps_equal_eager_attention(loaded, items, family, rows, aggregation):
    lm = loaded[family]
    got = capture_maps(Engine(lm), items[:2], GroundingRule(rows=rows, aggregation=aggregation))
    for (maps, grid), item in zip(got, items[:2]):
        want, lay = _eager_maps(lm, item, rows, aggregation == "mean-norm")
        np.testing.assert_allclose(maps, want, atol=1e-5)
        assert grid.render.shape[0] == len(lay.image_positions)


def _hand_outcome(maps, lay, heads, box, threshold=0.5):
    """Pointing and IoU by hand on an untiled grid of equal tokens: the mean map of ``heads``,
    its argmax token's box centre in ``box``; the box rule over tokens with a flood fill."""
    m = np.mean([maps[l, h] for l, h in heads], axis=0)  # [|I|]
    tb = lay.token_boxes.numpy()
    rc = lay.image_rc.numpy()
    t = int(np.argmax(m))
    cx, cy = (tb[t, 0] + tb[t, 2]) / 2, (tb[t, 1] + tb[t, 3]) / 2
    point = float(box[0] <= cx < box[2] and box[1] <= cy < box[3])
    keep = {tuple(rc[i]) for i in range(len(m)) if m[i] >= threshold * m.max()}
    comps = components(keep)  # row-major seeds: ties go to the first component
    best = max(comps, key=len)  # max keeps the first of equal sizes
    idx = [i for i in range(len(m)) if tuple(rc[i]) in best]
    bx = tb[idx, 0].min(), tb[idx, 1].min(), tb[idx, 2].max(), tb[idx, 3].max()
    iw = max(0, min(bx[2], box[2]) - max(bx[0], box[0]))
    ih = max(0, min(bx[3], box[3]) - max(bx[1], box[1]))
    inter = iw * ih
    iou = inter / ((bx[2] - bx[0]) * (bx[3] - bx[1]) + (box[2] - box[0]) * (box[3] - box[1]) - inter)
    return point, iou


def test_grounding_outcomes_match_a_hand_computation_and_controls_share_one_capture(loaded, items):
    lm = loaded["qwen3_vl"]
    eng = Engine(lm)
    L, H = eng.shape
    sets = [HeadSet([(0, 0), (1, 2)], L, H), HeadSet([(1, 1)], L, H), HeadSet([(0, 3), (1, 0), (1, 3)], L, H)]
    calls = []
    orig = eng.capture_prompts
    eng.capture_prompts = lambda reqs, *a, **k: calls.append(len(reqs)) or orig(reqs, *a, **k)
    out = grounding(eng, items, sets)
    assert calls == [len(items)]  # one capture forward per item serves every head-set
    for i, item in enumerate(items):
        maps, lay = _eager_maps(lm, item, "last", True)
        box = item.regions[item.target]
        for j, S in enumerate(sets):
            point, iou = _hand_outcome(maps, lay, list(S), box)
            assert out.values[j, i] == point
            assert out.detail["iou"][j, i] == pytest.approx(iou, abs=1e-9)
            assert out.detail["acc50"][j, i] == float(iou >= 0.5)
    # a head-set's outcomes do not depend on which others share its capture
    alone = grounding(eng, items, sets[1:2])
    np.testing.assert_array_equal(alone.values[0], out.values[1])
    np.testing.assert_array_equal(alone.detail["iou"][0], out.detail["iou"][1])


def test_evaluate_headsets_grounding_gives_three_measures_against_the_same_controls(loaded):
    eng = Engine(loaded["qwen3_vl"])
    L, H = eng.shape
    S = HeadSet([(0, 1), (1, 2)], L, H)
    calls = []
    orig = eng.capture_prompts
    eng.capture_prompts = lambda reqs, *a, **k: calls.append(len(reqs)) or orig(reqs, *a, **k)
    res = evaluate_headsets(eng, {"S1": S, "S2": HeadSet([(1, 0)], L, H)}, ["grounding"],
                            controls="layer-matched:5,any-layer:5", n=4, seed=3, progress=False)
    assert calls == [4]  # one capture for both head-sets, their controls and all three measures
    assert [r.test for r in res] == ["grounding", "grounding-iou", "grounding-acc50"] * 2
    for r in res:
        vals = r.outcomes.values
        assert r.t_s == pytest.approx(vals[0].mean())
        for label, c in r.controls.items():
            idx = [j for j, h in enumerate(r.headset_ids) if h.startswith(label + "#")]
            assert c["rank_p"] == pytest.approx(rank_p(vals[0].mean(), vals[idx].mean(1)).p)
            assert "holm_p" in c
    # the same control draws under each measure
    ids = {r.test: r.headset_ids for r in res[:3]}
    assert ids["grounding"] == ids["grounding-iou"] == ids["grounding-acc50"]


def test_vheads_evaluate_test_grounding(tmp_path):
    from typer.testing import CliRunner

    from vheads.cli import app

    r = CliRunner().invoke(app, ["discover", "--corpus", "comics", "--query", "ordinal", "--source", "last",
                                 "--n", "4", "--out", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    hs = tmp_path / "cm-ord-last.json"
    r = CliRunner().invoke(app, ["evaluate", "--headset", str(hs), "--test", "grounding", "--controls", "layer-matched:4",
                                 "--n", "3", "--json", "--box-threshold", "0.4"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert [g["test"] for g in got] == ["grounding", "grounding-iou", "grounding-acc50"]
    point = np.array(got[0]["per_item"]["values"]["S"])
    assert set(point.tolist()) <= {0.0, 1.0} and got[0]["T_S"] == pytest.approx(point.mean())
    bad = CliRunner().invoke(app, ["evaluate", "--headset", str(hs), "--test", "grounding", "--box-threshold", "2"])
    assert bad.exit_code == 2 and "threshold" in bad.output
    # a RefCOCO split in the lmms-lab parquet layout (tests/data/test_refcoco.py writes it)
    from tests.data.test_refcoco import _write_parquet

    _write_parquet(tmp_path / "refcoco", "val", [("q1", "coffee", ["the cup", "white mug"], [150, 60, 300, 200]),
                                                 ("q2", "chelsea", ["cat"], [10, 20, 100, 50])])
    r = CliRunner().invoke(app, ["evaluate", "--headset", str(hs), "--test", "grounding", "--controls", "any-layer:3",
                                 "--refer", f"refcoco-hf:{tmp_path / 'refcoco'},val", "--n", "3", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert [i.split("-e")[0] for i in got[0]["per_item"]["item_ids"]] == ["refcoco-val-q1", "refcoco-val-q1", "refcoco-val-q2"]
    bad = CliRunner().invoke(app, ["evaluate", "--headset", str(hs), "--test", "grounding",
                                   "--refer", f"refcoco-hf:{tmp_path / 'refcoco'},testA"])
    assert bad.exit_code == 2 and "no split 'testA'" in bad.output and len(bad.output.strip().splitlines()) == 1
