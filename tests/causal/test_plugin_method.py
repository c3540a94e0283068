"""A causal method registered at runtime by the public decorator is accepted and dispatched."""

from __future__ import annotations

import pytest

from vheads._errors import VheadsError
from vheads.causal import METHOD_REGISTRY, causal_maps_by_method, check_methods, register_method


def test_a_registered_method_is_accepted_and_its_maps_and_fits_returned():
    seen = {}

    @register_method("plug-method")
    def run(engine, sets, tests, **kw):
        seen.update(tests=tests, rows=kw["rows"], ablation=kw["ablation"])
        return {"ncs-all:plug-method": "map"}, {"fit": 1}

    try:
        assert check_methods(["plug-method", "plug-method"]) == ["plug-method"]
        maps, fits = causal_maps_by_method(None, {}, methods=["plug-method"], tests=("ncs",), rows="last")
        assert maps == {"ncs-all:plug-method": "map"} and fits == {"fit": 1}
        assert seen == {"tests": ("ncs",), "rows": "last", "ablation": "attention"}
    finally:
        METHOD_REGISTRY.unregister("plug-method")


def test_an_unknown_method_says_the_closest_name():
    with pytest.raises(VheadsError, match=r"^--method 'regresion' \(did you mean 'regression'\?\): choose from exact, atp, regression$"):
        check_methods(["regresion"])
