"""The one registry idiom (vheads._registry): names in order, did-you-mean, duplicates, plugins."""

from __future__ import annotations

import types
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
