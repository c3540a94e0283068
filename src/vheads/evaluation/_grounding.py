"""The grounding test: do a head-set's attention maps point at the referred object?

For an item (an image, a referring expression, the object's ground-truth box) and a head-set
S, with ``A[l,h][q,t]`` post-softmax attention, ``Q`` the chosen query rows and ``I`` the
image keys (the image-pad tokens only):

1. **Maps.** One capture forward per item reads every head's map onto every image token,
   ``a[l,h][t] = mean_{q∈Q} A'[l,h][q,t]`` for ``t ∈ I`` — ``[L, H, |I|]``, never a full
   attention map. ``rows``: ``last`` (the last prompt token, as Localization Heads),
   ``qspan`` (the tokens of the referring expression) or ``out`` (the model's own answer,
   teacher-forced; given to :func:`capture_maps` — the evaluate and study commands read
   ``last`` or ``qspan``).
2. **Aggregation over S** (:data:`AGGREGATIONS`): ``mean-norm`` (default) — each head's map
   renormalised over the image keys per row (``A'[q,t] = A[q,t] / Σ_{u∈I} A[q,u]``), then
   the mean over S's heads, so every head weighs the same whatever its image mass;
   ``mean-raw`` — the mean of the raw maps (``A' = A``), so heads that look at the image
   more weigh more.
3. **Pixels**: the aggregated token map rendered through the prompt's exact token borders
   (tiles and thumbnail included) — :class:`vheads.evaluation._boxes.PixelGrid`.
4. **Outcomes** per item: ``point`` (1 if the peak lies in the box), ``iou`` (IoU of the box
   rule's box with the ground truth: threshold ``threshold × peak``, largest connected
   component under ``connectivity``) and ``acc50`` (``iou ≥ 0.5``) —
   :mod:`vheads.evaluation._boxes` has every rule.

The controls cost no forward: they are other subsets of the same captured ``[L, H, |I|]``
maps, so S and R controls take one capture per item whatever R is (only the map
arithmetic grows with R, as sparse matrix products and one vectorised labelling).

The ground truth is ``item.meta["box"]`` when an item carries one (float x0, y0, x1, y1,
as the RefCOCO readers store), else its target region's box (the synthetic grid items: the
referred cell).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from vheads._errors import VheadsError
from vheads.data import Item
from vheads.evaluation._boxes import CONNECTIVITIES, PixelGrid, box_iou, box_rule, pointing_hits
from vheads._headset import HeadSet

#: how a head-set's maps become one map (module docstring)
AGGREGATIONS = ("mean-norm", "mean-raw")
#: the query rows a grounding map is read from
GROUNDING_ROWS = ("last", "qspan", "out")
#: the grounding test's outcomes: ``values`` holds ``point``, ``detail`` all three
GROUNDING_MEASURES = ("point", "iou", "acc50")
#: the box rule's defaults: half the peak, 8-connected components
BOX_THRESHOLD, BOX_CONNECTIVITY = 0.5, 8


@dataclass(frozen=True)
class GroundingRule:
    """The keys of a grounding test: query ``rows``, the ``aggregation`` over heads, the box
    rule's ``threshold`` (a fraction of the peak) and ``connectivity``. Bad values are
    refused on creation, each naming the key."""

    rows: str = "last"
    aggregation: str = "mean-norm"
    threshold: float = BOX_THRESHOLD
    connectivity: int = BOX_CONNECTIVITY

    def __post_init__(self) -> None:
        if self.rows not in GROUNDING_ROWS:
            raise VheadsError(f"grounding rows {self.rows!r}: choose one of {', '.join(GROUNDING_ROWS)}")
        if self.aggregation not in AGGREGATIONS:
            raise VheadsError(f"grounding aggregation {self.aggregation!r}: choose one of {', '.join(AGGREGATIONS)}")
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) or not 0 < self.threshold <= 1:
            raise VheadsError(f"grounding threshold {self.threshold!r}: the box rule keeps cells at least threshold x the "
                              "peak; give a fraction in (0, 1]")
        if self.connectivity not in CONNECTIVITIES:
            raise VheadsError(f"grounding connectivity {self.connectivity!r}: choose 4 or 8 (a cell's neighbours)")


def truth_box(item: Item) -> tuple[float, float, float, float]:
    """The item's ground-truth box (x0, y0, x1, y1 pixels): ``meta["box"]``, else its target region."""
    if "box" in item.meta:
        return tuple(float(v) for v in item.meta["box"])
    if item.target is None or item.target not in item.regions:
        raise VheadsError(f"item {item.id!r} has no ground-truth box: no meta['box'] and no target region among "
                          f"{sorted(item.regions)}; grounding needs the referred object's box")
    return tuple(float(v) for v in item.regions[item.target])


