"""The ids vheads stores (:mod:`vheads._ids`): builders and parsers are inverse, and no other
module builds or parses an id by hand (issue 42: 29 f-strings in the study, regexes in the report)."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from vheads._ids import (
    ablation_test_id, beta_test_id, control_label, headset_id, parse_ablation_test_id, parse_headset_id, parse_test_id,
    random_n_count, sweep_test_id, without_ablation,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "vheads"
ROLES = st.sampled_from(["S", "layer-matched", "any-layer", "attention-matched", "random-n(n=200)", "sinks",
                         "shared/layer-matched", "only:cm-ord-last/layer-matched"])


@given(ROLES, st.none() | st.integers(0, 10**6), st.none() | st.integers(1, 10**4))
def test_a_headset_id_parses_back_to_its_parts(role, draw, k):
    hid = headset_id(role, draw, k)
    p = parse_headset_id(hid)
    assert (p.role, p.draw, p.k) == (role, draw, k)
    assert p.label == headset_id(role, k=k) and p.is_s == (role == "S")


def test_headset_ids_as_the_store_holds_them():
    assert headset_id("layer-matched", 17) == "layer-matched#17"
    assert headset_id("S", k=8) == "S@k=8" and headset_id("layer-matched", 3, 8) == "layer-matched@k=8#3"


@given(st.sampled_from(["all", "image", "question", "last"]), st.sampled_from(["zero", "mean", "resample"]))
def test_an_ablation_test_id_parses_back(group, ablation):
    t = ablation_test_id(group, ablation)
    assert t == f"ncs-{group}@ablation={ablation}"
    assert parse_ablation_test_id(t) == (group, ablation) and without_ablation(t) == (f"ncs-{group}", ablation)
    assert parse_ablation_test_id(f"ncs-{group}") is None and without_ablation("cers") == ("cers", None)


@given(st.floats(1e-3, 1e6, allow_nan=False))
def test_a_swept_test_id_parses_back_to_its_value(beta):
    t = beta_test_id(beta)
    p = parse_test_id(t)
    assert (p.base, p.param) == ("cers", "beta") and p.value == float(format(beta, "g"))
    assert parse_test_id(sweep_test_id("ncs-all", "k", 8)).value == 8.0
    assert parse_test_id("ncs-all@ablation=zero").param is None  # an ablation is no swept value


def test_control_specs_and_labels():
    assert control_label("random-n@200") == "random-n(n=200)" and control_label("layer-matched") == "layer-matched"
    assert random_n_count("random-n@200") == random_n_count("random-n(n=200)") == 200
    assert random_n_count("layer-matched") is None


def _hand_built_ids(tree: ast.AST) -> list[int]:
    """Lines of string literals (docstrings aside) holding an id's syntax: ``@k=``, ``@beta=``,
    ``@ablation=``, or an f-string ``{label}#{draw}``."""
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings:
            if any(x in n.value for x in ("@k=", "@beta=", "@ablation=")):
                lines.append(n.lineno)
        if isinstance(n, ast.JoinedStr):
            parts = n.values
            for i in range(1, len(parts) - 1):
                if (isinstance(parts[i], ast.Constant) and parts[i].value == "#"
                        and isinstance(parts[i - 1], ast.FormattedValue) and isinstance(parts[i + 1], ast.FormattedValue)):
                    lines.append(n.lineno)
    return lines


def test_no_module_but_vheads_ids_builds_or_parses_an_id():
    found = {}
    for p in sorted(SRC.rglob("*.py")):
        if p.name == "_ids.py" and p.parent == SRC:
            continue
        lines = _hand_built_ids(ast.parse(p.read_text(), str(p)))
        if lines:
            found[str(p.relative_to(SRC))] = lines
    assert not found, f"ids built or parsed outside vheads._ids: {found}"


def test_the_scan_finds_a_hand_built_id():
    tree = ast.parse('x = f"{label}#{i}"\ny = "cers@beta=10"\n"""a docstring: cers@beta=10"""\nz = f"(#{a})"\n')
    assert _hand_built_ids(tree) == [1, 2]
