"""The one registry idiom (vheads._registry): names in order, did-you-mean, duplicates, plugins."""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from vheads._errors import VheadsError
from vheads._registry import Registry


@dataclass(frozen=True)
class Part:
    name: str
    size: int = 0


def test_entries_keep_registration_order_and_names():
    reg = Registry("part", group="")
    for n in ("b", "a", "c"):
        reg.register(Part(n))
    assert reg.names() == ("b", "a", "c")
    assert [p.name for p in reg.entries()] == ["b", "a", "c"]
    assert "a" in reg and "z" not in reg and len(reg) == 3


def test_unknown_name_says_the_closest_name_and_every_name():
    reg = Registry("part", group="")
    reg.register(Part("resample"))
    reg.register(Part("zero"))
    with pytest.raises(VheadsError, match=r"^--x: unknown part 'resampel' \(did you mean 'resample'\?\); choose from resample, zero$"):
        reg.get("resampel", what="--x")
    with pytest.raises(VheadsError, match=r"^unknown part 'qqq'; choose from resample, zero$"):
        reg.get("qqq")


def test_a_different_entry_under_a_taken_name_is_refused_the_same_is_a_no_op():
    reg = Registry("part", group="")
    reg.register(Part("a", 1))
    reg.register(Part("a", 1))  # a module imported twice
    with pytest.raises(VheadsError, match="part 'a' is registered twice"):
        reg.register(Part("a", 2))
    assert reg.get("a").size == 1


def test_decorator_registers_what_build_makes_and_returns_the_function():
    reg = Registry("part", group="")

    @reg.decorator(lambda fn, size: Part(fn.__name__, size), size=3)
    def widget():
        return 1

    assert widget() == 1 and reg.get("widget") == Part("widget", 3)


class _EntryPoint:
    def __init__(self, name, value):
        self.name, self.value = name, value


def _fake_entry_points(monkeypatch, wanted, eps):
    import importlib.metadata as md

    monkeypatch.setattr(md, "entry_points", lambda group=None: eps if group == wanted else [])


def test_plugins_of_the_entry_point_group_load_on_first_look_up(monkeypatch):
    reg = Registry("gadget")
    assert reg.group == "vheads.gadgets"
    loaded = []

    def fake_import(name):  # the plugin module registers its entry when imported
        loaded.append(name)
        reg.register(Part("plugged"))
        return types.ModuleType(name)

    import vheads._registry as registry_module

    monkeypatch.setattr(registry_module.importlib, "import_module", fake_import)
    _fake_entry_points(monkeypatch, "vheads.gadgets", [_EntryPoint("mine", "my_package.my_gadget:anything")])
    assert reg.names() == ("plugged",)
    assert loaded == ["my_package.my_gadget"]
    reg.names()
    assert loaded == ["my_package.my_gadget"]  # once


def test_a_plugin_that_fails_to_import_is_left_out_with_a_warning(monkeypatch):
    reg = Registry("gadget")
    reg.register(Part("built-in"))
    _fake_entry_points(monkeypatch, "vheads.gadgets", [_EntryPoint("broken", "no_such_module_of_vheads_tests")])
    with pytest.warns(UserWarning, match="gadget plugin 'broken'"):
        assert reg.names() == ("built-in",)


def test_study_stages_and_causal_methods_live_in_registries():
    from vheads.causal import METHOD_REGISTRY
    from vheads.study._stage import STAGE_REGISTRY, get_stage, registered_stages

    assert [s.name for s in registered_stages()] == sorted(STAGE_REGISTRY.names(), key=lambda n: (get_stage(n).order, n))
    assert METHOD_REGISTRY.names() == ("exact", "atp", "regression")
    with pytest.raises(VheadsError, match=r"unknown study stage 'evaluaton' \(did you mean 'evaluation'\?\); stages: "):
        get_stage("evaluaton")


def test_a_strict_registry_raises_when_a_plugin_fails_to_import(monkeypatch):
    reg = Registry("gadget", strict=True)
    _fake_entry_points(monkeypatch, "vheads.gadgets", [_EntryPoint("broken", "no_such_module_of_vheads_tests")])
    with pytest.raises(ModuleNotFoundError):
        reg.names()


# ---- the four kinds moved onto the registry: sections, scores, controls, model families ----------


@contextmanager
def _plugin(monkeypatch, tmp_path, registry, module: str, source: str):
    """Within: a plugin module ``module`` (written to ``tmp_path``) named by a fake entry point
    of ``registry``'s group, the registry's plugins not yet read; after: its entry ``plugged`` removed."""
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    _fake_entry_points(monkeypatch, registry.group, [_EntryPoint("mine", module)])
    try:
        yield
    finally:
        registry.unregister("plugged")


