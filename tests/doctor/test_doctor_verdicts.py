"""The doctor's verdicts are right (issue 34 points 5, 15; issue 35 point 5): in bf16 it
compares intervention effects and fails on a planted engine bug; a baseline is judged by a
binomial interval; descriptive checks show ⚠, never ✗, and the last line says so; the fp32
copy check empties the cache before asking for free memory and frees the copy after; the
projected study counts the distinct control head-sets the memo runs."""

from __future__ import annotations

import gc
import itertools
import math
import weakref

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from vheads.doctor import Check, Context, DoctorReport, run_checks
from vheads.doctor import _checks, _model
from vheads.study._projection import compared_per_setting, control_pool, expected_union, spread
from vheads.engine import Engine


@pytest.fixture(scope="module")
def tiny_bf16():
    from vheads.models import load_model, tiny_model_path

    try:
        tiny_model_path()
    except FileNotFoundError:
        pytest.skip("the built-in tiny model is not built")
    lm = load_model("tiny", dtype="bfloat16")
    return Context(lm, Engine(lm))


# ---- bf16: effects, and a planted bug --------------------------------------------------------------


def test_the_bf16_engine_checks_hold_on_the_tiny_model(tiny_bf16):
    checks = {c.name: c for c in run_checks(tiny_bf16, ["mask", "steer"])}
    assert all(c.ok for c in checks.values()), [c.summary for c in checks.values()]


def test_a_planted_engine_bug_fails_the_doctor_in_bf16(tiny_bf16, monkeypatch):
    """The engine drops the mask of one head-set: the mask check fails in bf16 and names that
    head-set; the others still agree. A dropped intervention shows as an error equal to the
    reference's effect, so it is visible exactly where that effect exceeds the tolerance
    (20% of itself + 2 ε), i.e. where it exceeds 2.5 ε: the bug is planted on every head-set
    whose reference effect clears 2.5 ε, one at a time. Every head of the middle layer must be
    among them (hiding a whole layer from the image cannot be within bf16 rounding); on the
    retrained tiny model a single head moves the logits by ~0.06, under ε ~ 0.12, so dropping
    it is invisible to any bf16 comparison and is not planted there."""
    (clean,) = run_checks(tiny_bf16, ["mask"])
    assert clean.ok, clean.summary
    noise, effects = clean.numbers["noise"], clean.numbers["effect_per_row"]
    visible = [b for b, e in enumerate(effects) if e > 2.5 * noise * (1 + 1e-6)]
    assert 1 in visible, (effects, noise)  # the head-set of every head of the middle layer
    planted = _checks.mask_keys
    for b in visible:
        def drops_head_set_b(heads, rows, keys, b=b):
            heads = heads.clone()
            heads[b] = False
            return planted(heads, rows, keys)

        monkeypatch.setattr(_checks, "mask_keys", drops_head_set_b)
        (c,) = run_checks(tiny_bf16, ["mask"])
        assert c.ok is False and f"head-sets [{b}] differ" in c.summary, (b, c.summary)
        assert DoctorReport("tiny", "cpu", "bfloat16", [c]).failed == ["mask"]


def test_effects_are_compared_row_by_row_against_the_reference():
    ctx = type("C", (), {})()
    base = torch.zeros(3, 5)
    want = torch.tensor([[4.0, 0, 0, 0, 0], [0, -2.0, 0, 0, 0], [0, 0, 0.01, 0, 0]])  # effects 4, 2, within the noise
    ok = _checks._compare_effects("mask", want + 0.05, want, base, base, ctx, "logit")
    assert ok.ok and ok.numbers["noise"] == pytest.approx(4.0 * 2 ** -7)
    dropped = want.clone()
    dropped[1] = 0  # the engine ignores row 1: its effect is 0 where the reference's is 2
    bad = _checks._compare_effects("mask", dropped, want, base, base, ctx, "logit")
    assert bad.ok is False and "head-sets [1] differ" in bad.summary
    noisy = base.clone()
    noisy[:, 4] = 0.5  # the two computations differ by 0.5 without intervention ...
    small = noisy.clone()
    small[:, 0] = 0.1  # ... and the intervention moves a logit by 0.1: no row can tell
    tiny = _checks._compare_effects("mask", base, small, base, noisy, ctx, "logit")
    assert tiny.ok is False and "cannot tell" in tiny.summary


# ---- descriptive checks: ⚠, never ✗ ------------------------------------------------------------------


def test_descriptive_checks_warn_and_the_last_line_agrees():
    rep = DoctorReport("m", "cpu", "float32", [Check("mask", True, "fine"), Check("bf16 vs fp32", False, "drift", invariant=False)])
    assert rep.checks[1].mark == "⚠" and rep.ok and rep.warnings == ["bf16 vs fp32"]
    text = rep.text()
    assert "✗" not in text and text.splitlines()[-1] == "all invariants hold; ⚠ 1 to read (not invariants): bf16 vs fp32"
    broken = DoctorReport("m", "cpu", "float32", [Check("mask", False, "off")])
    assert broken.checks[0].mark == "✗" and broken.text().splitlines()[-1] == "FAILED: mask"


# ---- the baseline: a binomial interval -------------------------------------------------------------