def membership(headsets: Sequence[HeadSet], n_layers: int, n_heads: int) -> sparse.csr_matrix:
    """``W [M, L·H]`` with ``W[m, l·H + h] = 1/|S_m|`` for (l, h) in head-set m: ``W @ maps``
    is each head-set's mean map."""
    sizes = np.fromiter((len(S.heads) for S in headsets), dtype=np.int64, count=len(headsets))
    if (sizes == 0).any():
        raise VheadsError(f"head-set {int(np.flatnonzero(sizes == 0)[0])} is empty; a grounding map needs at least one head")
    lh = np.array([h for S in headsets for h in S.heads], dtype=np.int64).reshape(-1, 2)
    rows = np.repeat(np.arange(len(headsets)), sizes)
    return sparse.csr_matrix((np.repeat(1.0 / sizes, sizes), (rows, lh[:, 0] * n_heads + lh[:, 1])),
                             shape=(len(headsets), n_layers * n_heads))


def aggregate_maps(maps: np.ndarray, headsets: Sequence[HeadSet] | sparse.csr_matrix) -> np.ndarray:
    """Each head-set's mean of ``maps [L, H, N]`` over its heads: [M, N]. (The maps are
    already per-head normalised for ``mean-norm``: the capture renormalises each row.)
    ``headsets`` may be their :func:`membership` matrix, built once for many items."""
    L, H, N = maps.shape
    W = headsets if sparse.issparse(headsets) else membership(headsets, L, H)
    return np.asarray(W.dot(maps.reshape(L * H, N)))


def ground_maps(token_maps: np.ndarray, grid: PixelGrid, box, rule: GroundingRule = GroundingRule()) -> dict[str, np.ndarray]:
    """The outcomes of aggregated token maps ``[M, N]`` against ``box``: ``{point, iou, acc50}``
    each [M], and ``box`` [M, 4] (the box rule's boxes)."""
    return ground_density(grid.to_pixels(token_maps), grid, box, rule)  # [M, Ry, Rx]


def ground_density(density: np.ndarray, grid: PixelGrid, box, rule: GroundingRule = GroundingRule()) -> dict[str, np.ndarray]:
    """:func:`ground_maps` of maps already on the pixel cells, ``density [M, Ry, Rx]``."""
    boxes = box_rule(density, grid, rule.threshold, rule.connectivity)
    iou = box_iou(boxes, box)
    return {"point": pointing_hits(density, grid, box), "iou": iou, "acc50": (iou >= 0.5).astype(float), "box": boxes}


def _rows_of(item: Item, layout, rows: str) -> list[int]:
    span = {"last": "last", "qspan": "query", "out": "answer"}[rows]
    pos = list(layout.spans.get(span, []))
    if not pos:
        raise VheadsError(f"item {item.id!r}: grounding rows {rows!r} are empty in its prompt"
                          + (" (the item has no query span: give the referring expression's characters)" if rows == "qspan" else ""))
    return pos


