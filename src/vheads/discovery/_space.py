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
(:data:`SCORES`, ``@score("name")``): ``gaze``, ``localization``, ``vrh``, ``sparsemm``, and
``gaze_nosink`` (``gaze`` with the sinks dropped).
One forward per item captures everything a point needs (:func:`point_statistics`), for
the point's rows only: a ``[L, H, G]`` capture, with ``G = |I|`` single-key groups only when
the point needs the spatial entropy; never a full attention map.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from vheads._errors import VheadsError
from vheads.data import Item
from vheads.discovery._setting import SOURCE_SPAN, SOURCES, Setting
from vheads.discovery._selection import resolve_k
from vheads._headset import HeadSet

if TYPE_CHECKING:  # torch loads only where a point is scored: a config check reads this module
    from vheads.engine import Engine

AXES: dict[str, tuple[str, ...]] = {
    "rows": ("last", "qspan", "out", "prompt", "image"),
    "region": ("target", "image"),
    "norm": ("raw", "image"),
    "keys": ("mass", "hit", "mean"),
    "across": ("mean", "frequency", "hit-frequency"),
    "select": ("flat", "per-layer", "elbow", "entropy"),
    "sinks": ("keep", "drop"),
}

#: the spatial entropies of the ``entropy`` selection (the point's ``entropy`` key; the first is the default)
ENTROPIES = ("shannon", "components")

#: the sink rule's defaults (``sinks="drop"``): hidden states at transformers' index 2 (the
#: output of decoder layer 1, where the massive activations of LLMs have appeared), a sink
#: above 10 × the median image-token norm of its item
SINK_LAYER, SINK_FACTOR = 2, 10.0


@dataclass(frozen=True)
class ScorePoint:
    """One discovery score: a value on every axis of :data:`AXES` and the head-set size ``k``
    (``None``: scaled to the model, :func:`resolve_k`). Bad values are refused on creation."""

    rows: str = "last"
    region: str = "target"
    norm: str = "raw"
    keys: str = "mass"
    across: str = "mean"
    select: str = "flat"
    k: int | None = None
    sinks: str = "keep"
    sink_layer: int | None = None  # sinks="drop": SINK_LAYER when unset
    sink_factor: float | None = None  # sinks="drop": SINK_FACTOR when unset
    entropy: str = "shannon"  # select="entropy": which spatial entropy (ENTROPIES)

    def __post_init__(self) -> None:
        for axis, values in AXES.items():
            if getattr(self, axis) not in values:
                raise VheadsError(f"unknown {axis} {getattr(self, axis)!r} in a score point; choose one of: {', '.join(values)}")
        if self.entropy not in ENTROPIES:
            raise VheadsError(f"unknown entropy {self.entropy!r} in a score point; choose one of: {', '.join(ENTROPIES)}")
        if self.entropy != "shannon" and self.select != "entropy":
            raise VheadsError(f"entropy {self.entropy!r} applies to select 'entropy' only; add select=entropy, or leave entropy out")
        if self.across == "hit-frequency" and self.keys != "hit":
            raise VheadsError(f"across 'hit-frequency' pools hits; it needs keys 'hit', got keys {self.keys!r}")
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1):
            raise VheadsError(f"a score point's k must be an integer of at least 1 (or unset), got {self.k!r}: it would select nothing")
        if self.sinks == "keep":
            given = [n for n in ("sink_layer", "sink_factor") if getattr(self, n) is not None]
            if given:
                raise VheadsError(f"{given[0]} applies to the sink rule only; add sinks=drop, or leave {given[0]} out")
            return
        layer = SINK_LAYER if self.sink_layer is None else self.sink_layer
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise VheadsError(f"sink_layer must be an integer of at least 0 (an index of the hidden states: 0 = the "
                              f"input embeddings, l = the output of decoder layer l-1), got {layer!r}")
        factor = SINK_FACTOR if self.sink_factor is None else self.sink_factor
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 1:
            raise VheadsError(f"sink_factor must be a finite number above 1 (a sink's hidden-state norm exceeds factor x the "
                              f"median image-token norm; at most 1 would drop about half the image), got {factor!r}")
        object.__setattr__(self, "sink_layer", layer)
        object.__setattr__(self, "sink_factor", float(factor))

    @property
    def needs_entropy(self) -> bool:
        return self.select == "entropy"

    @property
    def drops_sinks(self) -> bool:
        return self.sinks == "drop"

    def to_dict(self) -> dict:
        """The point's axes and k; the sink rule's keys only when it drops sinks (so a
        sink-blind point's record is what it was before the rule existed)."""
        d = asdict(self)
        if self.entropy == "shannon":  # the default: a point's record is what it was before the key existed
            d.pop("entropy")
        if not self.drops_sinks:
            for key in ("sinks", "sink_layer", "sink_factor"):
                d.pop(key)
        return d