@pytest.mark.parametrize("k,n", [(0, 8), (7, 8), (8, 8), (12, 24), (23, 24)])
def test_the_baseline_interval_is_the_exact_binomial_one(k, n):
    want = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    got = _model.binomial_interval([1.0] * k + [0.0] * (n - k))
    assert got == pytest.approx((want.low, want.high), abs=1e-9)


def test_a_baseline_is_flagged_only_when_its_interval_lies_outside(monkeypatch):
    """Oracle 0.88 on 8 items (7.04 of 8) is not evidence against 0.90–1.00; 0.50 on 24 is."""
    def audit(p_oracle):
        def fake(engine, sets):
            return {"oracle": {"n": len(p_oracle), "mean_p_key": float(np.mean(p_oracle)), "expected": [0.9, 1.0],
                               "ok": False, "p_key": p_oracle}}
        return fake

    ctx = type("C", (), {"seed": 0, "templates": None, "engine": None})()
    monkeypatch.setattr("vheads.evaluation.audit_sets", lambda *a, **k: {})
    monkeypatch.setattr("vheads.evaluation.baseline_audit", audit([0.88] * 8))
    c, _ = _model.check_baseline(ctx)
    assert c.ok is True and c.mark == "✓"
    monkeypatch.setattr("vheads.evaluation.baseline_audit", audit([0.5] * 24))
    c, _ = _model.check_baseline(ctx)
    assert c.ok is False and c.mark == "⚠" and "(!)" in c.summary


# ---- the fp32 copy: cache emptied first, copy freed after (issue 34 point 15) -------------------------


def test_free_memory_is_asked_after_emptying_the_cache(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: calls.append("mem_get_info") or (123, 456))
    assert _model._free_bytes(torch.device("cuda")) == 123
    assert calls == ["empty_cache", "mem_get_info"]


def test_the_other_dtype_copy_is_freed_after_the_check(tiny_bf16, monkeypatch):
    from vheads.models import load_model

    copies = []

    def loading(*args, **kwargs):
        lm = load_model(*args, **kwargs)
        copies.append(weakref.ref(lm.model))
        return lm

    monkeypatch.setattr("vheads.models.load_model", loading)
    c = _model.check_dtypes(tiny_bf16, "tiny")
    assert c.ok is not None and len(copies) == 1
    gc.collect()
    assert copies[0]() is None  # nothing keeps the copy alive
    tiny_bf16.reinstall()


# ---- the projection counts the distinct head-sets ------------------------------------------------------


@pytest.mark.parametrize("N,c,s", [(1, 1, 3), (3, 2, 2), (4, 1, 3), (5, 2, 3), (6, 3, 2)])
def test_expected_union_of_the_settings_subsets_equals_enumeration(N, c, s):
    """Each of s settings compares S with c distinct members of one pool of N: the expected
    number of distinct head-sets run, over every choice of the s subsets."""
    subsets = list(itertools.combinations(range(N), c))
    mean = np.mean([len(set().union(*pick)) for pick in itertools.product(subsets, repeat=s)])
    assert expected_union(N, c, s) == pytest.approx(mean, rel=1e-12)
    assert expected_union(None, c, s) == c * s


def test_a_setting_compares_a_small_pool_whole_and_r_of_a_large_one():
    """Pools of 10 and 105 (the 8-head tiny model's layer-matched pools of earlier waves) and
    3,654 at R = 249; a pool of at most 2R is compared whole (issue 35)."""
    assert compared_per_setting(10, 249) == 10 and compared_per_setting(105, 249) == 105
    assert compared_per_setting(3654, 249) == 249 and compared_per_setting(None, 20) == 20
    assert compared_per_setting(40, 20) == 40 and compared_per_setting(41, 20) == 20


def test_control_pools_equal_the_sets_a_control_can_draw():
    """Enumerated on a 3-layer x 4-head model: every layer-matched set with one head in
    layers 0 and 1 but S itself (overlap with S allowed: exchangeable), every other any-layer
    set of its size; and the S-disjoint pools."""
    from vheads.evaluation import HeadSet, draw_controls

    L, H = 3, 4
    S = [(0, 0), (1, 0)]
    heads = [(l, h) for l in range(L) for h in range(H)]
    others = [frozenset(c) for c in itertools.combinations(heads, 2) if frozenset(c) != frozenset(S)]
    lm_sets = {c for c in others if sorted(l for l, _ in c) == [0, 1]}
    any_sets = set(others)
    disjoint = {c for c in others if not c & frozenset(S)}
    assert control_pool("layer-matched", [1, 1, 0], H) == len(lm_sets) == 15
    assert control_pool("any-layer", [1, 1, 0], H) == len(any_sets) == math.comb(12, 2) - 1
    assert control_pool("layer-matched-disjoint", [1, 1, 0], H) == len(lm_sets & disjoint) == 9
    assert control_pool("any-layer-disjoint", [1, 1, 0], H) == len(disjoint) == math.comb(10, 2)
    assert spread(2, L, H) == [1, 1, 0] and spread(5, 2, 4, "per-layer") == [4, 4]
    drawn = {frozenset(d.heads) for d in draw_controls("layer-matched", HeadSet(S, L, H), 400, 0)}
    assert drawn <= lm_sets and len(drawn) == len(lm_sets)  # 400 draws reach the whole pool, and nothing beyond it
