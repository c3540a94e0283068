"""The grounding test's geometry: image-token maps on the image's pixels, the box rule, IoU.

Everything here is numpy / scipy on maps already captured; nothing runs a model. Shapes:
``N`` image tokens of one prompt, ``M`` maps (a head-set and its controls, or the heads of a
model), the image cut into ``Ry × Rx`` pixel cells (:class:`PixelGrid`).

**Tokens to pixels** (:class:`PixelGrid`). A prompt's layout gives every image token the pixel
box it covers in the *original* image (``TokenLayout.token_boxes``: tiles and the thumbnail
included, each token in original-image coordinates). Cutting the image at every token border
gives cells that lie wholly inside or wholly outside each token box, so a token map renders
exactly, with no resampling: the density of cell c is

    ``d[c] = Σ_t a[t] · 1[c ⊆ box_t] / area(box_t)``

— token t's value spread evenly over its own box (attention mass per pixel). A pixel that a
tile token and a thumbnail token both cover gets both shares; a cell no token covers (a
crop's border) gets 0. For an untiled grid of equal tokens, ``d`` is the token map itself up
to one constant factor, so the peak and the box rule see the token grid unchanged.

**Pointing**: the peak is the cell of highest density (ties: the first in row-major order); a
map points at the object when the peak cell's centre lies in the ground-truth box
(``x0 ≤ cx < x1`` and ``y0 ≤ cy < y1``). A map with no mass (all zeros) points nowhere.

**The box rule** (:func:`box_rule`, as Localization Heads turn a map into a box): keep the
cells whose density is at least ``threshold × peak``; of their connected components
(``connectivity`` 4 or 8 on the cell grid, :func:`scipy.ndimage.label`) take the largest by
pixel area (ties: the component whose first cell comes first in row-major order); the box is
the smallest (x0, y0, x1, y1) holding its cells. A map with no mass gives no box (NaN, IoU 0).

**Spatial entropy of components** (:func:`component_entropy`, the Localization Heads paper's
head filter): keep the cells above the map's mean density, label their components as above,
and take ``-Σ_i P_i log P_i`` with ``P_i`` the pixel area of component i over the kept area.
0 = one blob; a map with no cell above its mean (uniform, or no mass) gets ``log(n cells)``,
the most a map of that grid can have (no spatial focus).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage, sparse

#: connectivities of the box rule and the component entropy (neighbours of a cell)
CONNECTIVITIES = (4, 8)


def _structure(connectivity: int) -> np.ndarray:
    """A 3-D ``ndimage.label`` structure that links cells of one map only (never across maps)."""
    if connectivity not in CONNECTIVITIES:
        raise ValueError(f"connectivity must be 4 or 8 (a cell's neighbours on the grid), got {connectivity!r}")
    s = np.zeros((3, 3, 3), dtype=bool)
    s[1] = ndimage.generate_binary_structure(2, 1 if connectivity == 4 else 2)
    return s


@dataclass
class PixelGrid:
    """The image cut at every token border: ``xs [Rx+1]``, ``ys [Ry+1]`` pixel edges (0 … width,
    0 … height), ``render [N, Ry·Rx]`` (sparse) with ``render[t, c] = 1[c ⊆ box_t] / area(box_t)``."""

    xs: np.ndarray
    ys: np.ndarray
    render: sparse.csr_matrix
    image_size: tuple[int, int]

    @classmethod
    def from_boxes(cls, token_boxes, image_size: tuple[int, int], decimals: int = 4) -> PixelGrid:
        """The grid of ``token_boxes [N, 4]`` (x0, y0, x1, y1 in original-image pixels, as
        ``TokenLayout.token_boxes``) on an image of ``image_size`` (width, height). Edges are
        rounded to ``decimals`` places first (a tile border computed two ways must not leave a
        sliver cell) and clipped to the image; a token's area is that of its whole box."""
        b = np.asarray(token_boxes, dtype=float)
        if b.ndim != 2 or b.shape[1] != 4 or len(b) == 0:
            raise ValueError(f"token boxes must be [N, 4] with N ≥ 1 (x0, y0, x1, y1), got shape {b.shape}")
        w, h = image_size
        area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])  # of the boxes as given
        b = np.round(b, decimals)
        xs = np.unique(np.clip(np.concatenate([b[:, 0], b[:, 2], [0.0, float(w)]]), 0, w))
        ys = np.unique(np.clip(np.concatenate([b[:, 1], b[:, 3], [0.0, float(h)]]), 0, h))
        cx, cy = (xs[:-1] + xs[1:]) / 2, (ys[:-1] + ys[1:]) / 2  # cell centres decide "inside"
        if (area <= 0).any():
            t = int(np.flatnonzero(area <= 0)[0])
            raise ValueError(f"image token {t} has an empty box {b[t].tolist()}; the layout's token boxes are wrong")
        rows, cols, vals = [], [], []
        for t, (x0, y0, x1, y1) in enumerate(b):
            jx = np.flatnonzero((cx > x0) & (cx < x1))
            iy = np.flatnonzero((cy > y0) & (cy < y1))
            cells = (iy[:, None] * len(cx) + jx[None, :]).ravel()
            rows.append(np.full(len(cells), t))
            cols.append(cells)
            vals.append(np.full(len(cells), 1.0 / area[t]))
        render = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                                   shape=(len(b), len(cy) * len(cx)))
        return cls(xs, ys, render, (int(w), int(h)))

    @classmethod
    def from_layout(cls, layout) -> PixelGrid:
        """The grid of a prompt's :class:`vheads.models.TokenLayout` (its token boxes and image size)."""
        return cls.from_boxes(layout.token_boxes.double().numpy(), layout.image_size)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.ys) - 1, len(self.xs) - 1

    @property
    def cell_area(self) -> np.ndarray:
        """Pixel area of every cell: [Ry, Rx]."""
        return np.outer(np.diff(self.ys), np.diff(self.xs))

    def to_pixels(self, token_maps) -> np.ndarray:
        """Density maps of ``token_maps [M, N]`` (one value per image token): [M, Ry, Rx]."""
        a = np.atleast_2d(np.asarray(token_maps, dtype=float))
        if a.shape[1] != self.render.shape[0]:
            raise ValueError(f"token maps have {a.shape[1]} values; this image has {self.render.shape[0]} image tokens")
        return np.asarray(self.render.T.dot(a.T).T).reshape(len(a), *self.shape)

    def image(self, density: np.ndarray, width: int | None = None) -> np.ndarray:
        """One density map ``[Ry, Rx]`` resampled onto a pixel raster of the image (width
        ``width``, default the image's; height in proportion): [h, w], for figures."""
        w0, h0 = self.image_size
        width = width or w0
        height = max(1, round(h0 * width / w0))
        px = (np.arange(width) + 0.5) * w0 / width
        py = (np.arange(height) + 0.5) * h0 / height
        jx = np.clip(np.searchsorted(self.xs, px, side="right") - 1, 0, self.shape[1] - 1)
        iy = np.clip(np.searchsorted(self.ys, py, side="right") - 1, 0, self.shape[0] - 1)
        return np.asarray(density)[iy[:, None], jx[None, :]]