# --- the registry ---------------------------------------------------------------------

#: name -> factory of a registered score point
SCORES: dict[str, Callable[[], ScorePoint]] = {}


def score(name: str):
    """Register a score point under ``name`` (a decorator on a function that returns it)."""

    def register(fn: Callable[[], ScorePoint]) -> Callable[[], ScorePoint]:
        if name in SCORES:
            raise ValueError(f"score {name!r} is registered twice")
        SCORES[name] = fn
        return fn

    return register


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
    if text in SCORES:
        return SCORES[text]()
    if "=" not in text:
        raise VheadsError(f"unknown score {text!r}; choose a preset ({', '.join(SCORES)}) or write a point like 'rows=out,keys=hit'")
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


# --- per-item statistics (one forward per item, through the engine's capture) ----------


@dataclass
class PointStatistics:
    """What a point reads of each item: ``per_item [N, L, H]`` (``keys`` of the rows, mean
    over rows), ``n_rows [N]`` (|Q_i|), ``entropy [N, L, H]`` (normalized spatial entropy;
    only when the point needs it), ``sinks`` (a point that drops sinks: per item, the
    threshold and the image tokens dropped, :func:`sink_tokens`)."""

    per_item: np.ndarray
    n_rows: np.ndarray
    item_ids: list[str]
    entropy: np.ndarray | None = None
    sinks: list[dict] | None = None


def query_rows(item: Item, layout, rows: str) -> list[int]:
    """The positions of query rows ``rows`` (an :data:`AXES` ``rows`` value) in a prompt."""
    if rows in SOURCE_SPAN:
        pos = list(layout.spans.get(SOURCE_SPAN[rows], []))
    elif rows == "prompt":
        answer = set(layout.spans.get("answer", []))
        pos = [t for t in range(layout.last + 1) if t not in answer]
    else:
        pos = layout.image_positions.tolist()
    if not pos:
        raise VheadsError(f"item {item.id!r}: query rows {rows!r} are empty in its prompt")
    return pos


def sink_tokens(norms: np.ndarray, factor: float) -> tuple[np.ndarray, float]:
    """The sink rule: of an item's image tokens, those with a massive hidden state.

    ``norms [|I|]`` is the L2 norm of each image token's hidden state (at the point's
    ``sink_layer``); a token is a sink when its norm exceeds ``factor × median(norms)``.
    Returns ``(sink [|I|] bool, threshold)``."""
    norms = np.asarray(norms, dtype=float)
    threshold = float(factor * np.median(norms))
    return norms > threshold, threshold


def sink_free_keys(per_key: np.ndarray, region: np.ndarray, sink: np.ndarray, keys: str) -> np.ndarray:
    """A sink-aware point's per-item statistic from its single-key capture: ``per_key [L, H, |I|]``
    (``mass`` or ``hit`` of each image key, the point's norm) summed over ``R' = R \\ S``, the
    region's image keys (``region [|I|]``) that are no sink (``sink [|I|]``); ``mean`` divides by
    ``|R'|`` (0 when every region key is a sink). The norm and the argmax still see every key:
    attention on a sink stays in the denominator, a row whose argmax is a sink is no hit."""
    keep = np.asarray(region, bool) & ~np.asarray(sink, bool)
    got = per_key[..., keep].sum(-1)
    if keys == "mean":
        got = got / keep.sum() if keep.any() else np.zeros_like(got)
    return got


