"""Random and rule-based control head-sets: what a head-set S must beat.

A head-set means something only when it beats head-sets drawn the right way. Every random
control here is drawn with ``numpy.random.default_rng(seed)`` from a seed the caller
records and comes back as a :class:`ControlDraws`: the head-sets, the seed, how they were
chosen and a record of any fallback the draw had to make. :func:`draw_controls` (what the
study and ``vheads evaluate`` use) returns distinct head-sets only: the whole pool when it
is small (an exact permutation test), else R draws without repeats
(:mod:`vheads.evaluation._pools`); the ``*_controls`` functions give R independent draws.

Controls of a head-set S of a model with L layers × H heads:

- ``layer-matched``: same per-layer counts as S, uniform within each layer over *all* the
  layer's heads (overlap with S allowed); S itself is never a control.
- ``any-layer``: |S| heads uniformly anywhere (overlap with S allowed), S itself excluded.
- ``layer-matched-disjoint`` / ``any-layer-disjoint``: the same with every head of S
  excluded (no control shares a head with S): the draws of vheads before issue 41, and of
  most published code. Descriptive only (see below).
- ``attention-matched`` (``layer+attention-matched``): per layer, each head of S is
  matched by a non-S head of the same layer with a similar baseline image-attention mass.
- ``sinks``: the |S| non-S heads with the most attention on sink tokens (deterministic).
- ``text-heavy``: the |S| non-S heads with the least image attention (deterministic).
- ``whole-layers``: round(|S| / H) whole layers drawn uniformly (≈ |S| heads).
- ``random-n``: n heads uniformly anywhere (n = |S| unless given), S not excluded.

**Exchangeable and descriptive controls.** A rank p tests the null "S is a random head-set
of its layer pattern" (of its size, for any-layer). It is exact only when S and its
controls are exchangeable under that null: the controls are a uniform sample of the other
head-sets of the pattern, S's own heads allowed. A control drawn S-disjoint is not: under
the null, S's heads are never in a control but always in S, so the rank p is
anti-conservative (P(p ≤ 0.05) of 0.12–0.16 on a 2 + 1 pattern of an 8-head layer; the
null simulations in ``tests/evaluation/test_exchangeable.py``). ``Control.exchangeable``
says which controls give a rank p that decides (a *verdict*): ``layer-matched``,
``any-layer`` and ``random-n`` with n = |S|; every other control (the ``-disjoint`` ones,
``attention-matched``, which matches S's own heads, ``whole-layers``, ``sinks``,
``text-heavy``) is reported as a description, its p beside it but no verdict.

"Heads" are the model's heads: on a hybrid model (Qwen3.5) only those of its
softmax-attention layers (``S.attention_layers``); no control ever draws a head of a
linear-attention layer, and a layer-matched fallback borrows only from softmax layers.

:data:`CONTROL_REGISTRY` (a :class:`vheads._registry.Registry`; ``CONTROLS`` its live
``{name: entry}``) holds these as :class:`Control` entries with one calling convention;
:func:`register_control` adds one, and other packages add theirs through the entry-point
group ``vheads.controls`` (a module that registers its controls when imported).
:func:`parse_control_spec` reads a spec such as ``"layer-matched:100,any-layer:50"``.
How each control draws (its stream, or its rule) is :mod:`vheads.evaluation._control_rules`;
what a draw returns and the checks it makes, :mod:`vheads.evaluation._control_draws`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from vheads._ids import random_n_count
from vheads._headset import HeadSet
from vheads._registry import Registry
from vheads.evaluation._control_draws import (  # noqa: F401 - re-exported
    MAX_R, ControlDraws, Fallback, _check_disjoint_room, _check_draws, _check_head_array, _check_nonempty, _collect_fallbacks,
)
from vheads.evaluation._control_rules import (  # noqa: F401 - re-exported
    _any_layer_stream, _any_pattern_stream, _attention_matched_notes, _attention_matched_stream, _check_pattern_room,
    _layer_matched_stream, _layer_pattern_stream, _random_n_stream, _top_n, _whole_layer_notes, _whole_layer_stream,
    sink_heads, text_heavy_heads,
)
from vheads.evaluation._pools import (  # noqa: F401 - _free_in, _rings re-exported
    EXACT_POOL_FACTOR, _free_in, _rings, control_pool, control_pool_size, take_distinct,
)

DEFAULT_R = 100  # draws of a random control when a spec gives no R


# --- random controls (their streams: vheads.evaluation._control_rules) ------------------


def layer_matched_disjoint_controls(S: HeadSet, R: int, seed: int) -> ControlDraws:
    """R independent S-disjoint layer-matched head-sets (no head of S in any draw): the
    draws before issue 41; a descriptive control (its rank p is anti-conservative)."""
    return _independent("layer-matched-disjoint", S, R, seed)


def layer_matched_controls(S: HeadSet, R: int, seed: int) -> ControlDraws:
    """R independent head-sets with S's per-layer counts, drawn uniformly within each layer
    over all its heads (overlap with S allowed), S itself excluded (repeats possible:
    :func:`draw_controls` keeps distinct ones only). Exchangeable with S under the null
    "S is a random head-set of its layer pattern", so the rank p is exact.

    The S-disjoint variant (``layer-matched-disjoint``: in every layer l, ``c_l`` heads
    uniformly from the layer's heads outside S) falls back when S has more than half of a
    layer (``c_l > H - c_l``): the draw takes all ``H - c_l`` free heads of that layer and
    the shortfall from the nearest layers (distance 1, then 2, ...; all free heads of a
    nearer ring before any of a farther one, uniformly within a ring), after every layer
    has drawn its own heads. Each such layer is reported in ``fallbacks``.
    """
    return _independent("layer-matched", S, R, seed)


def any_layer_controls(S: HeadSet, R: int, seed: int) -> ControlDraws:
    """R independent head-sets of |S| heads drawn uniformly without replacement from all the
    model's heads (overlap with S allowed), S itself excluded: exchangeable with S."""
    return _independent("any-layer", S, R, seed)


def any_layer_disjoint_controls(S: HeadSet, R: int, seed: int) -> ControlDraws:
    """R independent head-sets of |S| heads drawn uniformly from the heads outside S (descriptive)."""
    return _independent("any-layer-disjoint", S, R, seed)


def attention_matched_controls(
    S: HeadSet, image_mass: np.ndarray, R: int, seed: int, n_nearest: int = 3
) -> ControlDraws:
    """R independent head-sets matched to S per layer on baseline image-attention mass, S excluded.

    ``image_mass[l, h]`` ([L, H]) is each head's baseline attention mass on the image
    tokens. In draw r, within each layer, S's heads are visited in a random order; each
    head s is matched by a head drawn uniformly among the ``n_nearest`` free non-S heads of
    the same layer whose mass is closest to ``image_mass[s]`` (ties by head index), drawn
    without replacement. So every draw has S's per-layer counts and a per-head mass close
    to S's; ``n_nearest`` trades closeness for variety between draws (1 would make the draws
    nearly identical).

    Fallback, when S has more than half of a layer: the heads of S left without a partner
    in their layer are matched, after every layer's own matching, among the ``n_nearest``
    closest-mass free heads of the nearest ring of layers (distance 1, then 2, ...) that
    has any. Such layers are reported in ``fallbacks``.
    """
    return _independent("attention-matched", S, R, seed, image_mass=image_mass, n_nearest=n_nearest)


def whole_layer_controls(S: HeadSet, R: int, seed: int) -> ControlDraws:
    """R independent head-sets made of whole layers, ``m = max(1, round(|S| / H))`` layers drawn uniformly.

    Every draw has m·H heads, the multiple of H nearest |S| (the seed's 96 heads for
    |S| = 100 and H = 32; rounding half-up). A whole layer cannot exclude S, so these
    draws keep any heads of S that lie in the chosen layers; ``notes`` gives the mean
    overlap. m is capped at L.
    """
    return _independent("whole-layers", S, R, seed)


def random_n_controls(n: int, R: int, seed: int, n_layers: int, n_heads: int,
                      attention_layers: tuple[int, ...] | None = None) -> ControlDraws:
    """R independent head-sets of n heads drawn uniformly without replacement from all the
    model's heads (L·H, or only those of ``attention_layers`` on a hybrid model)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer ≥ 1 (heads per draw), got {n!r}")
    return _independent("random-n", HeadSet((), n_layers, n_heads, attention_layers), R, seed, n=n)


# --- registry and spec -----------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """One registry entry.

    ``stream(S, rng, borrowed, **inputs)`` checks S and the inputs and returns an endless
    iterator of independent draws from ``rng`` (``borrowed`` collects a fallback's source
    layers); a deterministic control (``random=False``) has ``fixed(S, **inputs)``, its one
    head-set, instead. ``inputs`` are keyword arrays a control may need: ``image_mass``
    [L, H], ``sink_mass`` [L, H], ``n`` (random-n size). ``notes(S, sets, **inputs)``: what
    a reader of the results should know about the draws.
    """

    name: str
    stream: Callable[..., Iterator[HeadSet]] | None = None
    random: bool = True
    needs: tuple[str, ...] = field(default=())
    fixed: Callable[..., HeadSet] | None = None
    notes: Callable[..., tuple[str, ...]] | None = None
    #: S and the draws are exchangeable under the null "S is a random head-set of its pattern",
    #: so the rank p is exact and gives a verdict; otherwise the control is descriptive
    exchangeable: bool = False


def _need(inputs: dict, key: str, control: str, what: str):
    if inputs.get(key) is None:
        raise ValueError(f"the {control} control needs {key}: {what}")
    return inputs[key]


_IMAGE_MASS = "baseline image-attention mass per head [L, H]"


def _attention_matched(S, rng, borrowed, **inputs):
    return _attention_matched_stream(S, rng, borrowed, _need(inputs, "image_mass", "attention-matched", _IMAGE_MASS),
                                     inputs.get("n_nearest", 3))


def _sinks(S, **inputs):
    return sink_heads(_need(inputs, "sink_mass", "sinks", "attention mass on sink tokens per head [L, H]"), len(S), exclude=S)


def _text_heavy(S, **inputs):
    return text_heavy_heads(_need(inputs, "image_mass", "text-heavy", _IMAGE_MASS), len(S), exclude=S)


#: every control, in the order they are listed (plugins: the entry-point group ``vheads.controls``)
CONTROL_REGISTRY: Registry[Control] = Registry("control", group="vheads.controls")
#: name -> its entry (the registry's live view)
CONTROLS: dict[str, Control] = CONTROL_REGISTRY.by_name


def register_control(control: Control) -> Control:
    """Register ``control`` under its name (a different entry under a taken name is refused)."""
    return CONTROL_REGISTRY.register(control)


for _control in (
    Control("layer-matched", lambda S, rng, borrowed, **_: _layer_pattern_stream(S, rng), exchangeable=True),
    Control("any-layer", lambda S, rng, borrowed, common=False, **_: _any_pattern_stream(S, rng), exchangeable=True),
    Control("layer-matched-disjoint", lambda S, rng, borrowed, **_: _layer_matched_stream(S, rng, borrowed),
            notes=lambda S, sets, **_: ("S-disjoint draws: descriptive, not exchangeable with S",)),
    Control("any-layer-disjoint", lambda S, rng, borrowed, common=False, **_: _any_layer_stream(S, rng, common=common),
            notes=lambda S, sets, **_: ("S-disjoint draws: descriptive, not exchangeable with S",)),
    Control("attention-matched", _attention_matched, needs=("image_mass",), notes=_attention_matched_notes),
    Control("sinks", random=False, needs=("sink_mass",), fixed=_sinks,
            notes=lambda S, sets, **_: (f"the {len(S)} non-S heads with most sink mass",)),
    Control("text-heavy", random=False, needs=("image_mass",), fixed=_text_heavy,
            notes=lambda S, sets, **_: (f"the {len(S)} non-S heads with least image mass",)),
    Control("whole-layers", lambda S, rng, borrowed, **_: _whole_layer_stream(S, rng), notes=_whole_layer_notes),
    Control("random-n", lambda S, rng, borrowed, **inputs: _random_n_stream(S, rng, n=inputs.get("n")), exchangeable=True),
):
    register_control(_control)
#: other names of a control
ALIASES = {"layer+attention-matched": "attention-matched"}

#: controls every head-set of one size draws from one common sequence (``common=True`` of
#: :func:`draw_controls`: draws over all heads, those touching S skipped),
#: seeded by the size alone, so the settings share most of their draws and the probe memo
#: runs each shared row once (issue 32; docs/controls.md says why the statistics stay right)
COMMON_DRAWS = frozenset({"any-layer", "any-layer-disjoint"})
#: controls whose draws depend on S only through its per-layer counts (and the skip of S
#: itself): head-sets of one layer pattern drawn from one seed share their draws
PATTERN_DRAWS = frozenset({"layer-matched"})


def is_exchangeable(name: str, S: HeadSet | None = None, n: int | None = None) -> bool:
    """Whether control ``name``'s rank p for S decides (a verdict) or only describes: an
    exchangeable control (``Control.exchangeable``); random-n only when it draws |S| heads."""
    count = random_n_count(name)  # a spec (random-n@200) or a label (random-n(n=200))
    base, n = ("random-n", n or count) if count is not None else (name, n)
    if base == "random-n":
        return n is None or S is None or n == len(S)
    try:
        return get_control(base).exchangeable
    except ValueError:
        return False


def get_control(name: str) -> Control:
    """The registry entry for ``name`` (or an alias); :class:`vheads.VheadsError` (a ``ValueError``) naming the closest and every name otherwise."""
    return CONTROL_REGISTRY.get(ALIASES.get(name, name))  # "unknown control 'x' (did you mean ...); choose from ..."


def _independent(name: str, S: HeadSet, R: int, seed: int, **inputs) -> ControlDraws:
    """R independent draws of random control ``name`` from ``seed`` (repeats kept)."""
    control = get_control(name)
    rng, borrowed = _check_draws(R, seed), {}
    sets = tuple(itertools.islice(control.stream(S, rng, borrowed, **inputs), R))
    notes = control.notes(S, sets, **inputs) if control.notes else ()
    return ControlDraws(control.name, int(seed), sets, _collect_fallbacks(S, borrowed), notes, "independent",
                        control_pool_size(control.name, S, inputs.get("n")))


def draw_controls(name: str, S: HeadSet, R: int, seed: int, **inputs) -> ControlDraws:
    """The control head-sets S is compared with: *distinct* head-sets of control ``name``
    (:mod:`vheads.evaluation._pools`), R of them unless the pool is small.

    - ``exact``: when the control's pool (every distinct head-set it can draw for S) has at
      most :data:`EXACT_POOL_FACTOR` · R members, all of them, each once, in an order drawn
      from ``seed`` — the rank p over them is the exact permutation p, floor 1/(pool + 1);
    - ``sampled``: otherwise independent draws from ``seed`` with every repeat skipped,
      until R distinct head-sets (a sample without replacement); fewer when a pool that
      cannot be counted (``attention-matched``) runs dry, which ``notes`` says.

    A deterministic control (``sinks``, ``text-heavy``) is its one head-set (R must be 1).
    ``len`` of the result is the number of head-sets S is compared with, ``n`` of the rank
    p; ``mode`` and ``pool`` (the pool's size where known) say how they were chosen.
    """
    control = get_control(name)
    if not control.random and R != 1:
        raise ValueError(f"control {control.name!r} is deterministic (one head-set), so R must be 1, got {R}")
    rng, borrowed = _check_draws(R, seed), {}
    notes: list[str] = []
    if control.fixed is not None:
        members = control_pool(control.name, S, 1, fixed=control.fixed(S, **inputs))
    else:
        stream = control.stream(S, rng, borrowed, **inputs)  # checks S and the inputs
        from_pool: dict[int, set[int]] = {}
        members = control_pool(control.name, S, EXACT_POOL_FACTOR * R, n=inputs.get("n"), borrowed=from_pool)
        if members is not None:
            borrowed = from_pool
    if members is not None:
        sets, mode, pool = tuple(members[i] for i in rng.permutation(len(members))), "exact", len(members)
        if control.random:
            notes.append(f"the whole pool: all {pool} distinct head-sets, each once (exact permutation test)")
    else:
        found, attempts = take_distinct(stream, R)
        sets, mode, pool = tuple(found), "sampled", control_pool_size(control.name, S, inputs.get("n"))
        if len(sets) < R:
            notes.append(f"only {len(sets)} distinct head-sets in {attempts} draws: the pool is small")
    if control.notes:
        notes[:0] = control.notes(S, sets, **inputs)
    return ControlDraws(control.name, int(seed) if control.random else None, sets, _collect_fallbacks(S, borrowed),
                        tuple(notes), mode, pool)


@dataclass(frozen=True)
class ControlRequest:
    """One entry of a control spec: the control's registry name, its number of draws R and,
    for ``random-n``, the head count n of each draw (``None``: as many heads as S)."""

    name: str
    R: int
    n: int | None = None

    @property
    def label(self) -> str:
        """The name results are reported under: ``random-n(n=200)`` when n is set."""
        return f"{self.name}(n={self.n})" if self.n else self.name


def split_control_name(name: str) -> tuple[str, int | None]:
    """``"random-n@200"`` → ``("random-n", 200)``; any other name → ``(name, None)``.
    Only ``random-n`` takes its own n (seed Table 12's 200- and 400-head sets)."""
    base, sep, n_text = name.partition("@")
    if not sep:
        return name, None
    if get_control(base).name != "random-n":
        raise ValueError(f"control {base!r} takes no head count; only random-n does (random-n@N)")
    return "random-n", _positive_int(n_text, f"control {name!r}: the head count after '@'")


def _positive_int(text: str, what: str) -> int:
    """``int(text)``, refusing anything that is not an integer ≥ 1 with ``what`` named."""
    try:
        v = int(text)
    except ValueError:
        raise ValueError(f"{what} must be an integer, got {text!r}") from None
    if v < 1:
        raise ValueError(f"{what} must be at least 1, got {v}")
    return v


def parse_control_spec(spec: str) -> list[ControlRequest]:
    """Parse ``"layer-matched:100,any-layer:50"`` into requests, in the order given.

    Each entry is ``name`` or ``name:R``; ``random-n:R@N`` draws N heads per draw (default:
    as many as S). R defaults to 100 for random controls and is 1
    for the deterministic ``sinks`` and ``text-heavy``. Unknown names, R that is not an
    integer ≥ 1, R > 1 for a deterministic control, empty entries and repeated names are
    ``ValueError``.
    """
    if not spec or not spec.strip():
        raise ValueError("empty control spec; give e.g. 'layer-matched:100,any-layer:50'")
    requests: list[ControlRequest] = []
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            raise ValueError(f"empty entry in control spec {spec!r} (a stray comma?)")
        name, sep, r_text = (part.strip() for part in entry.partition(":"))
        r_text, at, n_text = r_text.partition("@")
        n = split_control_name(f"{name}@{n_text}")[1] if at else None
        control = get_control(name)
        if sep:
            R = _positive_int(r_text, f"control {name!r}: R")
            if R > MAX_R:
                raise ValueError(f"control {name!r}: R = {R} draws is more than {MAX_R:,}; give a smaller R")
        else:
            R = DEFAULT_R if control.random else 1
        if not control.random and R != 1:
            raise ValueError(
                f"control {name!r} is deterministic (one head-set), so R must be 1, got {R}; "
                f"write {control.name!r} or '{control.name}:1'"
            )
        req = ControlRequest(control.name, R, n)
        if any(r.label == req.label for r in requests):
            raise ValueError(f"control {req.label!r} appears twice in {spec!r}")
        requests.append(req)
    return requests
