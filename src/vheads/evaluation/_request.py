"""What an evaluation request may name — tests, their item sets, metrics — and its check.

Torch-free (numpy and the data package only), so ``vheads evaluate --test bogus`` or a bad
study config is refused at once, before torch loads (``tests/test_cli_startup.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from vheads._seeds import derived_seed
from vheads._errors import MAX_ITEMS, MAX_SEED, VheadsError, check_range
from vheads._registry import Registry
from vheads.engine import ROW_GROUPS  # torch-free: the engine package loads its names lazily
from vheads.evaluation._controls import parse_control_spec

#: the metrics of an outcome (DESIGN.md "Metrics of an outcome"); the first is the seed's
METRICS = ("p4", "logprob", "logit-diff")



@dataclass(frozen=True)
class EvaluationTest:
    """One test (DESIGN.md "Metric definitions"): the item kinds it runs on (``sets``) and
    whether it takes a head-output ablation (``head_output``: it hides heads from keys, so
    zeroing or replacing their outputs is defined too), and its run function (``run``)."""

    name: str
    sets: tuple[str, ...]
    head_output: bool = False
    #: ``run(engine, test, sets, headsets, **request) -> Outcomes`` (:func:`vheads.evaluation.run_test`'s
    #: arguments by keyword, ``ablation`` as its :class:`Ablation`), or ``"module:function"`` imported on first use
    run: Callable | str | None = None


#: every test, in the order the CLI lists them; plugins add theirs with :func:`register_test`
TEST_REGISTRY: Registry[EvaluationTest] = Registry("test", group="vheads.tests")


def register_test(name: str, sets: tuple[str, ...], run: Callable | str, head_output: bool = False) -> EvaluationTest:
    """Register the test ``name``: its item kinds, its run function, whether it takes a head-output ablation."""
    return TEST_REGISTRY.register(EvaluationTest(name, tuple(sets), head_output, run))


_RUN = "vheads.evaluation._run:run_"
register_test("cers", ("grid-neutral",), _RUN + "cers")
register_test("cers-sym", ("grid-neutral",), _RUN + "cers")
register_test("ncs", ("class-matched", "class-mismatched"), _RUN + "ncs", head_output=True)
register_test("ncs-grid", ("grid-oracle",), _RUN + "ncs_grid")
register_test("text", ("text",), _RUN + "text", head_output=True)
# the referred cell's box is the ground truth (vheads.evaluation._grounding); a real
# corpus's referring items (vheads.data.refcoco) go straight to ``grounding``
register_test("grounding", ("grid-oracle",), _RUN + "grounding")

#: the item kinds each built-in test runs on (a plugin test: :data:`TEST_REGISTRY`)
TEST_SETS: dict[str, tuple[str, ...]] = {t.name: t.sets for t in TEST_REGISTRY.entries()}
TESTS = tuple(TEST_SETS)
#: the baseline audit's sets (DESIGN.md "Baseline audit"); the leak set is derived from "matched"
AUDIT_SETS: dict[str, str] = {"oracle": "grid-oracle", "floor": "grid-blank", "matched": "class-matched", "mismatched": "class-mismatched"}


def item_sets(kinds: Iterable[str], n: int, seed_of: Callable[[str], int], source=None, templates=None) -> dict[str, list]:
    """``{kind: n items}``, each kind generated from ``seed_of(kind)``: synthetic (asked with
    ``templates``, a :class:`vheads.data.Templates`; default wording if ``None``), or built
    from real photos when ``source`` is a :class:`vheads.data.builders.RealItems` (which
    carries its own templates)."""
    from vheads.data import DEFAULT_TEMPLATES
    from vheads.data.synthetic import kind_items

    if source is not None:
        return {kind: source.items(kind, n, seed_of(kind)) for kind in kinds}
    return {kind: kind_items(kind, n, seed_of(kind), templates=templates or DEFAULT_TEMPLATES) for kind in kinds}


def reference_sets(kinds: Iterable[str], n: int, seed: int, source=None, templates=None) -> dict[str, list]:
    """The ``mean`` ablation's reference items: ``n`` of each kind, from their own seed
    (derived from ``seed`` and the kind), so they are never the evaluation items."""
    return item_sets(kinds, n, lambda kind: derived_seed(seed, "ablation-reference", kind), source, templates)


def audit_sets(n: int, seed_of: Callable[[str], int], source=None, templates=None) -> dict[str, list]:
    """The audit's evaluation sets by audit name (oracle, floor, matched, mismatched)."""
    items = item_sets(AUDIT_SETS.values(), n, seed_of, source, templates)
    return {name: items[kind] for name, kind in AUDIT_SETS.items()}


