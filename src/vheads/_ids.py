"""Every id vheads stores, built and parsed here and nowhere else.

**Head-set ids** (``headsets.headset_id``, ``outcomes.headset_id``): ``S`` (the discovered
head-set); ``<label>#<draw>`` (a control draw: ``layer-matched#17``, ``random-n(n=200)#0``);
``S@k=<K>`` (the k sweep's top-K set) and ``layer-matched@k=<K>#<draw>`` (its controls);
``<part>/layer-matched#<draw>`` (the head-set algebra's parts: ``shared``, ``only:<setting>``).
A deterministic control (``sinks``) may be stored without a draw.

**Test ids** (``outcomes.test``): a base test (``cers``, ``ncs-grid``, ``text``, ``grounding``),
NCS per row group ``ncs-<group>``, a swept parameter ``<test>@<param>=<value>``
(``cers@beta=100``; the k sweep's arms ``ncs-all@k=8``) and a head-output ablation
``ncs-<group>@ablation=<name>``.

**Control specs** (``[controls]`` keys) and their stored labels: ``random-n@200`` is stored as
``random-n(n=200)``; every other name as itself.

The builders and parsers are inverse: ``parse_headset_id(headset_id(r, draw, k))`` gives back
``(r, k, draw)`` and likewise for test ids (tests/test_ids.py, with hypothesis).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the discovered head-set's id
S = "S"
#: SQL GLOB patterns of the k sweep's head-sets and the beta sweep's tests (store queries)
K_SWEEP_GLOB = "*@k=*"
S_K_GLOB = "S@k=*"
BETA_SWEEP_GLOB = "*@beta=*"
BETA_SWEEP_LIKE = "cers@beta=%"

_HEADSET = re.compile(r"^(?P<name>[^@#]+)(?:@k=(?P<k>\d+))?(?:#(?P<draw>\d+))?$")
_TEST = re.compile(r"^(?P<base>[^@]+)(?:@(?P<param>[A-Za-z_]+)=(?P<value>.+))?$")
_ABLATION = re.compile(r"^ncs-(?P<group>[a-z]+)@ablation=(?P<ablation>[a-z]+)$")
_RANDOM_N = re.compile(r"random-n(?:@|\(n=)(\d+)\)?")


# ---- head-set ids ------------------------------------------------------------------------------


def headset_id(role: str, draw: int | None = None, k: int | None = None) -> str:
    """``S``, ``S@k=8``, ``layer-matched#17``, ``layer-matched@k=8#3``, ``shared/layer-matched#2``."""
    return role + (f"@k={int(k)}" if k is not None else "") + (f"#{int(draw)}" if draw is not None else "")


def k_label(role: str, k: int) -> str:
    """The label of a k-sweep point's sets: ``S@k=8``, ``layer-matched@k=8`` (no draw)."""
    return headset_id(role, k=k)


@dataclass(frozen=True)
class HeadSetId:
    """A parsed head-set id: ``role`` is ``"S"`` or a control label; ``k`` set for k-sweep sets."""

    raw: str
    role: str
    k: int | None
    draw: int | None

    @property
    def is_s(self) -> bool:
        return self.role == S

    @property
    def label(self) -> str:
        """The id less its draw: what the draws of one control share (``layer-matched@k=8``)."""
        return headset_id(self.role, k=self.k)


def parse_headset_id(raw: str) -> HeadSetId:
    """The parts of a head-set id (an id of another form: its whole text as ``role``)."""
    m = _HEADSET.match(raw)
    if not m:
        return HeadSetId(raw, raw, None, None)
    k, draw = m.group("k"), m.group("draw")
    return HeadSetId(raw, m.group("name"), int(k) if k else None, int(draw) if draw else None)


def is_k_sweep(raw: str) -> bool:
    """Whether a head-set id is one of the k sweep's sets (``S@k=K`` or its controls)."""
    return parse_headset_id(raw).k is not None


# ---- test ids ----------------------------------------------------------------------------------


def row_group_test_id(group: str) -> str:
    """NCS at one row group: ``ncs-all``, ``ncs-image``, …"""
    return f"ncs-{group}"


def ablation_test_id(group: str, ablation: str) -> str:
    """NCS at a row group under a head-output ablation: ``ncs-all@ablation=zero``."""
    return f"{row_group_test_id(group)}@ablation={ablation}"


def parse_ablation_test_id(raw: str) -> tuple[str, str] | None:
    """``(group, ablation)`` of ``ncs-<group>@ablation=<name>``, else None."""
    m = _ABLATION.match(raw)
    return (m.group("group"), m.group("ablation")) if m else None


def sweep_test_id(base: str, param: str, value: float) -> str:
    """A swept test: ``cers@beta=100`` (values as ``%g``), ``ncs-all@k=8``."""
    return f"{base}@{param}={int(value) if param == 'k' else format(float(value), 'g')}"


def beta_test_id(beta: float) -> str:
    """CERS at one point of the beta sweep: ``cers@beta=10``."""
    return sweep_test_id("cers", "beta", beta)


@dataclass(frozen=True)
class TestId:
    """A parsed test id: ``cers@beta=100`` → base ``cers``, param ``beta``, value 100.0."""

    raw: str
    base: str
    param: str | None
    value: float | None


def parse_test_id(raw: str) -> TestId:
    """The parts of a swept test id; a plain test (or an ablation's, whose value is a name)
    reads as its whole text with no parameter."""
    m = _TEST.match(raw)
    if not m or not m.group("param"):
        return TestId(raw, raw, None, None)
    try:
        value = float(m.group("value"))
    except ValueError:
        return TestId(raw, raw, None, None)
    return TestId(raw, m.group("base"), m.group("param"), value)


def without_ablation(raw: str) -> tuple[str, str | None]:
    """``ncs-all@ablation=zero`` → ``("ncs-all", "zero")``; any other id → ``(raw, None)``."""
    base, sep, abl = raw.partition("@ablation=")
    return (base, abl) if sep else (raw, None)


def is_ablation_test(raw: str) -> bool:
    return without_ablation(raw)[1] is not None


# ---- control specs and labels -----------------------------------------------------------------


def random_n_count(name: str) -> int | None:
    """N of a ``random-n@N`` spec or a ``random-n(n=N)`` label, else None."""
    m = _RANDOM_N.fullmatch(name)
    return int(m.group(1)) if m else None


def control_label(name: str) -> str:
    """The label a ``[controls]`` entry's draws are stored under (``random-n@200`` → ``random-n(n=200)``)."""
    n = random_n_count(name)
    return f"random-n(n={n})" if n is not None and name.startswith("random-n@") else name
