"""The study's stages as registered parts.

A stage (discovery, overlap, stability, causal map, controls, evaluation, audit, pointing
suite, report) is one module of :mod:`vheads.study.stages` that registers a :class:`Stage`
with :func:`register_stage`: the config keys it owns (:class:`Key`: each key's default,
its help, the check of its value, written once), the check of its keys together, the work
units it asks for, the compute of one unit on a model replica, the forward rows the plan
counts for it, and the store tables it writes. From the keys come the
:class:`vheads.study.StudyConfig` fields, the TOML ``vheads study --print-config`` prints
and :data:`vheads.study._config.LATER_KEY_DEFAULTS`; the runner runs the stages in
``order``; ``vheads plan``, the doctor and ``benchmarks/gpu_check.py`` read their rows.

:func:`registered_stages` imports every module of the ``stages`` package (adding a stage is
adding one file there) and the modules of the ``vheads.stages`` entry-point group (a plugin
package's stages). A stage module imports no torch at its top: the config is checked
before torch loads.
"""

from __future__ import annotations

import contextvars
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from vheads._errors import VheadsError
from vheads._registry import Registry, did_you_mean

STAGE_PACKAGE = "vheads.study.stages"
#: the entry-point group of stages other packages add (``[project.entry-points."vheads.stages"]``
#: ``mine = "my_package.my_stage"``: the module registers its stage when imported)
ENTRY_POINT_GROUP = "vheads.stages"
#: :attr:`Key.before` of a later key whose old runs had its default
SAME = object()


@dataclass(frozen=True)
class Key:
    """One config key, written once.

    ``default``: its value when the config leaves it out (a list or table is copied for each
    config). ``help``: the comment of its ``--print-config`` line (``\\n`` continues it on the
    next line, indented under the comment column; ``cont = "#"`` starts those lines with a
    ``#`` instead of a space). ``check(cfg, bad)``: the check of its value (``bad(key,
    message)`` refuses it). ``later``: the key came after the first release, and a run made
    before it had ``before`` (default: the key's default): at that value the key is left out
    of the config hash (:func:`vheads.study._config.science_dict`). ``example``: commented
    lines printed after the key (a key whose default is empty and has ``line = False``
    prints only those). ``entries``: the help of a table's default entries (``[controls]``).
    ``table``: the table the key lives in (``"run"``: ``[run]``; ``""``: the top level).
    ``gap``: spaces before the comment of a line longer than the comment column."""

    name: str
    default: Any
    help: str = ""
    check: Callable[[Any, Callable], None] | None = None
    later: bool = False
    before: Any = SAME
    example: str = ""
    line: bool = True
    entries: Mapping[str, str] = field(default_factory=dict)
    table: str = ""
    gap: int = 3
    cont: str = " "
    type: Any = None  # the field's annotation (default: the default's type)

    @property
    def old_default(self) -> Any:
        """The value a run made before this key had."""
        return self.default if self.before is SAME else self.before


@dataclass(frozen=True)
class Stage:
    """One registered stage (module docstring).

    ``units(ctx)``: the work units the stage asks for (a :class:`vheads.study._runner.StageRun`
    gives the store, config and model shape), run on the backend; ``run(ctx)`` instead, for a
    stage that computes on the driver or plans its units round by round (returns the units it
    computed). ``compute``: unit kind -> ``fn(computer, unit) -> {"rows": {table: rows}}`` on a
    replica (:class:`vheads.study._units.UnitComputer`). ``rows(ctx)``: the forward rows of
    the plan (:class:`vheads.study._plan.PlanStage` entries; ``ctx`` a
    :class:`vheads.study._plan.PlanContext`). ``done(store, cfg)``: whether a run holds
    the stage's results (default: every unit it asks for, or its ``run`` would compute none).
    ``timing``: the entry of the study's seconds its time adds to (default: its name)."""

    name: str
    order: float
    keys: tuple[Key, ...] = ()
    validate: Callable[[Any, Callable], None] | None = None
    units: Callable[[Any], list[dict]] | None = None
    run: Callable[[Any], int] | None = None
    compute: Mapping[str, Callable[[Any, dict], dict]] = field(default_factory=dict)
    rows: Callable[[Any], list] | None = None
    tables: tuple[str, ...] = ()
    desc: str = ""  # the progress bar's label (default: the name)
    timing: str = ""


