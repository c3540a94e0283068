"""The score space: every discovery score is one point, each axis a parameter.

A :class:`ScorePoint` fixes six axes (``A[l,h][q,t]`` is post-softmax attention, ``Q`` the
query rows of one item, ``R`` its key region, ``I`` its image keys):

- ``rows`` — which query rows ``Q``: ``last`` (last prompt token), ``qspan`` (the tokens
  that name the panel), ``out`` (the model's greedy answer, teacher-forced), ``prompt``
  (every prompt token, answer excluded), ``image`` (every image-token row);
- ``region`` — ``R``: ``target`` (the asked panel's image tokens) or ``image`` (all of ``I``);
- ``norm`` — ``raw`` (``A`` itself, DESIGN.md "Region mass") or ``image``
  (``A'[q,t] = A[q,t] / Σ_{u∈I} A[q,u]`` on ``t ∈ I``, 0 elsewhere);
- ``keys`` — per row, then the mean over ``q ∈ Q``: ``mass`` = ``Σ_{t∈R} A'[q,t]``;
  ``hit`` = ``1[argmax_t A'[q,t] ∈ R]`` (ties: the FIRST maximal key in position order);
  ``mean`` = ``mass / |R|``;
- ``across`` — over items i: ``mean`` (of the per-item score ``m_i[l,h]``);
  ``frequency`` (the share of items whose own selection — ``select`` applied to ``m_i``
  and that item's entropy — holds the head; the head-set is then the flat top-k of it);
  ``hit-frequency`` (with ``keys="hit"`` only: hits pooled over every (item, row),
  ``Σ_i |Q_i|·m_i / Σ_i |Q_i|``, so an item with more rows weighs more);
- ``select`` — ``flat`` top-k; ``per-layer`` top-k of every layer; ``elbow``: every head
  ranked before the elbow of the SORTED (descending) score curve (:func:`elbow_count`; k
  unused); ``entropy``: of the ``elbow`` heads, the k with the lowest spatial entropy —
  ``shannon`` (default: :func:`spatial_entropy`, of the renormalised image attention) or
  ``components`` (the Localization Heads paper's: of the connected components of the map
  thresholded at its mean, drawn on the image through the token borders,
  :func:`vheads.evaluation.component_entropy`; the point's ``entropy`` key). Ties always by ``(layer, head)``;
- ``sinks`` — ``keep`` (every key of ``R``) or ``drop``: the image's sink tokens ``S`` (an
  image token whose hidden-state L2 norm at ``sink_layer`` exceeds ``sink_factor ×`` the
  item's median image-token norm, :func:`sink_tokens`) leave the region, ``R' = R \\ S``
  (:func:`sink_free_keys`); the norms are read in the same capture forward.

The seed's settings are the points ``rows=<source>, region=target, norm=raw, keys=mass,
across=mean`` (:func:`setting_point`); published methods are registered presets
(:data:`SCORE_REGISTRY`, a :class:`vheads._registry.Registry`; ``@score("name")``): ``gaze``,
``localization``, ``vrh``, ``sparsemm``, and ``gaze_nosink`` (``gaze`` with the sinks dropped).
Other packages add presets through the entry-point group ``vheads.scores`` (a module that
registers its presets with :func:`vheads.discovery.score` when imported).
One forward per item captures everything a point needs (:func:`point_statistics`), for
the point's rows only: a ``[L, H, G]`` capture, with ``G = |I|`` single-key groups only when
the point needs the spatial entropy; never a full attention map.

The point is :mod:`vheads.discovery._score_point`, its per-item statistics
:mod:`vheads.discovery._point_statistics`, its aggregation and selection
:mod:`vheads.discovery._point_selection`; every name is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vheads._errors import VheadsError
from vheads._registry import Registry
from vheads.data import Item
from vheads.discovery._point_selection import (  # noqa: F401 - re-exported
    PointResult, _ranked, aggregate, elbow_count, select_point, sink_record,
)
from vheads.discovery._point_statistics import (  # noqa: F401 - re-exported
    PointStatistics, _entropy, point_statistics, query_rows, sink_free_keys, sink_tokens, spatial_entropy,
)
from vheads.discovery._score_point import AXES, ENTROPIES, SINK_FACTOR, SINK_LAYER, ScorePoint  # noqa: F401 - re-exported
from vheads.discovery._source_setting import SOURCES, Setting

if TYPE_CHECKING:  # torch loads only where a point is scored: a config check reads this module
    from vheads.engine import Engine


# --- the registry ---------------------------------------------------------------------

@dataclass(frozen=True)
class ScorePreset:
    """A registered score point: its name and the function that returns it (its docstring
    says which published method it is); calling the preset returns the point."""

    name: str
    point: Callable[[], ScorePoint]

    def __call__(self) -> ScorePoint:
        return self.point()


#: every score preset, in registration order (plugins: the entry-point group ``vheads.scores``)
SCORE_REGISTRY: Registry[ScorePreset] = Registry("score", group="vheads.scores")
#: name -> its preset (the registry's live view; ``SCORES[name]()`` is the point)
SCORES: dict[str, ScorePreset] = SCORE_REGISTRY.by_name


def score(name: str) -> Callable[[Callable[[], ScorePoint]], Callable[[], ScorePoint]]:
    """Decorator: register the function that returns a score point as the preset ``name``."""
    return SCORE_REGISTRY.decorator(lambda fn, name: ScorePreset(name, fn), name=name)


@score("gaze")
def gaze() -> ScorePoint:
    """Gaze heads (Qwen3-VL): raw attention mass from the last prompt token onto the queried
    panel, mean over items, flat top-k — the seed's ``last`` setting."""
    return ScorePoint(rows="last", region="target", norm="raw", keys="mass", across="mean", select="flat")


