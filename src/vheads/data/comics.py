"""``comics:DIR`` — discovery strips from comics kept as one folder of panel images per comic.

Layout::

    DIR/<comic>/<panel images>      read in file-name order (001.png, 002.png, …)
    DIR/<comic>/labels.json         optional: {"001.png": "dog", …}, a label for every panel

Each comic's panels are cut into consecutive strips of ``n_panels`` (a shorter tail is
dropped); every panel is fitted into a ``panel_size`` square (scaled to fit, centred on
gray, so a whole panel stays visible) and the squares are joined left to right, giving the
items :func:`vheads.data.loaders.strip_item` gives (regions ``panel1`` … ``panelN``, the
asked panel drawn with ``seed``). Referring questions ("which panel shows the dog ?") need
``labels.json``; without it only ordinal questions can be asked and their answer is empty
(discovery's ``last`` and ``qspan`` sources do not use it; ``out`` uses the model's own
answer).
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from vheads._errors import VheadsError, inside_data_folder, plain_text
from vheads._io import read_json
from vheads.data._items import Item
from vheads.data._open import open_rgb
from vheads.data.builders import fit_square
from vheads.data._templates import DEFAULT_TEMPLATES, Templates
from vheads.data.loaders import item_id, strip_item
from vheads.data.sources import IMAGE_SUFFIXES
from vheads.data.synthetic import seeded_rng

LABELS = "labels.json"


def _comic_panels(root: Path, folder: Path) -> tuple[list[Path], dict[str, str] | None]:
    """A comic's panel files (in name order; one reached through a symlink that leaves
    ``root`` is refused) and their labels (each a text without control characters)."""
    panels = [p for p in sorted(folder.iterdir()) if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")]
    panels = [inside_data_folder(root, p, f"comics folder {root}") for p in panels]
    labels = None
    if (folder / LABELS).is_file():
        raw = read_json(folder / LABELS)
        if not isinstance(raw, dict):
            raise VheadsError(f"{folder / LABELS}: expected an object mapping panel file names to labels")
        missing = [p.name for p in panels if p.name not in raw or raw[p.name] == "" or raw[p.name] is None]
        if missing:
            raise VheadsError(f"{folder / LABELS} gives no label for panel {missing[0]!r}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
        labels = {p.name: plain_text(raw[p.name], f"{folder / LABELS}: the label of {p.name!r}").strip() for p in panels}
    return panels, labels


def load_comic_folders(root: str | Path, query: str, n: int | None = None, seed: int = 0, panel_size: int = 224,
                       n_panels: int = 6, templates: Templates = DEFAULT_TEMPLATES) -> list[Item]:
    """Strip items from a folder of comics (layout in the module docstring), at most ``n``."""
    if query not in ("ordinal", "referring"):
        raise ValueError(f"unknown strip query {query!r}; choose one of: ordinal, referring")
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"comics folder {root} does not exist")
    comics = [d for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")]
    if not comics:
        raise ValueError(f"comics folder {root} has no comic folders (expected {root}/<comic>/<panel images>)")
    strips: list[tuple[Path, list[Path], list[str]]] = []
    for comic in comics:
        panels, labels = _comic_panels(root, comic)
        if query == "referring" and labels is None:
            raise ValueError(f"comic {comic} has no {LABELS}, so no referring question can be asked of it; add one or use ordinal")
        for s in range(0, len(panels) - n_panels + 1, n_panels):
            group = panels[s:s + n_panels]
            strips.append((comic, group, [labels[p.name] if labels else "" for p in group]))
    if not strips:
        raise ValueError(f"comics folder {root}: no comic has {n_panels} panels (empty corpus)")
    rng = seeded_rng(seed, "comic-folders", query)
    P = int(panel_size)
    boxes = [(p * P, 0, (p + 1) * P, P) for p in range(n_panels)]
    items = []
    for comic, group, labels in strips:
        if n is not None and len(items) >= n:
            break
        if query == "referring":
            unique = [i for i, lab in enumerate(labels) if labels.count(lab) == 1]
            if not unique:
                continue
            asked = int(unique[int(rng.integers(len(unique)))])
        else:
            asked = int(rng.integers(n_panels))
        canvas = Image.new("RGB", (P * n_panels, P))
        for p, path in enumerate(group):
            canvas.paste(fit_square(open_rgb(path, f"comic panel {path}"), P, "pad"), (p * P, 0))
        items.append(strip_item("comics", query, item_id(f"comics-{query}-s{seed}", f"{comic.name}/{group[0].name}"), canvas, boxes, labels, asked,
                                {"comic": comic.name, "panel_files": [p.name for p in group]}, templates))
    if not items:
        raise ValueError(f"comics folder {root}: no strip has a panel whose label is unique in its strip, so no referring question can be asked")
    return items