def peak_points(density: np.ndarray, grid: PixelGrid) -> tuple[np.ndarray, np.ndarray]:
    """The peak cell's centre of each map ``density [M, Ry, Rx]`` (first maximum in row-major
    order): ``(points [M, 2] (x, y), has_mass [M] bool)``; a map with no mass has NaN."""
    d = np.asarray(density, dtype=float)
    M = len(d)
    flat = d.reshape(M, -1).argmax(1)
    iy, jx = np.divmod(flat, grid.shape[1])
    pts = np.stack([(grid.xs[jx] + grid.xs[jx + 1]) / 2, (grid.ys[iy] + grid.ys[iy + 1]) / 2], 1)
    has = d.reshape(M, -1).max(1) > 0
    pts[~has] = np.nan
    return pts, has


def pointing_hits(density: np.ndarray, grid: PixelGrid, box) -> np.ndarray:
    """1 where the peak of ``density [M, Ry, Rx]`` lies in ``box`` (x0, y0, x1, y1; half-open),
    else 0: [M] float."""
    pts, has = peak_points(density, grid)
    x0, y0, x1, y1 = box
    with np.errstate(invalid="ignore"):
        inside = (pts[:, 0] >= x0) & (pts[:, 0] < x1) & (pts[:, 1] >= y0) & (pts[:, 1] < y1)
    return (inside & has).astype(float)