@score("localization")
def localization() -> ScorePoint:
    """Localization heads (LLaVA-1.5, "Your LVLM only needs a few attention heads for visual
    grounding"): per item, the last token's raw attention mass on ALL image tokens; the heads
    above the elbow of the SORTED scores (the published code cut the unsorted tensor, a public
    bug report), of those the ones with the lowest spatial entropy of their image attention;
    the head-set is the heads selected in the most items (selection frequency). vheads' spatial
    entropy is the Shannon entropy of the renormalized image attention (:func:`spatial_entropy`),
    not the paper's entropy of connected components of the thresholded map (that one is the
    ``localization_cc`` preset). k = 10."""
    return ScorePoint(rows="last", region="image", norm="raw", keys="mass", across="frequency", select="entropy", k=10)


@score("localization_cc")
def localization_cc() -> ScorePoint:
    """Localization heads with the paper's spatial entropy: ``localization``, except that each
    head's image attention is drawn on the image through the token borders, thresholded at
    its mean, and the entropy is that of its connected components' areas
    (:func:`vheads.evaluation.component_entropy`, the grounding test's components)."""
    return ScorePoint(rows="last", region="image", norm="raw", keys="mass", across="frequency", select="entropy", k=10,
                      entropy="components")


@score("vrh")
def vrh() -> ScorePoint:
    """Visual retrieval heads (11 VLMs, 2026), the design space's best point: the model's own
    output tokens as query rows, region mass summed over the target region, mean over items,
    top-20 heads."""
    return ScorePoint(rows="out", region="target", norm="raw", keys="mass", across="mean", select="flat", k=20)


@score("sparsemm")
def sparsemm() -> ScorePoint:
    """SparseMM / retrieval heads: a head "hits" at a generated token when its most-attended key
    (argmax over all keys, raw attention) lies in the target region; the score is the hit
    frequency pooled over every generated token of every item; flat top-k."""
    return ScorePoint(rows="out", region="target", norm="raw", keys="hit", across="hit-frequency", select="flat")


@score("gaze_nosink")
def gaze_nosink() -> ScorePoint:
    """Gaze heads with the image's sink tokens left out: ``gaze``, except that image tokens whose
    hidden state has a massive norm (above 10 × the median image-token norm of the item, at the
    output of decoder layer 1) leave the target region, so attention parked on a sink is not
    read as looking at the panel. Its sink-blind twin is ``gaze``."""
    return ScorePoint(rows="last", region="target", norm="raw", keys="mass", across="mean", select="flat", sinks="drop")


for _source in SOURCES:
    def _seed(source: str = _source) -> ScorePoint:
        return ScorePoint(rows=source)

    _seed.__doc__ = f"The seed's ``{_source}`` source: raw region mass on the target, mean over items, flat top-k."
    score(f"seed-{_source}")(_seed)


def setting_point(setting: Setting, mode: str = "flat", k: int | None = None) -> ScorePoint:
    """The point of one of the seed's settings (its corpus and query type pick the items)."""
    return ScorePoint(rows=setting.source, select=mode, k=k)


def parse_score(text: str) -> ScorePoint:
    """A registered name (``vrh``) or a custom point ``rows=out,keys=hit,across=mean,k=20``
    (axes left out keep :class:`ScorePoint`'s defaults). Bad input: :class:`VheadsError`."""
    text = text.strip()
    if text in SCORE_REGISTRY:
        return SCORE_REGISTRY.get(text).point()
    if "=" not in text:  # "unknown score 'x' (did you mean ...); choose from ..., or write a point"
        raise VheadsError(f"{SCORE_REGISTRY.unknown(text)}, or write a point like 'rows=out,keys=hit'")
    values: dict = {}
    for part in text.split(","):
        axis, _, value = part.partition("=")
        axis, value = axis.strip(), value.strip()
        if axis in ("k", "sink_layer"):
            if not value.isdigit():
                raise VheadsError(f"score point {text!r}: {axis} must be a {'positive' if axis == 'k' else 'non-negative'} "
                                  f"integer, got {value!r}")
            values[axis] = int(value)
        elif axis == "entropy":
            values[axis] = value
        elif axis == "sink_factor":
            try:
                values[axis] = float(value)
            except ValueError:
                raise VheadsError(f"score point {text!r}: sink_factor must be a number above 1, got {value!r}") from None
        elif axis in AXES:
            values[axis] = value
        else:
            raise VheadsError(f"score point {text!r}: unknown axis {axis!r}; axes: {', '.join(AXES)}, k, sink_layer, sink_factor, "
                              "entropy")
    return ScorePoint(**values)

def score_point(lm, items: Sequence[Item], point: ScorePoint, max_new_tokens: int = 4, engine: Engine | None = None) -> tuple[PointResult, PointStatistics]:
    """Score ``items`` under ``point`` and select its head-set: greedy answers first when the
    point reads the ``out`` rows (an empty answer teacher-forces the end-of-turn token, as
    :func:`score_settings` does), then one capture forward per item."""
    from vheads.discovery._region_mass import _eos_text, greedy_answer
    from vheads.engine import Engine

    if len(items) == 0:
        raise VheadsError("no items to score")
    answers: list[str | None] = [None] * len(items)
    if point.rows == "out":
        answers = [greedy_answer(lm, lm.adapter.build(it, lm.processor), max_new_tokens) or _eos_text(lm) for it in items]
    stats = point_statistics(engine or Engine(lm), items, answers, point)
    return aggregate(stats, point, lm.n_heads, tuple(lm.attention_layers), lm.n_layers), stats