#: every stage (:class:`vheads._registry.Registry`; a stage plugin that fails to import raises)
STAGE_REGISTRY: Registry[Stage] = Registry("study stage", group=ENTRY_POINT_GROUP, strict=True)
#: stage name -> its entry, filled as the stage modules are imported
STAGES: dict[str, Stage] = STAGE_REGISTRY.by_name


def register_stage(stage: Stage) -> Stage:
    """Register ``stage`` (one name, one entry; a key name owned by one stage only)."""
    if STAGES.get(stage.name, stage) != stage:
        raise VheadsError(f"study stage {stage.name!r} is registered twice")
    for other in STAGES.values():
        if other.name != stage.name:
            both = {(k.table, k.name) for k in other.keys} & {(k.table, k.name) for k in stage.keys}
            if both:
                t, n = sorted(both)[0]
                raise ValueError(f"config key {f'{t}.{n}' if t else n!r} is owned by stages {other.name!r} and {stage.name!r}")
    return STAGE_REGISTRY.register(stage)


_LOADED = False


def registered_stages() -> list[Stage]:
    """Every stage, in ``order`` (the package's modules and the plugins', imported once)."""
    global _LOADED
    if not _LOADED:
        pkg = importlib.import_module(STAGE_PACKAGE)
        for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            importlib.import_module(f"{STAGE_PACKAGE}.{mod.name}")
        STAGE_REGISTRY.load_plugins()
        _LOADED = True
    return sorted(STAGES.values(), key=lambda s: (s.order, s.name))


def get_stage(name: str) -> Stage:
    """The stage called ``name``; a :class:`VheadsError` (a ``ValueError``) with a did-you-mean otherwise."""
    stages = [s.name for s in registered_stages()]
    if name not in stages:
        raise VheadsError(f"unknown study stage {name!r}{did_you_mean(name, stages)}; stages: {', '.join(stages)}")
    return STAGES[name]


def stage_keys(table: str = "") -> list[Key]:
    """Every stage's keys of ``table`` (``""``: the top level), in stage order."""
    return [k for s in registered_stages() for k in s.keys if k.table == table]


def unit_computers() -> dict[str, Callable[[Any, dict], dict]]:
    """Unit kind -> the compute of one unit, over every stage."""
    out: dict[str, Callable] = {}
    for s in registered_stages():
        for kind, fn in s.compute.items():
            if kind in out:
                raise ValueError(f"unit kind {kind!r} is computed by two stages")
            out[kind] = fn
    return out


# ---- checking a key's value ---------------------------------------------------------------------

#: off while a config is only planned (``vheads plan``: :func:`vheads.study.load_config_for_plan`): its
#: data folders, files and device need not exist on this machine
CHECK_PATHS: contextvars.ContextVar[bool] = contextvars.ContextVar("vheads_check_paths", default=True)
MAX_INT = 1 << 63  # every integer key fits a signed 64-bit integer (SQLite's)


def _type_name(t) -> str:
    return getattr(t, "__name__", str(t))


def check_value(key: str, value: Any, default: Any) -> Any:
    """Check ``value`` against the type of ``default``; ints are accepted for floats, and an
    int must fit 64 bits (SQLite stores it; a larger one is a typo). A table of ints
    (``[controls]``) is checked entry by entry, the error naming ``key.entry``."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        try:
            value = float(value) if ok else value
        except OverflowError:  # an integer beyond float range
            ok = False
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and not -MAX_INT <= value < MAX_INT:
            raise VheadsError(f"config key {key!r}: {value} does not fit a 64-bit integer")
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, list):
        ok = isinstance(value, list)
        if ok and default:
            proto = default[0]
            value = [check_value(f"{key}[{i}]", v, proto) for i, v in enumerate(value)]
    elif isinstance(default, dict):
        ok = isinstance(value, dict)
        if ok and default:
            proto = next(iter(default.values()))
            value = {k: check_value(f"{key}.{k}", v, proto) for k, v in value.items()}
    else:
        ok = True
    if not ok:
        raise VheadsError(f"config key {key!r}: expected {_type_name(type(default))}, got {type(value).__name__} {value!r:.80}")
    return value
