"""The doctor's attention-backend check (issue 34 point 6): P(option) under eager, sdpa and
(where it can run) flash-attention, per tower; the printed largest difference is the one a
hand-run of the model under each backend gives, and a planted disagreement is a ⚠ naming the
tower it sits in. The hand-run sets the backend with transformers' own
``set_attn_implementation`` and reads the letters' logits itself; it shares no code with
:mod:`vheads.doctor._backends`."""

from __future__ import annotations

from itertools import combinations

import pytest
import torch
from transformers import AttentionInterface

from vheads.doctor import Context, DoctorReport
from vheads.doctor import _backends
from vheads.doctor._backends import BACKEND_KINDS, available_backends, check_backends
from vheads.engine import Engine


@pytest.fixture(scope="module")
def ctx():
    from vheads.models import load_model, tiny_model_path

    try:
        tiny_model_path()
    except FileNotFoundError:
        pytest.skip("the built-in tiny model is not built")
    lm = load_model("tiny")
    return Context(lm, Engine(lm))


def _hand_probs(ctx: Context, setting: dict[str, str]) -> torch.Tensor:
    """P over the option letters at the last row, the model run by hand under ``setting``."""
    lm = ctx.lm
    lm.model.set_attn_implementation(setting)
    tok = lm.adapter.tokenizer(lm.processor)
    ids = [tok.convert_tokens_to_ids(letter) for letter in "ABCD"]
    rows = []
    try:
        with torch.no_grad():
            for kind in BACKEND_KINDS:
                pr = lm.adapter.build(ctx.items[kind], lm.processor)
                logits = lm.model(**{k: v.to(lm.device) for k, v in pr.inputs.items()}).logits[0, -1].double()
                rows.append(torch.softmax(logits[ids], -1))
    finally:
        ctx.reinstall()
    return torch.stack(rows)


def _hand_largest(ctx: Context, tower_subs: list[str], backends: tuple[str, ...]) -> float:
    cfg = ctx.lm.model.config
    subs = [s for s in cfg.sub_configs if getattr(cfg, s, None) is not None]
    probs = [_hand_probs(ctx, {s: (b if s in tower_subs else "sdpa") for s in subs}) for b in backends]
    return max(float((a - b).abs().max()) for a, b in combinations(probs, 2))


@pytest.fixture
def planted_sdpa(ctx, monkeypatch):
    """transformers' registered sdpa doubles the language model's attention output (the
    vision tower's sdpa, and vheads' engine, which calls sdpa directly, stay as they are)."""
    text = ctx.lm.model.config.text_config
    plain = AttentionInterface._global_mapping["sdpa"]
    calls = []

    def doubled(module, *args, **kwargs):
        out, w = plain(module, *args, **kwargs)
        if module.config is text:
            calls.append(module.layer_idx)
            out = out * 2.0
        return out, w

    monkeypatch.setitem(AttentionInterface._global_mapping, "sdpa", doubled)
    return calls


def test_the_check_runs_on_the_tiny_model_and_names_the_engines_backend(ctx):
    c = check_backends(ctx)
    assert c.ok is True and c.invariant is False, c.summary
    assert set(c.numbers) >= {"language model", "vision tower"}
    assert c.numbers["language model"]["backends"] == ["eager", "sdpa"]  # no flash on a CPU
    assert c.numbers["engine"] == {"language model": "sdpa", "vision tower": "sdpa"}
    assert "vheads' numbers are vision tower sdpa, language model sdpa" in c.summary
    assert any("flash_attention_2 not compared" in d for d in c.details)
    # the engine is on sdpa: its empty plan sits on sdpa's P within float32 noise
    assert c.numbers["engine_vs"]["sdpa"] < 1e-5
    # afterwards the engine runs vheads' attention again
    assert ctx.lm.model.config.text_config._attn_implementation != "sdpa"


