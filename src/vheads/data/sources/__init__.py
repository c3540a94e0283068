"""Class-labelled image sources for the evaluation sets (the seed's ImageNet MCQ and grids).

A source spec names a local folder in its publisher's layout:

- ``imagenet:DIR`` — ILSVRC ``DIR/<wnid>/*.JPEG``, names from ``LOC_synset_mapping.txt``;
- ``imagefolder:DIR`` — ``DIR/<class>/<images>``;
- ``hf:DIR[,SPLIT]`` — a ``datasets.save_to_disk`` folder or a folder of Hub parquet files.

:func:`open_source` reads one and applies an optional class list (keep only these) and
exclusion list (drop these), given as ids (wnid, folder name, label index) or names.
"""

from __future__ import annotations

from pathlib import Path

from vheads.data.sources._base import MIN_CLASSES, ClassSource, ImageRef, read_list_file, resolve_classes, select_classes
from vheads.data.sources._folders import IMAGE_SUFFIXES, imagefolder_source, imagenet_source
from vheads.data.sources._hf import _image_cell as table_image_cell
from vheads.data.sources._hf import hf_source

#: source kind -> reader(argument, spec) -> ClassSource; a new layout is one entry
SOURCE_KINDS = {"imagenet": imagenet_source, "imagefolder": imagefolder_source, "hf": hf_source}


def parse_source_spec(spec: str) -> tuple[str, str]:
    """``"imagenet:/data/val"`` -> ``("imagenet", "/data/val")``; unknown kinds are refused."""
    kind, sep, arg = str(spec).partition(":")
    if not sep or kind not in SOURCE_KINDS or not arg:
        raise ValueError(f"unknown image source {spec!r}; use {', '.join(k + ':DIR' for k in SOURCE_KINDS)} "
                         "(hf:DIR,SPLIT for one split of a DatasetDict)")
    return kind, arg


def source_folder(spec: str) -> Path:
    """The folder a source spec points to (for existence checks before any work)."""
    _, arg = parse_source_spec(spec)
    return Path(arg.split(",")[0])


def open_source(spec: str, classes: list[str] | str | None = None, exclude: list[str] | str | None = None,
                groups: list[list[str]] | str | None = None) -> ClassSource:
    """Read source ``spec`` and keep the classes an item may use.

    ``classes`` / ``exclude``: a list of class ids or names, or the path of a file with one
    per line. ``groups``: confusable groups whose members never share an item — a list of
    lists, or the path of a file with one group a line, members separated by commas. The
    result has at least four classes, each with at least one image.
    """
    kind, arg = parse_source_spec(spec)
    src = SOURCE_KINDS[kind](arg, spec)
    keep = read_list_file(classes, "class list") if isinstance(classes, (str, Path)) and classes else classes or None
    drop = read_list_file(exclude, "exclusion list") if isinstance(exclude, (str, Path)) and exclude else exclude or None
    chosen = select_classes(spec, src.names, src.images, keep, drop)
    src.classes = chosen
    groups_file = str(groups) if isinstance(groups, (str, Path)) and groups else None
    if groups_file:
        groups = [[m.strip() for m in line.split(",") if m.strip()] for line in read_list_file(groups, "confusable-groups")]
    for g, members in enumerate(groups or []):
        for c in resolve_classes(spec, src.names, members, f"confusable group {g + 1}"):
            src.groups[c] = f"group{g + 1}"
    src.info = {**src.info, "class_list": str(classes) if isinstance(classes, (str, Path)) else None,
                "exclusion_list": str(exclude) if isinstance(exclude, (str, Path)) else None,
                "groups": groups_file, "grouped_classes": len(src.groups)}
    return src


__all__ = ["ClassSource", "IMAGE_SUFFIXES", "ImageRef", "MIN_CLASSES", "SOURCE_KINDS", "open_source", "parse_source_spec",
           "source_folder", "table_image_cell"]
