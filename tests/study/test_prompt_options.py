"""Question sets per model (issue 22, item 5) and the study's prompt options (system_prompt,
chat_template): defaults, --print-config, refusals before any work, the report's protocol."""

from __future__ import annotations

import tomllib
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from vheads._errors import MissingFileError, VheadsError
from vheads.cli import app
from vheads.data import DEFAULT_TEMPLATES, NATURAL_TEMPLATES, PLACEHOLDERS, default_templates, templates_name
from vheads.data._templates import check_template
from vheads.models import tiny_model_path
from vheads.study import StudyConfig, config_from_dict, default_toml, load_config

MCQ = ("cell", "object", "text")  # the templates of multiple-choice items (lettered options follow)


def test_tiny_keeps_its_word_level_questions_every_other_model_gets_natural_ones(tmp_path):
    assert default_templates("tiny") is DEFAULT_TEMPLATES
    assert default_templates(str(tiny_model_path())) is DEFAULT_TEMPLATES  # the shipped folder is the tiny model
    assert default_templates(str(tmp_path / "my-qwen")) is NATURAL_TEMPLATES
    assert default_templates("Qwen/Qwen2.5-VL-3B-Instruct") is NATURAL_TEMPLATES
    assert templates_name("tiny") == "tiny" and templates_name("Qwen/Qwen2.5-VL-3B-Instruct") == "natural"


@pytest.mark.parametrize("key", list(PLACEHOLDERS))
def test_natural_questions_are_valid_capitalised_and_instruct_the_answer(key):
    text = getattr(NATURAL_TEMPLATES, key)
    assert check_template(key, text) == text
    question, span = NATURAL_TEMPLATES.fill(key, 3 if PLACEHOLDERS[key] == "k" else "dog")
    assert question[0].isupper()
    assert "Answer with" in question and question.endswith(".")
    if key in MCQ:
        assert question.endswith("Answer with the option's letter.")
    if span is not None:
        assert question[span[0]:span[1]] in ("panel 3", "cell 3", "the dog")


def test_study_config_asks_the_models_set(tmp_path):
    real = str(tmp_path / "some-model")
    assert StudyConfig().question_templates == DEFAULT_TEMPLATES
    assert StudyConfig(model=real).question_templates == NATURAL_TEMPLATES
    # a template written out equal to the model's default is the default; the tiny wording on a
    # real model is a change
    same = config_from_dict({"model": "tiny", "templates": {"cell": DEFAULT_TEMPLATES.cell}})
    assert same.templates == {} and same.science_hash() == StudyConfig().science_hash()
    own = StudyConfig(model=real, templates={"cell": DEFAULT_TEMPLATES.cell})
    assert own.question_templates.cell == DEFAULT_TEMPLATES.cell
    assert own.question_templates.object == NATURAL_TEMPLATES.object


def test_print_config_shows_which_set_applies(tmp_path):
    r = CliRunner().invoke(app, ["study", "--print-config"])
    assert r.exit_code == 0, r.output
    tomllib.loads(r.output)
    assert 'question set "tiny"' in r.output
    for v in DEFAULT_TEMPLATES.to_dict().values():
        assert v in r.output
    r = CliRunner().invoke(app, ["study", "--print-config", "--model", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    tomllib.loads(r.output)
    assert 'question set "natural"' in r.output
    for v in NATURAL_TEMPLATES.to_dict().values():
        assert v in r.output
    assert default_toml("tiny") == CliRunner().invoke(app, ["study", "--print-config"]).output


def test_default_config_keeps_its_hash_with_the_prompt_keys():
    d = StudyConfig().to_dict()
    assert "system_prompt" not in d and "chat_template" not in d  # stored as before the keys existed
    assert StudyConfig(system_prompt="Be brief.").science_hash() != StudyConfig().science_hash()


def test_chat_template_key_is_checked_before_any_work(tmp_path):
    with pytest.raises(MissingFileError, match="nope.jinja"):
        load_config(chat_template=str(tmp_path / "nope.jinja"))
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% if %}")
    with pytest.raises(VheadsError, match=r"bad\.jinja.*not a valid Jinja template"):
        load_config(chat_template=str(bad))


def _no_image_template(tmp_path):
    f = tmp_path / "noimage.jinja"
    f.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{% for c in m.content %}{% if c.type == 'text' %}"
                 "{{ c.text }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}<|im_start|>assistant\n")
    return f


@pytest.mark.parametrize("case", ["syntax", "no-image"])
def test_study_refuses_a_bad_chat_template_with_one_line_before_the_run_folder(tmp_path, case):
    if case == "syntax":
        f = tmp_path / "broken.jinja"
        f.write_text("{% for m in messages %}")
        needle = "not a valid Jinja template"
    else:
        f = _no_image_template(tmp_path)
        needle = "image placeholder"
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["study", "--chat-template", str(f), "--out", str(out), "--quiet"])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and needle in lines[0], r.output
    assert not out.exists()


def test_protocol_lists_the_rendered_prompt_of_each_kind():
    from vheads.report._protocol import _prompt_checks

    run = SimpleNamespace(meta={"prompts": {"grid-oracle": "<|im_start|>user\n<|image_pad|>×4 what is in cell 1 ?"}},
                          config={"system_prompt": "Be brief."})
    checks = _prompt_checks(run)
    assert checks[0].item == "Rendered prompts" and '"Be brief."' in checks[0].value
    assert checks[1].item == "Rendered prompt: grid-oracle"
    assert checks[1].value == '"<|im_start|>user\\n<|image_pad|>×4 what is in cell 1 ?"'
    old = _prompt_checks(SimpleNamespace(meta={}, config={}))
    assert "not recorded" in old[0].value


def test_models_entries_take_their_own_prompt_options():
    from vheads.study._config import model_config, model_entries

    cfg = config_from_dict({"system_prompt": "shown", "models": [{"name": "a", "model": "tiny"},
                                                                {"name": "b", "model": "tiny", "system_prompt": "named"}]})
    a, b = (model_config(cfg, e) for e in model_entries(cfg))
    assert (a.system_prompt, b.system_prompt) == ("shown", "named")
    assert a.chat_template == b.chat_template == ""


def test_tiny_system_prompt_words_must_be_in_its_vocabulary():
    with pytest.raises(VheadsError, match="system_prompt.*'Please'.*word-level"):
        load_config(system_prompt="Please answer")
    assert load_config(system_prompt="which object is shown ?").system_prompt == "which object is shown ?"