def test_report_sections_live_in_a_registry(monkeypatch, tmp_path):
    from vheads.report import SECTION_REGISTRY, registered_sections, section

    assert SECTION_REGISTRY.group == "vheads.sections"
    assert "protocol" in {s.id for s in registered_sections()}
    with pytest.raises(VheadsError, match="^report section 'protocol' is registered twice"):
        section("protocol", "again", "", order=1)(lambda run: [])
    with pytest.raises(VheadsError, match=r"^unknown report section 'protocl' \(did you mean 'protocol'\?\); choose from "):
        SECTION_REGISTRY.get("protocl")
    with _plugin(monkeypatch, tmp_path, SECTION_REGISTRY, "vh_reg_section",
                 "from vheads.report import section\n"
                 "@section('plugged', 'A plugged section', 'Read it.', order=1e6)\n"
                 "def plugged(run):\n    return ['a paragraph']\n"):
        assert registered_sections()[-1].id == "plugged"


def test_score_presets_live_in_a_registry(monkeypatch, tmp_path):
    from vheads.discovery import SCORE_REGISTRY, SCORES, ScorePoint, parse_score, score

    assert SCORE_REGISTRY.group == "vheads.scores" and SCORES is SCORE_REGISTRY.by_name
    assert SCORES["vrh"]() == parse_score("vrh")
    with pytest.raises(VheadsError, match="^score 'gaze' is registered twice"):
        score("gaze")(lambda: ScorePoint())
    with pytest.raises(VheadsError, match=r"^unknown score 'vhr' \(did you mean 'vrh'\?\); choose from gaze, .*, "
                                          r"or write a point like 'rows=out,keys=hit'$"):
        parse_score("vhr")
    with _plugin(monkeypatch, tmp_path, SCORE_REGISTRY, "vh_reg_score",
                 "from vheads.discovery import ScorePoint, score\n"
                 "@score('plugged')\n"
                 "def plugged():\n    '''A plugin's point.'''\n    return ScorePoint(rows='out', keys='hit')\n"):
        assert parse_score("plugged") == ScorePoint(rows="out", keys="hit")


def test_controls_live_in_a_registry(monkeypatch, tmp_path):
    from vheads.evaluation import CONTROL_REGISTRY, CONTROLS, Control, ControlRequest, get_control, parse_control_spec
    from vheads.evaluation import register_control

    assert CONTROL_REGISTRY.group == "vheads.controls" and CONTROLS is CONTROL_REGISTRY.by_name
    assert get_control("layer+attention-matched") is CONTROLS["attention-matched"]  # an alias
    with pytest.raises(VheadsError, match="^control 'layer-matched' is registered twice"):
        register_control(Control("layer-matched"))
    with pytest.raises(VheadsError, match=r"^unknown control 'any-layr' \(did you mean 'any-layer'\?\); "
                                          r"choose from layer-matched, any-layer, .*random-n$"):
        parse_control_spec("any-layr:5")
    with _plugin(monkeypatch, tmp_path, CONTROL_REGISTRY, "vh_reg_control",
                 "from vheads.evaluation import Control, register_control\n"
                 "register_control(Control('plugged', lambda S, rng, borrowed, **_: iter(())))\n"):
        assert parse_control_spec("plugged:5") == [ControlRequest("plugged", 5)]


def test_model_families_live_in_a_registry(monkeypatch, tmp_path):
    from vheads.models import ADAPTER_REGISTRY, ADAPTERS, Adapter, adapter_for, register_adapter

    assert ADAPTER_REGISTRY.group == "vheads.adapters" and ADAPTERS is ADAPTER_REGISTRY.by_name
    assert type(ADAPTERS["llava"]()) is type(adapter_for("llava"))

    class Again(Adapter):
        family, model_types, image_token = "again", ("llava",), "<image>"

    with pytest.raises(VheadsError, match="^model type 'llava' is registered twice"):
        register_adapter(Again)
    # a model type comes from a checkpoint's config, never typed: every supported one is named
    with pytest.raises(VheadsError, match=r"^model type 'fuyu' is not a supported VLM family; supported: "
                                          r"gemma3, .*llava, .*qwen3_vl, .* \(see `vheads models`\)$"):
        adapter_for("fuyu")
    with _plugin(monkeypatch, tmp_path, ADAPTER_REGISTRY, "vh_reg_adapter",
                 "from vheads.models import Adapter, register_adapter\n"
                 "@register_adapter\n"
                 "class Plugged(Adapter):\n    family, model_types, image_token = 'plugged', ('plugged_vlm',), '<image>'\n"):
        assert type(adapter_for("plugged_vlm")).__name__ == "Plugged"
