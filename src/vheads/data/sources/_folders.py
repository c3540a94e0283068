"""Folder sources: ``imagenet:DIR`` (ILSVRC layout) and ``imagefolder:DIR`` (one folder per class).

**ILSVRC** — ``DIR/<wnid>/*.JPEG`` as in ``ILSVRC/Data/CLS-LOC/train`` (the val split
sorted into wnid folders works the same). Class names come from
``LOC_synset_mapping.txt`` (``n01440764 tench, Tinca tinca`` per line: the display name is
the first comma-separated synonym, "tench"), looked up in ``DIR`` and up to four folders
above it; without it the wnid is the name. Folders that are not wnids (``n`` + 8 digits)
are ignored.

**Image folder** — ``DIR/<class>/*.{jpg,jpeg,png,bmp,gif,webp,tif,tiff}``: the folder name
is the class id, the display name is the folder name with ``_`` read as a space.
"""

from __future__ import annotations

import re
from pathlib import Path

from vheads._errors import inside_data_folder, plain_text
from vheads._io import read_text
from vheads.data.sources._base import ClassSource, ImageRef

WNID = re.compile(r"^n\d{8}$")
SYNSET_MAPPING = "LOC_synset_mapping.txt"
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


def _image_files(spec: str, root: Path, folder: Path, suffixes: set[str]) -> list[ImageRef]:
    """The image files of one class folder, sorted; one reached through a symlink that leaves
    ``root`` is refused."""
    files = [p for p in sorted(folder.iterdir()) if p.is_file() and p.suffix.lower() in suffixes and not p.name.startswith(".")]
    return [ImageRef(inside_data_folder(root, p, spec)) for p in files]


def _check_folder(spec: str, root: Path) -> None:
    if not root.is_dir():
        raise FileNotFoundError(f"{spec}: folder {root} does not exist")


def find_synset_mapping(root: Path) -> Path | None:
    """``LOC_synset_mapping.txt`` in ``root`` or up to four folders above it."""
    for d in [root, *list(root.resolve().parents)[:4]]:
        if (d / SYNSET_MAPPING).is_file():
            return d / SYNSET_MAPPING
    return None


def read_synset_mapping(path: Path) -> dict[str, str]:
    """wnid -> display name (the first synonym) from an ILSVRC ``LOC_synset_mapping.txt``."""
    names = {}
    for i, line in enumerate(read_text(path, f"synset mapping {path}").splitlines(), 1):
        if not line.strip():
            continue
        wnid, _, rest = line.strip().partition(" ")
        name = rest.split(",")[0].strip()
        if not WNID.match(wnid) or not name:
            raise ValueError(f"{path} line {i}: expected '<wnid> <name>[, <synonym> …]', got {line.strip()[:80]!r}")
        names[wnid] = plain_text(name, f"{path} line {i}: the name of {wnid}")
    return names


def imagenet_source(root: str | Path, spec: str | None = None) -> ClassSource:
    root = Path(root)
    spec = spec or f"imagenet:{root}"
    _check_folder(spec, root)
    folders = [d for d in sorted(root.iterdir()) if d.is_dir() and WNID.match(d.name)]
    if not folders:
        raise ValueError(f"{spec}: {root} has no class folders named by wnid (n01440764/ …); "
                         "point to ILSVRC/Data/CLS-LOC/train or a val folder sorted by wnid")
    mapping_path = find_synset_mapping(root)
    mapping = read_synset_mapping(mapping_path) if mapping_path else {}
    images = {d.name: _image_files(spec, root, d, {".jpeg", ".jpg", ".png"}) for d in folders}
    names = {c: mapping.get(c, c) for c in images}
    return ClassSource(spec, "imagenet", tuple(images), names, images,
                       info={"synset_mapping": str(mapping_path) if mapping_path else None})


def imagefolder_source(root: str | Path, spec: str | None = None) -> ClassSource:
    root = Path(root)
    spec = spec or f"imagefolder:{root}"
    _check_folder(spec, root)
    folders = [d for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")]
    if not folders:
        raise ValueError(f"{spec}: {root} has no class folders (expected {root}/<class>/<image files>)")
    images = {d.name: _image_files(spec, root, d, IMAGE_SUFFIXES) for d in folders}
    names = {c: plain_text(c.replace("_", " "), f"{spec}: class folder {c!r}") for c in images}
    return ClassSource(spec, "imagefolder", tuple(images), names, images)