def point_statistics(engine: Engine, items: Sequence[Item], answers: Sequence[str | None], point: ScorePoint) -> PointStatistics:
    """Capture every item's statistics of ``point`` (``answers`` teacher-forced after the
    assistant prefix: the ``out`` rows; None where the point does not read them). A point that
    drops sinks reads, in the same forward, each image key alone (``[L, H, |I|]``) and the
    hidden-state norms at its ``sink_layer``, and sums the keys that are no sink
    (:func:`sink_free_keys`); its spatial entropy leaves the sinks out too."""
    import torch

    from vheads.engine import Capture, positions_mask

    lm = engine.lm
    if point.drops_sinks and point.sink_layer > lm.n_layers:
        raise VheadsError(f"sink_layer {point.sink_layer} is past this model's hidden states: 0 (input embeddings) … "
                          f"{lm.n_layers} (output of its last decoder layer)")
    requests, n_rows, n_region, regions = [], [], [], []
    for item, answer in zip(items, answers):
        if point.region == "target" and (item.target is None or item.target not in item.regions):
            raise VheadsError(f"item {item.id!r} has no target region among its regions {sorted(item.regions)}")
        prompt = lm.adapter.build(item, lm.processor, answer_text=answer)
        lay = prompt.layout
        T = lay.n_tokens
        image = positions_mask(T, lay.image_positions)
        region = positions_mask(T, lay.regions[item.target].positions) if point.region == "target" else image
        if not region.any():
            raise VheadsError(f"item {item.id!r}: region {point.region!r} covers no image token of this model's token grid")
        rows = positions_mask(T, query_rows(item, lay, point.rows))
        norm = image if point.norm == "image" else None
        stat = "hit" if point.keys == "hit" else "mass"
        single = torch.eye(T, dtype=torch.bool)[lay.image_positions]  # [|I|, T]: each image key alone
        caps = [Capture(rows, single, "keys", norm, stat) if point.drops_sinks else Capture(rows, region[None], "score", norm, stat)]
        if point.needs_entropy:
            caps.append(Capture(rows, single, "image", image))
        requests.append((prompt, caps))
        n_rows.append(int(rows.sum()))
        n_region.append(int(region.sum()))
        regions.append(region[lay.image_positions].numpy())  # [|I|]
    caps = engine.capture_prompts(requests, point.sink_layer if point.drops_sinks else None)
    entropy = sinks = None
    if point.drops_sinks:
        sinks, per_item, ents = [], [], []
        for c, (prompt, _), region in zip(caps, requests, regions):
            sink, threshold = sink_tokens(c["hidden_norm"][prompt.layout.image_positions].double().numpy(), point.sink_factor)
            sinks.append({"threshold": threshold, "dropped": np.flatnonzero(sink).tolist()})
            per_item.append(sink_free_keys(c["keys"].double().cpu().numpy(), region, sink, point.keys))
            if point.needs_entropy:
                ents.append(_entropy(point, c["image"].double().cpu().numpy(), prompt.layout, ~sink))
        per_item = np.stack(per_item)  # [N, L, H]
        entropy = np.stack(ents) if point.needs_entropy else None
    else:
        per_item = np.stack([c["score"][:, :, 0].double().cpu().numpy() for c in caps])  # [N, L, H]
        if point.keys == "mean":
            per_item = per_item / np.asarray(n_region, dtype=float)[:, None, None]
        if point.needs_entropy:
            entropy = np.stack([_entropy(point, c["image"].double().cpu().numpy(), prompt.layout)
                                for c, (prompt, _) in zip(caps, requests)])
    return PointStatistics(per_item, np.asarray(n_rows), [it.id for it in items], entropy, sinks)


