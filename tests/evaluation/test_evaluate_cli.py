"""`vheads evaluate` from the outside: the NCS interval is that of a difference of two
independent means (Welch, and a bootstrap resampling both arms), recomputable from the
per-item arms the JSON carries."""

import hashlib
import json

import numpy as np
import pytest
from scipy import stats as sps
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def tiny_headset(tmp_path_factory):
    from vheads.cli import app

    out = tmp_path_factory.mktemp("hs")
    r = CliRunner().invoke(app, ["discover", "--corpus", "comics", "--query", "ordinal", "--source", "last",
                                 "--n", "4", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    return out / "cm-ord-last.json"


def test_evaluate_ncs_reports_welch_and_two_arm_bootstrap_intervals(tiny_headset):
    from vheads.cli import app

    r = CliRunner().invoke(app, ["evaluate", "--headset", str(tiny_headset), "--test", "ncs", "--controls",
                                 "layer-matched:3", "--n", "6", "--seed", "2", "--json"])
    assert r.exit_code == 0, r.output
    (res,) = json.loads(r.stdout)
    m = np.array(res["per_item"]["arms"]["matched"]["S"])
    mm = np.array(res["per_item"]["arms"]["mismatched"]["S"])
    assert len(m) == len(mm) == 6
    assert res["T_S"] == pytest.approx(m.mean() - mm.mean(), abs=1e-12)
    welch = sps.ttest_ind(m, mm, equal_var=False).confidence_interval(0.95)
    assert res["ci95_method"] == "welch"
    assert res["ci95"] == pytest.approx([welch.low, welch.high], rel=1e-9)
    # the bootstrap's seed derives from (run seed, head-set, test); 6 < 30 items per arm: BCa beside it
    seed = int(hashlib.sha256(f"2|bootstrap|{tiny_headset.stem}|ncs".encode()).hexdigest()[:8], 16)
    assert res["bootstrap_seed"] == seed
    diff = lambda a, b, axis=-1: a.mean(axis=axis) - b.mean(axis=axis)  # noqa: E731
    boot = sps.bootstrap((m, mm), diff, n_resamples=2000, method="percentile", rng=np.random.default_rng(seed)).confidence_interval
    assert res["ci95_bootstrap"] == pytest.approx([boot.low, boot.high], rel=1e-9)
    bca = sps.bootstrap((m, mm), diff, n_resamples=2000, method="BCa", rng=np.random.default_rng(seed)).confidence_interval
    assert res["ci95_bca"] == pytest.approx([bca.low, bca.high], rel=1e-9)
    # every compared head-set's per-item values are there, so the rank p can be recomputed; they
    # are distinct head-sets (the whole pool when it holds at most 2R), so none repeats another
    vals = res["per_item"]["values"]
    lm = res["controls"]["layer-matched"]
    ids = [h for h in vals if h.startswith("layer-matched#")]
    assert len(ids) == lm["distinct"] and (lm["distinct"] == lm["pool"] if lm["mode"] == "exact" else lm["distinct"] == 3)
    t_s, t_c = np.mean(vals["S"]), [np.mean(vals[h]) for h in ids]
    assert lm["rank_p"] == pytest.approx((1 + sum(t >= t_s for t in t_c)) / (len(ids) + 1))
    assert lm["mean"] == pytest.approx(np.mean(t_c))
    if len(t_c) > 1:
        assert lm["sd"] == pytest.approx(np.std(t_c, ddof=1))


def test_evaluate_runs_attention_matched_and_sized_random_n_controls(tiny_headset):
    """attention-matched computes the image-attention mass it needs; random-n:R@N has its own n."""
    from vheads.cli import app

    r = CliRunner().invoke(app, ["evaluate", "--headset", str(tiny_headset), "--test", "cers-sym", "--controls",
                                 "attention-matched:2,random-n:2@5", "--n", "3", "--steer-rows", "last", "--json"])
    assert r.exit_code == 0, r.output
    (res,) = json.loads(r.stdout)
    assert res["test"] == "cers-sym" and res["ci95_method"] == "t"
    assert {c: v["R"] for c, v in res["controls"].items()} == {"attention-matched": 2, "random-n(n=5)": 2}
    assert set(res["per_item"]["values"]) == {"S", "attention-matched#0", "attention-matched#1", "random-n(n=5)#0",
                                              "random-n(n=5)#1"}  # pools of more than 2R = 4: two distinct draws each


def test_random_n_spec_takes_its_own_head_count():
    from vheads.evaluation import layer_matched_controls  # noqa: F401  (public API import)
    from vheads.evaluation._controls import ControlRequest, parse_control_spec

    assert parse_control_spec("random-n:3@200,random-n:2") == [ControlRequest("random-n", 3, 200), ControlRequest("random-n", 2)]
    for bad in ("random-n:3@0", "random-n:3@x", "layer-matched:3@5", "random-n:3@200,random-n:4@200"):
        with pytest.raises(ValueError):
            parse_control_spec(bad)


@pytest.mark.slow
def test_evaluate_beta_rule_controls_applies_the_study_rule_to_the_controls_cers(tiny_headset):
    """`--beta-rule controls` chooses β as the study does: the largest sweep point at which
    the layer-matched draws' CERS has RMS <= 0.05, else the point of smallest RMS; each RMS
    is recomputed here from a plain `--beta B` run's per-item values of the same draws."""
    from vheads.cli import app
    from vheads.study._headline import EVALUATE_SWEEP, EVALUATE_SWEEP_DRAWS

    args = ["evaluate", "--headset", str(tiny_headset), "--test", "cers", "--n", "2", "--seed", "1", "--json", "--quiet"]
    r = CliRunner().invoke(app, [*args, "--controls", "layer-matched:2", "--beta-rule", "controls"])
    assert r.exit_code == 0, r.output
    (res,) = json.loads(r.stdout)
    rms = {}
    for b in EVALUATE_SWEEP:
        rb = CliRunner().invoke(app, [*args, "--controls", f"layer-matched:{EVALUATE_SWEEP_DRAWS}", "--beta", str(b)])
        assert rb.exit_code == 0, rb.output
        (one,) = json.loads(rb.stdout)
        draws = [np.mean(v) for h, v in one["per_item"]["values"].items() if h.startswith("layer-matched#")]
        rms[b] = float(np.sqrt(np.mean(np.square(draws))))
    assert res["beta_rule"]["rms"] == pytest.approx({f"{b:g}": v for b, v in rms.items()}, abs=1e-12)
    ok = [b for b, v in rms.items() if v <= 0.05]
    assert res["beta"] == (max(ok) if ok else min(rms, key=rms.get))
    assert res["beta_rule"]["met"] == bool(ok)


def test_evaluate_says_which_beta_it_steers_at_and_why(tiny_headset):
    from vheads.cli import app

    r = CliRunner().invoke(app, ["evaluate", "--headset", str(tiny_headset), "--test", "cers", "--controls", "layer-matched:2",
                                 "--n", "2", "--beta", "100", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "beta = 100: fixed" in r.stdout and "--beta-rule controls" in r.stdout
    bad = CliRunner().invoke(app, ["evaluate", "--headset", str(tiny_headset), "--beta-rule", "auto"])
    assert bad.exit_code == 2 and "--beta-rule" in bad.stderr and "Traceback" not in bad.output


def test_evaluate_gives_each_control_a_verdict_its_floor_and_its_family(tiny_headset, tmp_path):
    """Two head-sets tested together against 3 layer-matched controls: Holm over 2 cannot fall
    below 2/(3+1) = 0.5 (statsmodels' Holm of every member at its floor), so each verdict is
    cannot tell, whatever S did; the text output says so."""
    from statsmodels.stats.multitest import multipletests

    from vheads.cli import app

    second = tmp_path / "copy.json"
    second.write_text(tiny_headset.read_text())
    args = ["evaluate", "--headset", str(tiny_headset), "--headset", str(second), "--test", "cers", "--controls",
            "layer-matched:3", "--n", "2", "--seed", "1"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    entries = [x["controls"]["layer-matched"] for x in res]
    ns = [e["distinct"] for e in entries]
    floors = multipletests([1 / (n + 1) for n in ns], method="holm")[1]
    adjusted = multipletests([e["rank_p"] for e in entries], method="holm")[1]
    for e, floor, p in zip(entries, floors, adjusted):
        assert e["holm_floor"] == pytest.approx(floor) and e["holm_p"] == pytest.approx(p)
        assert e["family"]["m"] == 2 and e["verdict"] == ("cannot tell" if floor > 0.05 else "yes" if p <= 0.05 else "no")
    assert {e["verdict"] for e in entries} == {"cannot tell"}
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0 and "cannot tell with these controls: Holm over 2 cannot fall below" in text.output
