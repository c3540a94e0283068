"""The tests under head-output ablations (DESIGN.md "Ablation types"): NCS with S's outputs
zeroed equals the drops an eager model with those outputs zeroed by hand gives, the run
records its ablation, and bad requests fail before any work."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from vheads.data import OPTION_LETTERS



def _p_key(lm, item, zero_heads=()) -> float:
    """P(key) over the four letters from the plain model, with ``zero_heads``' slices of
    every ``o_proj`` input set to 0 at every row (a forward pre-hook)."""
    lm.model.set_attn_implementation({n: "sdpa" for n in lm.model.config.sub_configs})
    pr = lm.adapter.build(item, lm.processor)
    layers = lm.model.get_decoder().layers
    D = lm.head_dim
    hooks = []
    for l, h in zero_heads:
        def pre(module, args, h=h):
            x = args[0].clone()
            x[..., h * D : (h + 1) * D] = 0.0
            return (x, *args[1:])
        hooks.append(layers[l].self_attn.o_proj.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            z = lm.model(**pr.inputs).logits[0, -1, lm.adapter.letter_token_ids(lm.processor)].double()
    finally:
        for hk in hooks:
            hk.remove()
    return float(torch.softmax(z, -1)[OPTION_LETTERS.index(item.answer)])


def test_ncs_under_zero_ablation_equals_hand_zeroed_drops(tiny):
    from vheads.engine import Engine
    from vheads.evaluation import HeadSet, evaluate_headsets, item_sets

    S = HeadSet([(1, 2), (2, 5), (3, 0)], tiny.n_layers, tiny.n_heads)
    (res,) = evaluate_headsets(Engine(tiny), {"S": S}, ["ncs"], controls="layer-matched:2", n=3, seed=4, progress=False,
                               ablation="zero")
    assert res.ablation == "zero" and res.to_dict()["ablation"] == "zero"
    sets = item_sets(["class-matched", "class-mismatched"], 3, lambda kind: 4)
    drops = {arm: np.array([_p_key(tiny, it) - _p_key(tiny, it, S.heads) for it in sets[f"class-{arm}"]])
             for arm in ("matched", "mismatched")}
    np.testing.assert_allclose(res.outcomes.detail["drop_matched"][0], drops["matched"], atol=1e-4)
    np.testing.assert_allclose(res.outcomes.detail["drop_mismatched"][0], drops["mismatched"], atol=1e-4)
    assert res.t_s == pytest.approx(drops["matched"].mean() - drops["mismatched"].mean(), abs=1e-4)


def test_mean_ablation_records_its_reference_items(tiny):
    from vheads.engine import Engine
    from vheads.evaluation import HeadSet, evaluate_headsets, item_sets, reference_sets

    S = HeadSet([(1, 2), (3, 0)], tiny.n_layers, tiny.n_heads)
    (res,) = evaluate_headsets(Engine(tiny), {"S": S}, ["text"], controls="layer-matched:2", n=2, seed=1, progress=False,
                               ablation="mean", reference_n=3)
    ref = res.to_dict()["ablation_reference"]
    assert ref["n"] == 3 and ref["seed"] == 1
    assert ref["items"]["text"] == [it.id for it in reference_sets(["text"], 3, 1)["text"]]
    # the reference items are their own set, never the evaluation items
    assert not set(ref["items"]["text"]) & {it.id for it in item_sets(["text"], 2, lambda kind: 1)["text"]}


@pytest.mark.parametrize("args,needle", [
    (["--ablation", "shuffle"], "--ablation: unknown ablation 'shuffle'"),
    (["--ablation", "zero", "--test", "cers"], "--ablation: the 'zero' ablation replaces head outputs"),
    (["--ablation", "zero", "--test", "ncs-grid"], "ncs-grid"),
    (["--ablation", "mean", "--test", "ncs", "--reference-n", "0"], "reference set is empty"),
])
def test_bad_ablation_requests_are_one_line_exit_2_before_the_model_loads(tmp_path, args, needle):
    from vheads.cli import app

    hs = tmp_path / "missing-is-fine-because-checks-come-first.json"
    r = CliRunner().invoke(app, ["evaluate", "--headset", str(hs), *args])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], r.output


def test_evaluate_cli_json_records_the_ablation(tmp_path):
    from vheads.cli import app

    out = tmp_path / "hs"
    r = CliRunner().invoke(app, ["discover", "--corpus", "comics", "--query", "ordinal", "--source", "last", "--n", "3",
                                 "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["evaluate", "--headset", str(out / "cm-ord-last.json"), "--test", "ncs", "--controls",
                                 "layer-matched:2", "--n", "2", "--ablation", "resample", "--json"])
    assert r.exit_code == 0, r.output
    (res,) = json.loads(r.stdout)
    assert res["ablation"] == "resample" and res["ablation_reference"] == {"pairing_seed": 0}