def _entropy(point: ScorePoint, image_attention: np.ndarray, layout, keep: np.ndarray | None = None) -> np.ndarray:
    """The point's spatial entropy of ``image_attention [L, H, |I|]`` → [L, H]; ``keep [|I|]``:
    the image keys that are no sink (Shannon leaves the others out; the components entropy
    sets them to 0, so the map keeps its place on the image)."""
    if point.entropy == "shannon":
        return spatial_entropy(image_attention if keep is None else image_attention[..., keep])
    from vheads.evaluation import PixelGrid, component_entropy

    a = image_attention if keep is None else np.where(keep, image_attention, 0.0)
    L, H, N = a.shape
    grid = PixelGrid.from_layout(layout)
    return component_entropy(grid.to_pixels(a.reshape(L * H, N)), grid).reshape(L, H)


def spatial_entropy(image_attention: np.ndarray) -> np.ndarray:
    """Normalized Shannon entropy of a head's image attention: ``image_attention [..., |I|]``
    (mean over rows of the attention renormalized over image keys) → ``[...]`` in [0, 1],
    ``-Σ p log p / log |I|`` with ``p`` the input renormalized to sum 1 (0 log 0 = 0); 0 = all
    on one key, 1 = uniform. A head with no image mass gets 1 (no spatial focus)."""
    a = np.asarray(image_attention, dtype=float)
    n = a.shape[-1]
    total = a.sum(-1, keepdims=True)
    p = np.divide(a, total, out=np.full_like(a, 1.0 / n), where=total > 0)
    h = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    return h / np.log(n) if n > 1 else np.zeros_like(h)


# --- aggregation and selection ---------------------------------------------------------


def elbow_count(scores: np.ndarray) -> int:
    """How many heads lie before the elbow of ``scores`` sorted descending.

    With ``v`` the sorted scores (n of them), ``x_i = i/(n-1)`` and ``y_i = (v_i - v_{n-1}) /
    (v_0 - v_{n-1})``, the elbow is ``i* = argmax_i (1 - x_i) - y_i`` (the point farthest
    below the chord from the first to the last point, first on ties); the heads ranked
    0 … i*-1 are kept. 0 when the curve has no elbow (all equal, or never below the chord).
    The scores are SORTED first: cutting the unsorted tensor is the bug of a published code.
    """
    v = np.sort(np.asarray(scores, dtype=float).ravel())[::-1]
    n = len(v)
    if n < 3 or v[0] == v[-1]:
        return 0
    x = np.arange(n) / (n - 1)
    y = (v - v[-1]) / (v[0] - v[-1])
    return int(np.argmax((1 - x) - y))


