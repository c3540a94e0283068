"""`vheads causal-map` from the outside: bad input is one line and exit 2 before any work,
and a run writes a map file whose effects recompute from its per-item values, and its figure."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner


@pytest.mark.parametrize("args, says", [
    (["--test", "cers"], "--test 'cers'"),
    (["--n", "1"], "--n"),
    (["--rows", "nowhere"], "nowhere"),
    (["--ablation", "zeroed"], "--ablation"),
    (["--batch-size", "0"], "--batch-size"),
    (["--metric", "p5"], "--metric"),
    (["--seed", "-1"], "--seed"),
])
def test_bad_input_is_one_line_and_exit_2(args, says, tmp_path):
    from vheads.cli import app

    r = CliRunner().invoke(app, ["causal-map", *args, "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], r.output
    assert not (tmp_path / "o").exists()  # nothing written


def test_an_out_path_that_is_a_file_is_refused(tmp_path):
    from vheads.cli import app

    f = tmp_path / "taken"
    f.write_text("x")
    r = CliRunner().invoke(app, ["causal-map", "--out", str(f)])
    assert r.exit_code == 2 and "is a file" in r.output, r.output


def test_a_run_writes_a_recomputable_map_and_its_figure(tmp_path):
    from vheads.cli import app
    from vheads.models import tiny_model_path

    try:
        tiny_model_path()
    except FileNotFoundError:
        pytest.skip("the built-in tiny model is not built")
    r = CliRunner().invoke(app, ["causal-map", "--test", "ncs", "--test", "text", "--n", "2", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "o" / "causal_map.json").read_text())
    assert doc["format"] == "vheads.causal-map/1" and set(doc["maps"]) == {"ncs-all", "text"}
    m = doc["maps"]["ncs-all"]
    d = m["per_item"]["p4"]
    effect = np.array(d["matched"]).mean(1) - np.array(d["mismatched"]).mean(1)
    L, H = m["n_layers"], m["n_heads"]
    np.testing.assert_allclose(np.array(m["effect_p4"]["heads"], dtype=float).ravel(), effect[: L * H], atol=1e-12)
    assert (tmp_path / "o" / "causal_map.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, says", [
    (["--method", "shapley"], "--method 'shapley'"),
    (["--method", "regression", "--q", "1.5"], "--q 1.5"),
    (["--method", "regression", "--q", "0"], "--q 0"),
    (["--method", "regression", "--subsets", "8"], "--subsets 8"),  # fewer than the tiny model's 64 heads + 1
    (["--method", "regression", "--m", "0"], "--m 0"),
    (["--method", "regression", "--q", "0.3", "--m", "4"], "not both"),
    (["--backups", "-1"], "--backups"),
])
def test_a_bad_method_or_design_is_one_line_and_exit_2_before_any_forward(args, says, tmp_path, monkeypatch):
    from vheads.cli import app
    from vheads.engine import Engine

    def no_forward(*a, **k):
        raise AssertionError("a forward ran")

    monkeypatch.setattr(Engine, "run", no_forward)
    r = CliRunner().invoke(app, ["causal-map", "--test", "ncs", "--n", "2", *args, "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], r.output
    assert not (tmp_path / "o").exists()


def test_json_prints_every_method_and_their_agreement_recomputable_with_scipy(tmp_path, tiny):
    from scipy.stats import spearmanr

    from vheads.cli import app
    from vheads.models import tiny_model_path

    try:
        tiny_model_path()
    except FileNotFoundError:
        pytest.skip("the built-in tiny model is not built")
    subsets = tiny.n_layers * tiny.n_heads + 8  # the fewest the fit allows (heads + intercept), and 7 more
    r = CliRunner().invoke(app, ["causal-map", "--test", "ncs", "--n", "2", "--method", "exact", "--method", "atp",
                                 "--method", "regression", "--subsets", str(subsets), "--backups", "1", "--k", "4", "--json",
                                 "--quiet", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output.strip().splitlines()[-1])
    assert set(doc["maps"]) == {"ncs-all", "ncs-all:atp", "ncs-all:regression"}
    heads = {}
    for key, m in doc["maps"].items():
        d = m["per_item"]["p4"]
        eff = np.array(d["matched"]).mean(1) - np.array(d["mismatched"]).mean(1)
        heads[m["method"]] = eff[: m["n_layers"] * m["n_heads"]]  # heads first, whole layers after
    assert {(a["a"], a["b"]) for a in doc["agreement"]} == {("exact", "atp"), ("exact", "regression"), ("atp", "regression")}
    for a in doc["agreement"]:
        ref = spearmanr(heads[a["a"]], heads[a["b"]])
        assert a["spearman"] == pytest.approx(ref.statistic, abs=1e-9) and a["spearman_p"] == pytest.approx(ref.pvalue, rel=1e-6)
        top = [set(np.argsort(-heads[x], kind="stable")[:4]) for x in (a["a"], a["b"])]
        assert a["top_k_recall"] == len(top[0] & top[1]) / 4
    # the regression's coefficients are its map's effects; the design as asked for
    reg = doc["regression"]["ncs-all:regression"]
    assert reg["design"]["n_subsets"] == subsets and reg["design"]["q"] == 0.5
    np.testing.assert_allclose([h["coef"] for h in reg["heads"]], heads["regression"], atol=1e-9)
    # a backup pair's numbers: gain = with the hidden head hidden − alone
    for row in doc["backups"]["ncs-all"]:
        assert row["gain"] == pytest.approx(row["with_hidden"] - row["alone"], abs=1e-12)
    assert (tmp_path / "o" / "causal_methods.png").read_bytes()[:4] == b"\x89PNG"


def test_the_command_is_one_library_call(tmp_path):
    """``run_causal_map`` (what ``vheads causal-map`` calls) returns the maps it wrote: the file
    reads back to the same per-item values; bad input is refused before any model loads."""
    import numpy as np
    import pytest

    from vheads._errors import VheadsError
    from vheads.causal import load_causal_map, run_causal_map

    with pytest.raises(VheadsError, match="--metric"):
        run_causal_map(tests=["ncs"], n=2, metric="bits", out=tmp_path / "bad", model=str(tmp_path / "no-model"))
    assert not (tmp_path / "bad").exists()
    res = run_causal_map(tests=["ncs"], n=2, out=tmp_path / "o", quiet=True)
    maps = load_causal_map(res.path)
    assert set(maps) == set(res.maps)
    for key, x in res.maps.items():
        np.testing.assert_allclose(maps[key].head_map("p4"), x.head_map("p4"))
    assert res.to_dict()["maps"].keys() == {k for k, x in res.maps.items() if x.method in res.methods}
