"""The unit of every corpus: one image (or none), its regions, one question and its key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from PIL import Image

Box = tuple[int, int, int, int]  # (x0, y0, x1, y1) in pixels, x1/y1 exclusive
OPTION_LETTERS = ("A", "B", "C", "D")


@dataclass
class Item:
    """One prompt's worth of content, independent of any model.

    ``kind`` names the question kind (``strip-ordinal``, ``strip-referring``, ``grid-neutral``,
    ``grid-oracle``, ``class-matched``, ``class-mismatched``, ``text``, ...).
    ``regions`` maps a region name (``panel1`` … ``panel6``, ``cell0`` … ``cell3``) to its
    pixel box. ``target`` is the region the question is about. ``query_span`` is the
    character span of ``question`` that names the region ("panel 3", "the dog").
    ``options`` are the four option texts for lettered questions (``answer`` is then a
    letter); free-text questions have ``options=None`` and a word ``answer``.
    """

    id: str
    kind: str
    image: Image.Image | None
    question: str
    answer: str
    regions: dict[str, Box] = field(default_factory=dict)
    target: str | None = None
    options: tuple[str, ...] | None = None
    query_span: tuple[int, int] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.query_span is not None:
            a, b = self.query_span
            if not (0 <= a < b <= len(self.question)):
                raise ValueError(
                    f"item {self.id!r}: query_span {self.query_span} does not lie inside the "
                    f"question of {len(self.question)} characters"
                )
        if self.options is not None and self.answer not in OPTION_LETTERS[: len(self.options)]:
            raise ValueError(f"item {self.id!r}: answer {self.answer!r} is not an option letter")
        if self.image is not None:
            w, h = self.image.size
            for name, (x0, y0, x1, y1) in self.regions.items():
                if not (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h):
                    raise ValueError(
                        f"item {self.id!r}: region {name!r} box {(x0, y0, x1, y1)} lies outside "
                        f"the {w}x{h} image"
                    )