@dataclass(frozen=True)
class Ablation:
    """One ablation type (DESIGN.md "Ablation types"): what "hide S" means.

    ``head_output``: it replaces S's head outputs (only the tests with
    :attr:`EvaluationTest.head_output` take it); ``False``: S's attention logits are masked (every
    test). ``replacement``: what replaces the outputs, which the runs branch on — ``""``
    (zero, or nothing for the attention mask), ``"mean"`` (means over a stored reference set
    of items), ``"donor"`` (another item's own outputs, seeded pairing)."""

    name: str
    head_output: bool = True
    replacement: str = ""


#: every ablation type; plugins add theirs with :func:`register_ablation`
ABLATION_REGISTRY: Registry[Ablation] = Registry("ablation", group="vheads.ablations")


def register_ablation(name: str, head_output: bool = True, replacement: str = "") -> Ablation:
    """Register the ablation type ``name`` (see :class:`Ablation`)."""
    if replacement not in ("", "mean", "donor"):
        raise VheadsError(f"ablation {name!r}: replacement {replacement!r} is none of '', 'mean', 'donor'")
    return ABLATION_REGISTRY.register(Ablation(name, head_output, replacement))


register_ablation("attention", head_output=False)
register_ablation("zero")
register_ablation("mean", replacement="mean")
register_ablation("resample", replacement="donor")

#: the built-in ablation types (a plugin's: :data:`ABLATION_REGISTRY`)
ABLATIONS = ABLATION_REGISTRY.names()
#: the built-in tests that take a head-output ablation (the others refuse it)
HEAD_OUTPUT_TESTS = tuple(t.name for t in TEST_REGISTRY.entries() if t.head_output)


def check_ablation(ablation: str, tests=(), what: str = "--ablation") -> Ablation:
    """The entry of ``ablation``; an unknown ablation (with a did-you-mean), or a head-output
    ablation with a test that has none, is a :class:`VheadsError` naming ``what``."""
    entry = ABLATION_REGISTRY.get(ablation, what)
    if entry.head_output:
        bad = [t for t in tests if not (t in TEST_REGISTRY and TEST_REGISTRY.get(t).head_output)]
        if bad:
            takes = [t.name for t in TEST_REGISTRY.entries() if t.head_output]
            raise VheadsError(f"{what}: the {ablation!r} ablation replaces head outputs, which tests {', '.join(bad)} do not "
                              f"define (NCS_grid contrasts two regions, CERS steers); run them with 'attention', or "
                              f"{ablation!r} with {', '.join(takes)} only")
    return entry


def check_sizes(n: int, batch_size: int, seed: int) -> None:
    """``n`` items per set 2 (a t-interval needs two) to ``MAX_ITEMS``, ``batch_size`` at
    least 1 and ``seed`` 0 to ``MAX_SEED``, each a :class:`VheadsError` naming its flag."""
    if n < 2:
        raise VheadsError(f"--n must be at least 2 items per evaluation set (a 95% interval needs two), got {n}")
    check_range("--n", n, 2, MAX_ITEMS)
    check_range("--seed", seed, 0, MAX_SEED)
    if batch_size < 1:
        raise VheadsError(f"--batch-size must be at least 1 head-set per forward, got {batch_size}")


def check_request(tests: Iterable[str], controls: str, beta: float, rows: str, n: int = 2, batch_size: int = 1,
                  steer_rows: str = "all", seed: int = 0, ablation: str = "attention", reference_n: int | None = None) -> list:
    """Validate an evaluation request before any work; returns the parsed control requests.

    ``n`` (items per set) must be 2 (a t-interval needs two items) to ``MAX_ITEMS``,
    ``batch_size`` at least 1, ``beta`` above 0 and ``seed`` 0 to ``MAX_SEED``; ``ablation``
    one of :data:`ABLATIONS` that every test takes; ``reference_n`` (the mean ablation's
    reference items per kind) 1 to ``MAX_ITEMS``."""
    check_sizes(n, batch_size, seed)
    for t in tests:
        TEST_REGISTRY.get(t)  # unknown: "unknown test 'x' (did you mean ...); choose from ..."
    if check_ablation(ablation, tests).replacement == "mean" and reference_n is not None:
        if reference_n < 1:
            raise VheadsError(f"--reference-n: the mean ablation's reference set is empty ({reference_n} items); it needs at least 1")
        check_range("--reference-n", reference_n, 1, MAX_ITEMS)
    for name, group in (("rows", rows), ("steer_rows", steer_rows)):
        if group not in ROW_GROUPS:
            raise ValueError(f"unknown row group {group!r} ({name}); choose from {', '.join(ROW_GROUPS)}")
    if not (np.isfinite(beta) and beta > 0):
        raise VheadsError(f"--beta must be a finite number above 0 (steering adds +beta / -beta to logits), got {beta}")
    return parse_control_spec(controls)
