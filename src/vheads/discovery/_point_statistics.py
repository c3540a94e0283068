"""What a score point reads of each item, one capture forward per item through the engine: the
query rows, the per-item statistic ``m_i[l,h]`` of the point's keys, the sink rule (image tokens
with a massive hidden state leave the region) and the spatial entropy of a head's image attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vheads._errors import VheadsError
from vheads.data import Item
from vheads.discovery._score_point import ScorePoint
from vheads.discovery._source_setting import SOURCE_SPAN

if TYPE_CHECKING:  # torch loads only where a point is scored: a config check reads this module
    from vheads.engine import Engine


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