def test_the_printed_difference_equals_a_hand_run_of_each_backend(ctx, planted_sdpa):
    c = check_backends(ctx)
    assert planted_sdpa  # the planted kernel ran
    subs = [s for s in ctx.lm.model.config.sub_configs if getattr(ctx.lm.model.config, s, None) is not None]
    for tower, tower_subs in (("language model", ["text_config"]), ("vision tower", [s for s in subs if s != "text_config"])):
        want = _hand_largest(ctx, tower_subs, ("eager", "sdpa"))
        got = c.numbers[tower]["max_diff"]
        assert abs(got - want) <= 1e-6 * max(1.0, want), (tower, got, want)
        assert f"{tower} {got:.2e} (eager vs sdpa)" in c.summary
    assert c.numbers["language model"]["max_diff"] > 0.01  # the planted disagreement is visible ...


def test_a_planted_disagreement_is_a_warning_naming_the_tower(ctx, planted_sdpa):
    c = check_backends(ctx)
    assert c.ok is False and c.mark == "⚠"
    assert c.numbers["language model"]["max_diff"] > c.numbers["tolerance"]
    assert c.numbers["vision tower"]["max_diff"] <= c.numbers["tolerance"]  # the vision tower's kernels still agree
    rep = DoctorReport("tiny", "cpu", "float32", [c])
    assert rep.ok and rep.warnings == ["attention backends"]  # descriptive: never a failure


def test_a_backend_that_cannot_run_is_named_with_its_reason(ctx):
    c = check_backends(ctx, backends=("eager", "sdpa", "flash_attention_2"))
    assert c.ok is True  # the two that ran agree
    assert set(c.numbers["skipped"]) == {"language model", "vision tower"}  # tried on each tower
    assert all("flash_attention_2" in by for by in c.numbers["skipped"].values())
    assert any(d.startswith("flash_attention_2 not run on the language model:") for d in c.details)
    assert ctx.lm.model.config.text_config._attn_implementation != "flash_attention_2"


def test_a_backend_one_tower_refuses_is_still_compared_on_the_other(ctx, monkeypatch):
    model = ctx.lm.model
    plain = model.set_attn_implementation

    def no_eager_vision(setting, *a, **k):
        if isinstance(setting, dict) and setting.get("vision_config") == "eager":
            raise ValueError("this vision tower does not support eager")
        return plain(setting, *a, **k)

    monkeypatch.setattr(model, "set_attn_implementation", no_eager_vision)
    c = check_backends(ctx)
    assert c.numbers["skipped"] == {"vision tower": {"eager": "this vision tower does not support eager"}}
    assert c.numbers["language model"]["backends"] == ["eager", "sdpa"]
    assert c.numbers["vision tower"]["backends"] == ["sdpa"] and "vision tower 0.00e+00 (one backend ran)" in c.summary
    assert "eager not run on the vision tower: this vision tower does not support eager" in c.details


@pytest.mark.parametrize("device,installed,want", [
    ("cpu", True, ("eager", "sdpa")),
    ("cuda:0", False, ("eager", "sdpa")),
    ("cuda:0", True, ("eager", "sdpa", "flash_attention_2")),
])
def test_flash_attention_is_compared_only_where_it_can_run(monkeypatch, device, installed, want):
    import transformers.utils

    monkeypatch.setattr(transformers.utils, "is_flash_attn_2_available", lambda *a, **k: installed)
    assert available_backends(torch.device(device)) == want


def test_the_full_doctor_runs_the_backend_check(ctx, monkeypatch):
    """``doctor`` (the full mode) runs it; the study's fast checks do not."""
    from vheads.doctor import FAST_CHECKS, doctor

    seen = []
    monkeypatch.setattr(_backends, "option_probs", lambda c, kinds=BACKEND_KINDS: seen.append(1) or torch.full((len(kinds), 4), 0.25))
    monkeypatch.setattr("vheads.doctor._doctor.check_baseline", lambda c: (_backends.Check("baseline", None, "stub", invariant=False), 1.0))
    monkeypatch.setattr("vheads.doctor._doctor.check_dtypes", lambda *a, **k: _backends.Check("bf16 vs fp32", None, "stub", invariant=False))
    rep = doctor(lm=ctx.lm)
    assert "attention backends" in [c.name for c in rep.checks] and seen
    assert "attention backends" not in FAST_CHECKS
