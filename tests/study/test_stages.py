"""Study stages as registered parts: every config key written once (with its stage), the
printed default config and the config's fields agree, and the registry refuses what it must."""

import subprocess
import sys
import tomllib
from dataclasses import MISSING, fields

import pytest

from vheads.study import RunConfig, StudyConfig
from vheads.study._stage import Key, Stage, get_stage, register_stage, registered_stages


def field_default(f):
    return f.default_factory() if f.default is MISSING else f.default


def printed_config() -> str:
    out = subprocess.run([sys.executable, "-m", "vheads", "study", "--print-config"], capture_output=True, text=True, check=True)
    return out.stdout


def test_print_config_holds_every_field_once_with_its_default():
    text = printed_config()
    printed = tomllib.loads(text)
    lines = text.splitlines()
    for f in fields(StudyConfig):
        # a field is printed once: as `name = ...` or as a table `[name]`; an empty list (models,
        # scope) as a commented example that starts with it
        own = [ln for ln in lines if ln.startswith((f"{f.name} = ", f"[{f.name}]"))]
        example = [ln for ln in lines if ln.startswith((f"# {f.name} = ", f"# [[{f.name}]]"))]
        assert len(own) == 1 or (not own and example and field_default(f) == []), f"{f.name}: {own}"
        if f.name == "run":
            continue
        if f.name in printed:
            assert printed[f.name] == field_default(f), f.name
        else:  # commented out: an empty default
            assert field_default(f) in ([], {}), f.name
    assert set(printed) <= {f.name for f in fields(StudyConfig)}
    assert printed["run"] == {f.name: field_default(f) for f in fields(RunConfig)}


def test_print_config_reads_back_as_the_default_config():
    from vheads.study import config_from_dict

    assert config_from_dict(tomllib.loads(printed_config())) == StudyConfig()


def test_later_keys_keep_the_hash_of_runs_made_before_them():
    """The keys added after the first release and the value their runs had (written out here,
    not read from the stages): a stored run of 0.1 keeps its hash."""
    from vheads.study._config import LATER_KEY_DEFAULTS

    assert LATER_KEY_DEFAULTS == {
        "eval_source": "synthetic", "eval_classes": "", "eval_exclude": "", "eval_groups": "", "eval_cell": 224,
        "eval_resize": "crop", "ood_tasks": [], "n_ood": 80, "ood_controls": 1, "device_map": "", "quantization": "",
        "trust_remote_code": False, "templates": {}, "system_prompt": "", "chat_template": "",
        "scores": ["gaze", "localization", "vrh", "sparsemm"], "score_on": "first", "ablation": ["attention", "zero"],
        "causal_tests": ["ncs"], "causal_subsets": 0, "causal_method": "exact", "controls_h": 0, "controls_batch": 32,
        "scope": [], "items": {}, "k_sweep_tests": ["cers", "ncs"], "test_controls": {}}


def test_the_runner_runs_the_stages_in_the_study_order():
    names = [s.name for s in registered_stages()]
    assert names == ["core", "doctor", "discovery", "attention", "overlap", "stability", "causal map", "controls", "evaluation",
                     "necessity by kind", "audit", "ood", "report"]


def test_each_unit_kind_is_computed_by_one_stage():
    from vheads.study._stage import unit_computers

    assert set(unit_computers()) == {"doctor", "discovery", "scores", "image-mass", "causal-map", "eval", "audit", "ood-audit",
                                     "ood-eval"}


def test_an_unknown_stage_is_refused_with_a_hint():
    with pytest.raises(ValueError, match="did you mean 'overlap'"):
        get_stage("overlapp")


def test_a_key_two_stages_own_is_refused():
    with pytest.raises(ValueError, match="'seed' is owned by stages 'core' and 'mine'"):
        register_stage(Stage("mine", 99, keys=(Key("seed", 1),)))
    assert "mine" not in {s.name for s in registered_stages()}
