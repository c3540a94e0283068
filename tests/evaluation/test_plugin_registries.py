"""A test and an ablation registered at runtime by the public decorators are validated and dispatched."""

from __future__ import annotations

import pytest

from vheads._errors import VheadsError
from vheads.evaluation import (
    ABLATION_REGISTRY, TEST_REGISTRY, check_ablation, check_request, register_ablation, register_test, run_test,
)


@pytest.fixture
def plugin_test():
    seen = {}

    def run(engine, test, sets, headsets, **kw):
        seen.update(test=test, sets=sets, ablation=kw["ablation"].name, beta=kw["beta"])
        return "outcomes"

    register_test("plug-test", ("text",), run, head_output=True)
    yield seen
    TEST_REGISTRY.unregister("plug-test")


@pytest.fixture
def plugin_ablation():
    register_ablation("plug-zero")
    yield
    ABLATION_REGISTRY.unregister("plug-zero")


def test_a_registered_test_is_accepted_and_run_through_its_entry(plugin_test):
    check_request(["plug-test"], "layer-matched:2", 1e4, "all")
    out = run_test(None, "plug-test", {"text": ["item"]}, [], beta=2.0, rows="all", seed=0, batch_size=1)
    assert out == "outcomes"
    assert plugin_test == {"test": "plug-test", "sets": {"text": ["item"]}, "ablation": "attention", "beta": 2.0}


def test_a_registered_ablation_is_accepted_by_validation_and_passed_to_the_test(plugin_test, plugin_ablation):
    assert check_ablation("plug-zero", ["ncs", "plug-test"]).head_output
    check_request(["ncs"], "layer-matched:2", 1e4, "all", ablation="plug-zero")
    run_test(None, "plug-test", {"text": []}, [], beta=1.0, rows="all", seed=0, batch_size=1, ablation="plug-zero")
    assert plugin_test["ablation"] == "plug-zero"
    with pytest.raises(VheadsError, match="the 'plug-zero' ablation replaces head outputs, which tests cers"):
        check_ablation("plug-zero", ["cers"])


def test_an_unknown_test_or_ablation_says_the_closest_name():
    with pytest.raises(VheadsError, match=r"unknown test 'ncs-grd' \(did you mean 'ncs-grid'\?\)"):
        check_request(["ncs-grd"], "layer-matched:2", 1e4, "all")
    with pytest.raises(VheadsError, match=r"--ablation: unknown ablation 'resampel' \(did you mean 'resample'\?\)"):
        check_ablation("resampel")


def test_a_registered_ablation_is_accepted_by_a_study_config(plugin_ablation):
    from vheads.study._ablation import validate_ablation
    from types import SimpleNamespace

    bad = []
    validate_ablation(SimpleNamespace(ablation=["attention", "plug-zero"], tests=["ncs"], row_groups=["all"]),
                      lambda k, m: bad.append((k, m)))
    assert bad == []
    validate_ablation(SimpleNamespace(ablation=["atention"], tests=["ncs"], row_groups=["all"]), lambda k, m: bad.append(m))
    assert bad[0] == "unknown ablation 'atention' (did you mean 'attention'?); choose from attention, zero, mean, resample, plug-zero"
