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
