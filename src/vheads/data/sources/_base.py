"""A class-labelled image source: classes, their display names, and where each image lies.

Every source reads the layout its publisher distributes (see the modules beside this one)
and becomes one :class:`ClassSource`. Nothing is downloaded; images are opened only when
an item uses them, and an image that cannot be opened is an error naming the file (and
row, for a table) — raised while items are built, before any model work.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from PIL import Image

from vheads._io import read_text
from vheads.data._open import open_rgb

MIN_CLASSES = 4  # a four-option question needs four distinct classes (five for a mismatched arm)


@dataclass(frozen=True)
class ImageRef:
    """One image: a file (``row=None``) or row ``row`` of a table file (parquet / arrow)."""

    path: Path
    row: int | None = None

    def where(self) -> str:
        return f"{self.path}" if self.row is None else f"{self.path} row {self.row}"


@dataclass
class ClassSource:
    """Classes (ids in a fixed order), display names, and the images of each class.

    ``spec`` is the source as written (``imagenet:/data/ILSVRC/val``); ``images[c]`` lists
    class ``c``'s images in a fixed (sorted) order, so a seeded draw picks the same files
    on every machine. ``read_bytes`` returns the encoded bytes of a table row's image.
    """

    spec: str
    kind: str
    classes: tuple[str, ...]
    names: dict[str, str]
    images: dict[str, list[ImageRef]]
    read_bytes: Callable[[ImageRef], bytes] | None = field(default=None, repr=False)
    info: dict = field(default_factory=dict)  # layout details for the provenance
    groups: dict[str, str] = field(default_factory=dict)  # class id -> confusable group (see open_source)

    def open(self, ref: ImageRef) -> Image.Image:
        """The image as RGB; an empty or unreadable image is a ValueError naming file and row."""
        return open_rgb(ref.path if ref.row is None else self.read_bytes(ref), f"{self.spec}: {ref.where()}")

    def fingerprint(self) -> str:
        """Hash of the class list and every image's location: two sources with the same
        fingerprint give the same items for the same seed."""
        h = hashlib.sha256()
        for c in self.classes:
            h.update(f"{c}\t{self.names[c]}\n".encode())
            for r in self.images[c]:
                h.update(f"{r.path.name}:{r.row}\n".encode())
        return h.hexdigest()[:16]

    def provenance(self) -> dict:
        return {"source": self.spec, "kind": self.kind, "classes": list(self.classes), **self.info,
                "n_images": sum(len(self.images[c]) for c in self.classes), "fingerprint": self.fingerprint()}


def resolve_classes(spec: str, classes: dict[str, str], wanted: list[str], what: str) -> set[str]:
    """Class ids named in ``wanted`` by id or display name (a name may cover several ids)."""
    by_name: dict[str, list[str]] = {}
    for cid, name in classes.items():
        by_name.setdefault(name, []).append(cid)
    out = set()
    for w in wanted:
        if w in classes:
            out.add(w)
        elif w in by_name:
            out.update(by_name[w])
        else:
            raise ValueError(f"{spec}: {what} names class {w!r}, which the source does not have "
                             f"(give a class id such as {next(iter(classes))!r} or its name)")
    return out


def select_classes(spec: str, classes: dict[str, str], images: dict[str, list[ImageRef]],
                   keep: list[str] | None = None, exclude: list[str] | None = None) -> tuple[str, ...]:
    """The classes an item may use, in sorted order: ``keep`` (ids or names; default all),
    minus ``exclude``, minus classes without images. Fewer than :data:`MIN_CLASSES` is an error."""
    chosen = set(classes) if not keep else resolve_classes(spec, classes, keep, "the class list")
    if exclude:
        chosen -= resolve_classes(spec, classes, exclude, "the exclusion list")
    chosen = {c for c in chosen if images.get(c)}
    if len(chosen) < MIN_CLASSES:
        raise ValueError(f"{spec}: {len(chosen)} usable classes (with images, after the class and exclusion lists); "
                         f"four-option items need at least {MIN_CLASSES}")
    return tuple(sorted(chosen))


def read_list_file(path: str | Path, what: str) -> list[str]:
    """One class id or name per line; blank lines and ``#`` comments are skipped."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} file {str(p)!r} does not exist")
    lines = [ln.split("#", 1)[0].strip() for ln in read_text(p, f"{what} file {str(p)!r}").splitlines()]
    out = [ln for ln in lines if ln]
    if not out:
        raise ValueError(f"{what} file {str(p)!r} lists no classes")
    return out