def capture_maps(engine, items: Sequence[Item], rule: GroundingRule = GroundingRule(), answers: Sequence[str] | None = None):
    """One capture forward per item (prompts share forwards within the engine's batching):
    per item ``(maps [L, H, |I|] float64, PixelGrid)``. ``rows="out"`` reads the rows of
    ``answers`` (one text per item, teacher-forced after the assistant prefix: the model's own
    answers, e.g. from :func:`vheads.discovery.greedy_answer`); the evaluation and study
    commands ground from ``last`` or ``qspan`` rows."""
    import torch

    from vheads.engine import positions_mask

    lm = engine.lm
    if rule.rows == "out":
        if answers is None or len(answers) != len(items):
            raise VheadsError("grounding rows 'out' read the model's own answer tokens: pass one answer text per item "
                              "(vheads.discovery.greedy_answer gives them), or choose rows 'last' or 'qspan'")
    else:
        answers = [None] * len(items)
    requests, grids = [], []
    from vheads.engine import Capture

    for item, answer in zip(items, answers):
        if item.image is None:
            raise VheadsError(f"item {item.id!r} has no image; grounding needs one")
        pr = lm.adapter.build(item, lm.processor, answer_text=answer)
        lay = pr.layout
        T = lay.n_tokens
        single = torch.eye(T, dtype=torch.bool)[lay.image_positions]  # [|I|, T]: each image key alone
        norm = positions_mask(T, lay.image_positions) if rule.aggregation == "mean-norm" else None
        requests.append((pr, [Capture(positions_mask(T, _rows_of(item, lay, rule.rows)), single, "map", norm)]))
        grids.append(PixelGrid.from_layout(lay))
    caps = engine.capture_prompts(requests)
    return [(c["map"].double().cpu().numpy(), g) for c, g in zip(caps, grids)]


def grounding(engine, items: Sequence[Item], headsets: Sequence[HeadSet], rule: GroundingRule = GroundingRule(),
              captured=None, keep_maps: int = 0):
    """The grounding test of ``headsets`` (S first, then its controls) on ``items``.

    Returns :class:`vheads.evaluation.Outcomes` of test ``grounding``: ``values [M, n]`` the
    pointing hits, ``detail`` ``point``, ``iou``, ``acc50`` ([M, n] each) and ``box`` ([M, n, 4]);
    ``detail["maps"]`` holds head-set 0's pixel density and grid of the first ``keep_maps``
    items (for figures). ``captured``: :func:`capture_maps` of these items, when already read.
    """
    from vheads.evaluation._metrics import Outcomes

    if not items:
        raise VheadsError("grounding: the evaluation set is empty")
    boxes = [truth_box(it) for it in items]
    captured = captured if captured is not None else capture_maps(engine, items, rule)
    M, n = len(headsets), len(items)
    out = {k: np.zeros((M, n)) for k in GROUNDING_MEASURES}
    out["box"] = np.zeros((M, n, 4))
    shown = []
    # once for every item, dense: a BLAS product beats the sparse one at these sizes (same sums)
    W = membership(headsets, *captured[0][0].shape[:2]).toarray() if captured else None
    for i, ((maps, grid), box) in enumerate(zip(captured, boxes)):
        # the heads' maps on the pixel cells first (L·H maps, not M), then each head-set's mean:
        # the same density as aggregating over tokens first (both steps are linear)
        L, H, N = maps.shape
        px = np.ascontiguousarray(grid.to_pixels(maps.reshape(L * H, N)).reshape(L * H, -1))  # [L·H, Ry·Rx]
        density = (W @ px).reshape(M, *grid.shape)
        res = ground_density(density, grid, box, rule)
        for k in (*GROUNDING_MEASURES, "box"):
            out[k][:, i] = res[k]
        if i < keep_maps:
            shown.append({"item": items[i].id, "density": density[0], "grid": grid, "truth": box, "box": res["box"][0]})
    detail = dict(out)
    if shown:
        detail["maps"] = shown
    return Outcomes("grounding", out["point"], [it.id for it in items], detail)