def _ranked(scores: np.ndarray, heads: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    return sorted(heads, key=lambda lh: (-scores[lh], lh))


def select_point(scores: np.ndarray, point: ScorePoint, k: int, entropy: np.ndarray | None = None,
                 attention_layers: tuple[int, ...] | None = None) -> list[tuple[int, int]]:
    """The heads ``point.select`` keeps of ``scores [L, H]`` (``entropy [L, H]`` for the
    ``entropy`` rule), by descending score, ties by (layer, head); may be empty."""
    L, H = scores.shape
    layers = range(L) if attention_layers is None else attention_layers
    heads = [(l, h) for l in layers for h in range(H)]
    if point.select in ("flat", "per-layer"):
        hs = HeadSet.from_scores(scores, k, per_layer=point.select == "per-layer", attention_layers=attention_layers)
        return _ranked(scores, list(hs))
    ranked = _ranked(scores, heads)
    above = ranked[: elbow_count(np.array([scores[lh] for lh in heads]))]
    if point.select == "elbow":
        return above
    return _ranked(scores, sorted(above, key=lambda lh: (entropy[lh], lh))[:k])


@dataclass
class PointResult:
    """A point's score ``scores [L, H]`` (the across-item aggregate), its head-set ``heads``
    (by descending score, ties by (layer, head)), the k its selection was asked for (scaled
    to the model when the point leaves it unset; unused by ``elbow``) and ``per_item [N, L, H]``,
    each item's share of the score: ``scores`` is its mean over items (``mean``: ``m_i``;
    ``frequency``: 1 where item i's own selection holds the head; ``hit-frequency``:
    ``N·|Q_i|·m_i / Σ_j |Q_j|``), so a half of the items ranks heads as the point would.
    ``sinks``: for a point that drops sinks, its rule and what it dropped (:func:`sink_record`)."""

    point: ScorePoint
    scores: np.ndarray
    heads: list[tuple[int, int]]
    k: int
    per_item: np.ndarray
    sinks: dict | None = None


def sink_record(point: ScorePoint, stats: PointStatistics) -> dict | None:
    """What a sink-aware head-set records of its sink rule (None for a sink-blind point): the
    layer and factor, and per item the threshold (factor × median image-token norm) and the
    image tokens dropped (0-based indices into the item's image tokens, in position order)."""
    if not point.drops_sinks or stats.sinks is None:
        return None
    items = [{"item": iid, **s} for iid, s in zip(stats.item_ids, stats.sinks)]
    return {"layer": point.sink_layer, "factor": point.sink_factor, "rule": "norm > factor x median image-token norm",
            "n_items_with_sinks": sum(bool(s["dropped"]) for s in stats.sinks),
            "n_dropped": sum(len(s["dropped"]) for s in stats.sinks), "items": items}


def aggregate(stats: PointStatistics, point: ScorePoint, n_heads: int, attention_layers: tuple[int, ...],
              n_layers: int) -> PointResult:
    """The point's score over items and its head-set (see the module docstring). A selection
    that keeps no head is a :class:`VheadsError`."""
    per_layer = point.select == "per-layer"
    cap = n_heads if per_layer else len(attention_layers) * n_heads
    k = resolve_k(len(attention_layers), n_heads, None if point.k is None else min(point.k, cap), "per-layer" if per_layer else "flat")
    layers = None if len(attention_layers) == n_layers else tuple(attention_layers)
    if point.across == "mean":
        per_item = stats.per_item
        scores = per_item.mean(0)
    elif point.across == "hit-frequency":
        w = stats.n_rows.astype(float)
        scores = np.tensordot(w, stats.per_item, axes=1) / w.sum()
        per_item = stats.per_item * (len(w) * w / w.sum())[:, None, None]
    else:
        per_item = np.zeros(stats.per_item.shape)
        for i, m in enumerate(stats.per_item):
            for lh in select_point(m, point, k, None if stats.entropy is None else stats.entropy[i], layers):
                per_item[(i, *lh)] = 1.0
        scores = per_item.mean(0)
    if point.across == "frequency":
        final = replace(point, select="flat")
        heads = select_point(scores, final, k, None, layers)
        heads = [lh for lh in heads if scores[lh] > 0]
    else:
        entropy = None if stats.entropy is None else stats.entropy.mean(0)
        heads = select_point(scores, point, k, entropy, layers)
    if not heads:
        raise VheadsError(f"selection {point.select!r} of score point {point.to_dict()} selects no head on these items "
                          "(no elbow in the sorted scores, or no item selects any head); choose select 'flat'")
    return PointResult(point, scores, heads, k, per_item, sink_record(point, stats))


def score_point(lm, items: Sequence[Item], point: ScorePoint, max_new_tokens: int = 4, engine: Engine | None = None) -> tuple[PointResult, PointStatistics]:
    """Score ``items`` under ``point`` and select its head-set: greedy answers first when the
    point reads the ``out`` rows (an empty answer teacher-forces the end-of-turn token, as
    :func:`score_settings` does), then one capture forward per item."""
    from vheads.discovery._scores import _eos_text, greedy_answer
    from vheads.engine import Engine

    if len(items) == 0:
        raise VheadsError("no items to score")
    answers: list[str | None] = [None] * len(items)
    if point.rows == "out":
        answers = [greedy_answer(lm, lm.adapter.build(it, lm.processor), max_new_tokens) or _eos_text(lm) for it in items]
    stats = point_statistics(engine or Engine(lm), items, answers, point)
    return aggregate(stats, point, lm.n_heads, tuple(lm.attention_layers), lm.n_layers), stats
