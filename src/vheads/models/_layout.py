"""Token layout of one prompt: where every image token sits on the image, where every span is."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from vheads.data import Box, Item


@dataclass
class RegionTokens:
    """The image tokens a pixel box selects.

    ``positions`` are the token positions whose area lies at least ``min_cover`` inside the
    box; ``coverage`` is each selected token's covered fraction; ``partial`` lists the
    selected positions the box covers only in part (0 < coverage < 1).
    """

    positions: torch.Tensor  # [n] long
    coverage: torch.Tensor  # [n] float
    partial: list[int]


@dataclass
class TokenLayout:
    """Where things are in one tokenized prompt.

    ``image_positions[i]`` is the sequence position of image token i (the image-pad tokens
    only: row breaks, tile markers and newline embeddings count as text); ``image_tile[i]``
    the view it belongs to (a tile or the thumbnail, named in ``tiles``; one view for
    untiled families); ``image_rc[i]`` its (row, col) on that view's token grid (``grid``
    is the first view's grid); ``token_boxes[i]`` the pixel box it covers in the
    *original* image's coordinates (x0, y0, x1, y1, floats), whatever its view. ``spans``
    maps ``question``, ``options``, ``query``, ``answer`` (teacher-forced answer tokens,
    when given) and ``last`` (the last prompt token) to lists of positions.
    ``vision_end`` is one past the image block: the positions whose embeddings come from
    the vision side (a trailing newline slot, Ovis2's indicator tokens) all lie before it.
    """

    n_tokens: int
    image_positions: torch.Tensor  # [N_img] long
    image_rc: torch.Tensor  # [N_img, 2] long
    grid: tuple[int, int]
    token_boxes: torch.Tensor  # [N_img, 4] float
    image_size: tuple[int, int]  # (width, height) of the original image
    spans: dict[str, list[int]] = field(default_factory=dict)
    regions: dict[str, RegionTokens] = field(default_factory=dict)
    image_tile: torch.Tensor | None = None  # [N_img] long; None: every token in view 0
    tiles: list[str] = field(default_factory=lambda: ["image"])
    vision_end: int | None = None

    def __post_init__(self):
        if self.image_tile is None:
            self.image_tile = torch.zeros(len(self.image_positions), dtype=torch.long)
        if self.vision_end is None:
            self.vision_end = int(self.image_positions.max()) + 1 if len(self.image_positions) else 0

    @property
    def last(self) -> int:
        return self.spans["last"][0]

    def region_tokens(self, box: Box, min_cover: float = 0.5) -> RegionTokens:
        """Image-token positions under ``box`` (pixels of the original image), in every view.

        A token is selected when ``cover = area(token box ∩ box) / area(token box) ≥
        min_cover``; with tiling the box selects tokens in each tile it overlaps and in the
        thumbnail, since every token box is in original-image coordinates.
        """
        w, h = self.image_size
        x0, y0, x1, y1 = box
        if not (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h):
            raise ValueError(f"region box {box} lies outside the {w}x{h} image; boxes are (x0, y0, x1, y1) pixels")
        tb = self.token_boxes  # [N, 4]
        ix = (torch.minimum(tb[:, 2], torch.tensor(float(x1))) - torch.maximum(tb[:, 0], torch.tensor(float(x0)))).clamp(min=0)
        iy = (torch.minimum(tb[:, 3], torch.tensor(float(y1))) - torch.maximum(tb[:, 1], torch.tensor(float(y0)))).clamp(min=0)
        area = (tb[:, 2] - tb[:, 0]) * (tb[:, 3] - tb[:, 1])
        cover = ix * iy / area  # [N]
        keep = cover >= min_cover - 1e-9
        pos = self.image_positions[keep]
        cov = cover[keep]
        partial = [int(p) for p, c in zip(pos, cov) if c < 1 - 1e-6]
        return RegionTokens(positions=pos, coverage=cov, partial=partial)

    def text_positions(self) -> torch.Tensor:
        """All positions that are not image tokens."""
        is_img = torch.zeros(self.n_tokens, dtype=torch.bool)
        is_img[self.image_positions] = True
        return (~is_img).nonzero().flatten()


@dataclass
class ImageBlock:
    """What one image becomes in a prompt: its pixel inputs and its run of tokens.

    ``text`` is the block between the adapter's ``image_prefix`` and ``image_suffix``:
    image tokens interleaved with whatever the family puts between them (row breaks, tile
    markers). The k-th occurrence of the image token in ``text`` is a pixel token when
    ``is_pixel[k]`` (None: all are); a family whose newline embeddings take an image-token
    slot (LLaVA-NeXT) marks those slots False, so they count as text. ``boxes``, ``rc`` and
    ``tile`` describe the pixel tokens in order: box in original-image pixels [N, 4], (row,
    col) on its view's grid [N, 2], view index [N] into ``tiles`` (view names).
    """

    pixel_inputs: dict[str, torch.Tensor]
    text: str
    boxes: torch.Tensor  # [N, 4] float
    rc: torch.Tensor  # [N, 2] long
    tile: torch.Tensor  # [N] long
    tiles: list[str]
    grid: tuple[int, int]
    is_pixel: torch.Tensor | None = None  # [M] bool over image-token occurrences in text

    @classmethod
    def single_grid(cls, pixel_inputs: dict[str, torch.Tensor], image_token: str, rows: int, cols: int, boxes: torch.Tensor) -> "ImageBlock":
        """One rows x cols grid of image tokens, row-major, nothing between them."""
        return cls(pixel_inputs, image_token * (rows * cols), boxes, grid_rc(rows, cols),
                   torch.zeros(rows * cols, dtype=torch.long), ["image"], (rows, cols))


@dataclass
class Prompt:
    """A tokenized prompt ready for the model (batch of one) with its layout and item."""

    item: Item
    inputs: dict[str, torch.Tensor]
    layout: TokenLayout
    text: str
    #: the full prompt's position ids, filled by the engine on first use (None: not yet, or
    #: plain 1-D positions); a prompt is run many times, one head-set batch after another
    position_ids: torch.Tensor | None = field(default=None, repr=False)
    _positions_known: bool = field(default=False, repr=False)
    #: a digest of the pixel inputs, filled by the engine on first use (:mod:`vheads.engine._vision_cache`)
    _pixel_key: bytes | None = field(default=None, repr=False, compare=False)


def char_span_to_positions(offsets: list[tuple[int, int]], start: int, end: int) -> list[int]:
    """Token positions whose character range overlaps [start, end)."""
    return [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]


def grid_rc(rows: int, cols: int) -> torch.Tensor:
    """(row, col) of each token of a rows x cols grid, row-major: [rows*cols, 2] long."""
    return torch.stack([torch.arange(rows).repeat_interleave(cols), torch.arange(cols).repeat(rows)], 1)


def grid_token_boxes(rows: int, cols: int, scale_x: float, scale_y: float, off_x: float = 0.0, off_y: float = 0.0) -> torch.Tensor:
    """Pixel boxes (original image coordinates) of a rows x cols token grid, row-major.

    A token (r, c) covers processed-image pixels [c, c+1) x [r, r+1) in token units; ``scale``
    converts one token to original pixels and ``off`` is where processed pixel 0 sits in the
    original image (a centre crop shifts it).
    """
    r = torch.arange(rows).repeat_interleave(cols).float()
    c = torch.arange(cols).repeat(rows).float()
    return torch.stack([off_x + c * scale_x, off_y + r * scale_y, off_x + (c + 1) * scale_x, off_y + (r + 1) * scale_y], dim=1)


def tiled_views(width: int, height: int, cols: int, rows: int, thumbnail: bool = True) -> tuple[list[tuple[float, float, float, float]], list[str]]:
    """Boxes (original pixels) and names of a cols x rows tiling, tiles row-major, then the
    thumbnail (the whole image) when ``thumbnail``; a single view when cols = rows = 1."""
    if cols * rows == 1:
        return [(0.0, 0.0, float(width), float(height))], ["image"]
    tw, th = width / cols, height / rows
    boxes = [(c * tw, r * th, (c + 1) * tw, (r + 1) * th) for r in range(rows) for c in range(cols)]
    names = [f"tile r{r}c{c}" for r in range(rows) for c in range(cols)]
    if thumbnail:
        boxes.append((0.0, 0.0, float(width), float(height)))
        names.append("thumbnail")
    return boxes, names


def views_token_grid(views: list[tuple[float, float, float, float]], rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token boxes [V·rows·cols, 4], (row, col) [.., 2] and view index [..] of ``views``, each
    covered by a rows x cols token grid (row-major), views in order."""
    boxes, rc, tile = [], [], []
    for v, (x0, y0, x1, y1) in enumerate(views):
        boxes.append(grid_token_boxes(rows, cols, (x1 - x0) / cols, (y1 - y0) / rows, x0, y0))
        rc.append(grid_rc(rows, cols))
        tile.append(torch.full((rows * cols,), v, dtype=torch.long))
    return torch.cat(boxes), torch.cat(rc), torch.cat(tile)