def _components(keep: np.ndarray, connectivity: int, cell_area: np.ndarray):
    """Label the kept cells of each map (``keep [M, Ry, Rx]``, components never span maps):
    ``(labels [M, Ry, Rx], n, area [n + 1], owner [n + 1])`` — label 0 is the background,
    ``owner[i]`` the map of component i (−1 for the background)."""
    labels, n = ndimage.label(keep, structure=_structure(connectivity))
    M = len(keep)
    ca = np.asarray(cell_area, dtype=float)
    if np.all(ca == ca.flat[0]):  # equal cells (an untiled grid): count them
        area = np.bincount(labels.ravel(), minlength=n + 1) * ca.flat[0]
    else:
        area = np.bincount(labels.ravel(), weights=np.broadcast_to(ca, keep.shape).ravel(), minlength=n + 1)
    # labels run in row-major order of each component's first cell, and no component spans two
    # maps: map m holds the labels up to the running maximum of its last label
    last = np.maximum.accumulate(labels.reshape(M, -1).max(1)) if M else np.zeros(0, dtype=int)
    owner = np.full(n + 1, -1)
    owner[1:] = np.searchsorted(last, np.arange(1, n + 1), side="left")
    return labels, n, area, owner


def box_rule(density: np.ndarray, grid: PixelGrid, threshold: float = 0.5, connectivity: int = 8) -> np.ndarray:
    """The box of each map ``density [M, Ry, Rx]`` (module docstring): cells at least
    ``threshold × peak``, the largest connected component by pixel area, its bounding box.
    Returns [M, 4] (x0, y0, x1, y1) pixels; NaN for a map with no mass."""
    if not (0 < threshold <= 1):
        raise ValueError(f"the box rule's threshold is a fraction of the peak in (0, 1], got {threshold!r}")
    d = np.asarray(density, dtype=float)
    M = len(d)
    peak = d.reshape(M, -1).max(1)
    keep = (d >= threshold * peak[:, None, None]) & (peak[:, None, None] > 0)
    labels, n, area, owner = _components(keep, connectivity, grid.cell_area)
    boxes = np.full((M, 4), np.nan)
    if n == 0:
        return boxes
    ids = np.arange(1, n + 1)  # labels follow row-major order of each component's first cell
    order = np.lexsort((ids, -area[1:], owner[1:]))  # by map, then largest area, then first label
    first = np.r_[True, owner[1:][order][1:] != owner[1:][order][:-1]]
    best = np.zeros(M, dtype=int)
    best[owner[1:][order][first]] = ids[order][first]
    mask = labels == best[:, None, None]
    mask &= best[:, None, None] > 0
    # the bounding box from the mask's column and row projections (the edges increase)
    cols, rows = mask.any(1), mask.any(2)  # [M, Rx], [M, Ry]
    has = cols.any(1)
    jx0, jx1 = cols.argmax(1), cols.shape[1] - cols[:, ::-1].argmax(1)  # first column, one past the last
    iy0, iy1 = rows.argmax(1), rows.shape[1] - rows[:, ::-1].argmax(1)
    boxes[has] = np.stack([grid.xs[jx0], grid.ys[iy0], grid.xs[jx1], grid.ys[iy1]], 1)[has]
    return boxes


def box_iou(boxes, box) -> np.ndarray:
    """Intersection over union of each of ``boxes [M, 4]`` with ``box`` (x0, y0, x1, y1): [M];
    0 for a NaN box."""
    b = np.atleast_2d(np.asarray(boxes, dtype=float))
    x0, y0, x1, y1 = (float(v) for v in box)
    iw = np.clip(np.minimum(b[:, 2], x1) - np.maximum(b[:, 0], x0), 0, None)
    ih = np.clip(np.minimum(b[:, 3], y1) - np.maximum(b[:, 1], y0), 0, None)
    inter = iw * ih
    union = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) + (x1 - x0) * (y1 - y0) - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = inter / union
    return np.nan_to_num(iou, nan=0.0)


def component_entropy(density: np.ndarray, grid: PixelGrid, connectivity: int = 8) -> np.ndarray:
    """Spatial entropy of the connected components of each map ``density [M, Ry, Rx]``
    thresholded at its mean (module docstring): [M], natural log."""
    d = np.asarray(density, dtype=float)
    M = len(d)
    mean = (d * grid.cell_area).reshape(M, -1).sum(1) / grid.cell_area.sum()  # the area-weighted mean density
    keep = d > mean[:, None, None]
    labels, n, area, owner = _components(keep, connectivity, grid.cell_area)
    out = np.full(M, np.log(grid.cell_area.size))
    if n == 0:
        return out
    total = np.bincount(owner[1:], weights=area[1:], minlength=M)  # [M] kept area per map
    p = area[1:] / total[owner[1:]]
    h = np.bincount(owner[1:], weights=-p * np.log(p), minlength=M)
    has = total > 0
    out[has] = h[has]
    return out
