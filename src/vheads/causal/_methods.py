"""The causal map by any method — ``exact``, ``atp``, ``regression`` — and how the methods agree.

:func:`causal_maps_by_method` takes the maps of every requested method on the same items
(the exact one-head scan, the AtP estimate, head attribution by regression), keyed like
the store (``ncs-all``, ``ncs-all:atp``, ``ncs-all:regression``); :func:`agreement`
compares every pair of methods' head maps of one test with
:func:`vheads.causal.compare_maps` (Spearman ρ and its p over heads, top-k recall).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from vheads._errors import VheadsError
from vheads._registry import Registry, did_you_mean
from vheads.causal._map import DEFAULT_ABLATION, CausalMap

@dataclass(frozen=True)
class CausalMethod:
    """One way to take a causal map: ``run(engine, sets, tests, **request) -> (maps, fits)``,
    the request by keyword as :func:`causal_maps_by_method` takes it (``rows``, ``ablation``,
    ``layers``, ``seed``, ``batch_size``, ``design``, ``progress``, ``memo``); ``maps`` keyed
    like the store, ``fits`` the regression's ``{key: HeadAttribution}`` (``{}`` for others)."""

    name: str
    run: Callable


#: every causal method, in the order maps are compared; plugins add theirs with :func:`register_method`
METHOD_REGISTRY: Registry[CausalMethod] = Registry("causal method", group="vheads.causal_methods")


def register_method(name: str) -> Callable[[Callable], Callable]:
    """Decorator: register ``run(engine, sets, tests, **request) -> (maps, fits)`` as the causal method ``name``."""
    return METHOD_REGISTRY.decorator(lambda fn, name: CausalMethod(name, fn), name=name)


@register_method("exact")
def _exact(engine, sets, tests, **kw):
    from vheads.causal._map import exact_causal_map

    return exact_causal_map(engine, sets, tests, rows=kw["rows"], ablation=kw["ablation"], layers=kw["layers"],
                            seed=kw["seed"], batch_size=kw["batch_size"], progress=kw["progress"], memo=kw["memo"]), {}


@register_method("atp")
def _atp(engine, sets, tests, **kw):
    from vheads.causal._atp_map import atp_causal_maps

    return atp_causal_maps(engine, sets, tests, kw["ablation"], kw["rows"], batch_size=min(8, kw["batch_size"])), {}


@register_method("regression")
def _regression(engine, sets, tests, **kw):
    from vheads.causal._regression import head_attribution

    fits = head_attribution(engine, sets, tests, kw["design"], rows=kw["rows"], ablation=kw["ablation"], seed=kw["seed"],
                            batch_size=kw["batch_size"], progress=kw["progress"], memo=kw["memo"])
    return {k: a.causal_map() for k, a in fits.items()}, fits


#: the built-in causal methods (a plugin's: :data:`METHOD_REGISTRY`)
METHODS = METHOD_REGISTRY.names()


def check_methods(methods) -> list[str]:
    """The requested methods, each a registered one, in order, none twice (one line otherwise)."""
    methods = list(methods)
    names = METHOD_REGISTRY.names()
    for m in methods:
        if m not in names:
            raise VheadsError(f"--method {m!r}{did_you_mean(m, names)}: choose from {', '.join(names)}")
    if not methods:
        raise VheadsError(f"--method: name at least one of {', '.join(names)}")
    return list(dict.fromkeys(methods))


def causal_maps_by_method(engine, sets: dict, methods=("exact",), tests=("ncs",), rows: str = "all",
                          ablation: str = DEFAULT_ABLATION, layers: bool = True, seed: int = 0, batch_size: int = 128,
                          design=None, progress: bool = False, memo=None) -> tuple[dict[str, CausalMap], dict]:
    """The maps of every method (``design``: the regression's, default :func:`vheads.causal.draw_design`)
    and the regression's fits ``{key: HeadAttribution}`` (empty without ``regression``).
    AtP covers NCS and the text arm under the attention and zero ablations; elsewhere it is left out."""
    maps: dict[str, CausalMap] = {}
    fits: dict = {}
    for method in check_methods(methods):
        got, got_fits = METHOD_REGISTRY.get(method).run(engine, sets, tests, rows=rows, ablation=ablation, layers=layers,
                                                        seed=seed, batch_size=batch_size, design=design, progress=progress,
                                                        memo=memo)
        maps |= got
        fits |= got_fits
    return maps, fits


def agreement(maps: dict[str, CausalMap], k: int, metric: str = "p4") -> list[dict]:
    """For every test and every pair of methods with a map of it: Spearman ρ, its p and the
    top-k recall of their head maps (:func:`vheads.causal.compare_maps`; AtP maps are in p4)."""
    from vheads.causal._compare import compare_maps

    by_test: dict[tuple[str, str], dict[str, CausalMap]] = {}
    for m in maps.values():
        by_test.setdefault((m.test, m.ablation), {})[m.method] = m
    out = []
    for (test, ablation), got in by_test.items():
        names = [x for x in METHOD_REGISTRY.names() if x in got]
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                ma, mb = (got[x].head_map(metric if x != "atp" else "p4") for x in (a, b))
                c = compare_maps(ma, mb, k, n_show=0)
                out.append({"test": test, "ablation": ablation, "a": a, "b": b, "k": k, "spearman": c["spearman"],
                            "spearman_p": c["spearman_p"], "top_k_recall": c["top_k_recall"]})
    return out
