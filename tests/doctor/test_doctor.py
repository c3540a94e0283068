"""`vheads doctor` passes on healthy models and names the check on deliberately broken ones."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from tests.conftest import ALL_FAMILIES
from vheads.cli import app
from vheads.doctor import INVARIANTS, Context, run_checks
from vheads.engine import Engine

#: a representative handful by default (one grid with M-RoPE, tiles + thumbnail, a
#: bidirectional image block, a plain CLIP grid); every family with VHEADS_SLOW=1
FAST_FAMILIES = ("qwen2_5_vl", "internvl", "gemma3", "llava")

#: the published Qwen2-VL / Qwen2.5-VL chat template: a default system turn when the
#: messages have none (https://huggingface.co/Qwen/Qwen2-VL-7B-Instruct, chat_template.json)
QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _doctor(*args):
    res = CliRunner().invoke(app, ["doctor", *args])
    return res


def _failed_line(res) -> str:
    """The one error line on stderr (transformers' loading bars aside)."""
    lines = [l for l in res.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_doctor_passes_on_the_tiny_model():
    res = _doctor("--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["ok"] and rep["failed"] == []
    marks = {c["name"]: c["ok"] for c in rep["checks"]}
    # every invariant ran (none skipped on the tiny model, which ships a template of its own or
    # uses the adapter's pieces) and passed
    assert set(INVARIANTS) <= set(marks)
    assert all(marks[n] is not False for n in INVARIANTS)
    assert all(marks[n] is True for n in INVARIANTS if n != "template")
    prompts = next(c for c in rep["checks"] if c["name"] == "prompt")["details"]
    assert any("<|image_pad|>×" in line for line in prompts)  # the image block summarised
    assert {"bf16 vs fp32", "attention backends", "baseline", "speed"} <= set(marks)


def test_doctor_prints_one_screen_with_a_mark_per_check():
    res = _doctor()
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    for name in INVARIANTS:
        assert any(l.startswith(("✓ " + name, "– " + name)) for l in lines), (name, res.stdout)
    assert lines[-1].startswith("all invariants hold")  # ⚠ checks to read may follow on the line


@pytest.mark.parametrize("family", [pytest.param(f, marks=[] if f in FAST_FAMILIES else [pytest.mark.slow]) for f in ALL_FAMILIES])
def test_every_invariant_holds_on_the_tiny_random_families(loaded, family):
    lm = loaded[family]
    checks = run_checks(Context(lm, Engine(lm)))
    bad = [(c.name, c.summary) for c in checks if c.ok is False]
    assert not bad, bad


def test_doctor_exits_0_on_a_tiny_random_family_folder(tiny_random_dirs):
    res = _doctor("--model", str(tiny_random_dirs["qwen2_5_vl"]), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["ok"]


# ---- deliberately broken ---------------------------------------------------------------------
def test_a_region_map_shifted_by_one_token_fails_region_tokens(monkeypatch):
    from vheads.models import TokenLayout

    right = TokenLayout.region_tokens

    def shifted(self, box, min_cover=0.5):
        r = right(self, box, min_cover)
        r.positions = r.positions + 1
        return r

    monkeypatch.setattr(TokenLayout, "region_tokens", shifted)
    res = _doctor("--json")
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout)["failed"] == ["region tokens"]
    assert "region tokens" in _failed_line(res)


def test_an_engine_that_ignores_one_row_of_its_plan_fails_the_batched_checks(monkeypatch):
    from vheads.engine import Intervention

    right = Engine.plan

    def drops_last_row(self, batch, interventions=(), captures=()):
        if batch > 1:  # the last batch row's head-set is dropped: that row runs the plain model
            interventions = [Intervention(torch.cat([iv.heads[:-1], torch.zeros_like(iv.heads[-1:])]), iv.rows, iv.key_bias)
                             for iv in interventions]
        return right(self, batch, interventions, captures)

    monkeypatch.setattr(Engine, "plan", drops_last_row)
    res = _doctor("--json")
    assert res.exit_code == 1, res.output
    failed = json.loads(res.stdout)["failed"]
    assert "batched head-sets" in failed and "mask" in failed, failed
    assert "batched head-sets" in _failed_line(res)


@pytest.fixture
def qwen_with_template(tiny_random_dirs, tmp_path):
    """The tiny random Qwen2.5-VL folder whose tokenizer carries the published Qwen2-VL template."""
    import shutil

    from transformers import AutoTokenizer

    path = tmp_path / "qwen"
    shutil.copytree(tiny_random_dirs["qwen2_5_vl"], path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = QWEN2_VL_TEMPLATE
    tok.save_pretrained(path)
    return path


def test_the_template_check_compares_with_the_tokenizers_own_rendering(qwen_with_template):
    """The adapter renders the checkpoint's template (default system turn included): ✓."""
    from vheads.models import load_model

    lm = load_model(str(qwen_with_template))
    (check,) = run_checks(Context(lm, Engine(lm)), ["template"])
    assert check.ok is True, check.summary
    assert "You are a helpful assistant" in lm.adapter.build(Context(lm, Engine(lm)).items["grid-oracle"], lm.processor).text


def test_a_dropped_system_turn_fails_template(qwen_with_template, monkeypatch):
    """A prompt without the template's default system turn (the adapter's hand-written pieces,
    as vheads rendered Qwen before it read the checkpoint's template) fails ``template``."""
    from vheads.models import Adapter

    # the template in effect: none, so the adapter's hand-written pieces (no system turn)
    monkeypatch.setattr(Adapter, "chat_template", lambda self, processor: None, raising=False)
    res = _doctor("--model", str(qwen_with_template), "--json")
    assert res.exit_code == 1, res.output
    rep = json.loads(res.stdout)
    assert rep["failed"] == ["template"], rep["failed"]
    check = next(c for c in rep["checks"] if c["name"] == "template")
    assert "system" in " ".join(check["details"])
    assert "template" in _failed_line(res)


# ---- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize("args,needle", [
    (["--model", "/no/such/model/folder"], "/no/such/model/folder"),
    (["--device", "cuda:7"], "cuda:7"),
    (["--dtype", "float8"], "float8"),
    (["--config", "/no/such/study.toml"], "/no/such/study.toml"),
    (["--device-map", "everywhere"], "--device-map"),
    (["--quantize", "3bit"], "--quantize"),
    (["--quantize", "4bit"], "--quantize"),  # bitsandbytes runs on CUDA only; here the load is on cpu
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    res = _doctor(*args)
    assert res.exit_code == 2, res.output
    line = _failed_line(res)
    assert line.startswith("error:") and needle in line
    assert "Traceback" not in res.output


def test_device_map_and_quantize_reach_the_load(monkeypatch):
    """The flags load the model as the study keys ``device_map`` / ``quantization`` do."""
    import vheads.models

    seen = {}

    class Loaded(Exception):
        pass

    def load(*args, **kwargs):
        seen.update(kwargs)
        raise Loaded

    monkeypatch.setattr(vheads.models, "load_model", load)
    monkeypatch.setattr(vheads.models, "check_load_options", lambda *a: None)  # 4bit on this CPU-only machine
    with pytest.raises(Loaded):
        CliRunner().invoke(app, ["doctor", "--device-map", "cpu", "--quantize", "4bit"], catch_exceptions=False)
    assert seen["device_map"] == "cpu" and seen["quantization"] == "4bit"


# ---- published files -------------------------------------------------------------------------
@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n == "qwen2_5_vl_7b_instruct" else [pytest.mark.slow])
                                  for n in ("qwen2_5_vl_7b_instruct", "qwen3_vl_4b_instruct", "gemma_3_4b_it", "llava_1_5_7b_hf",
                                            "internvl3_1b_hf")])
def test_every_invariant_holds_on_the_real_shells(name, tmp_path):
    """Published tokenizer, chat template and configs around a shrunk random model
    (tests/fixtures/published): the template check runs against the published template, and
    the reference's logit scale is the config's (Gemma 3: query_pre_attn_scalar, not head_dim)."""
    from tests.fixtures.published.build_shells import build_shell
    from vheads.data import default_templates
    from vheads.models import load_model

    path = str(build_shell(name, tmp_path / name))
    lm = load_model(path)
    checks = run_checks(Context(lm, Engine(lm), default_templates(path)))
    assert [(c.name, c.summary) for c in checks if c.ok is not True] == []
