"""The out-of-domain pointing suite: benchmarks converted into the 2 x 2 CERS apparatus.

A task is one :data:`TASKS` entry — a reader of the benchmark's local copy (in its
publisher's layout, see :mod:`vheads.data.ood._readers`) and a conversion recipe
(``overlay`` or ``retrieval``, see :mod:`vheads.data.ood._recipes`). Adding a benchmark
is adding one entry. ``TASK:PATH`` specs name a task and its local copy::

    cvbench:/data/CV-Bench     mmstar:/data/MMStar     mathvista:/data/MathVista
    countbenchqa:/data/CountBenchQA     spatial457:/data/Spatial457
    spatialrgpt:/data/SpatialRGPT-Bench     mcq:/data/mine.jsonl   mcq-retrieval:/data/mine.jsonl

:class:`BenchmarkItems` has the interface of :class:`vheads.data.builders.RealItems`
(``items(kind, n, seed)``), so the evaluation and the baseline audit (seed Table 22) run
on a task unchanged: ``vheads audit --source cvbench:/data/CV-Bench``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from vheads.data._templates import DEFAULT_TEMPLATES, Templates
from vheads.data.ood._readers import (
    read_countbenchqa, read_cvbench, read_mathvista, read_mcq_jsonl, read_mmstar, read_spatial457, read_spatialrgpt,
)
from vheads.data.ood._recipes import KINDS, RECIPES, build_items


@dataclass(frozen=True)
class Task:
    reader: object  # (argument, spec) -> list[MCQRecord]
    recipe: str
    about: str


#: task name -> reader + recipe (seed Table 29); a new benchmark is one entry
TASKS: dict[str, Task] = {
    "cvbench": Task(read_cvbench, "overlay", "CV-Bench: single-image MCQ perception"),
    "mmstar": Task(read_mmstar, "overlay", "MMStar: single-image MCQ perception"),
    "mathvista": Task(read_mathvista, "overlay", "MathVista: MCQ diagram reasoning (multi_choice questions)"),
    "countbenchqa": Task(read_countbenchqa, "overlay", "CountBenchQA: counting, near-miss count distractors"),
    "spatial457": Task(read_spatial457, "retrieval", "Spatial457: spatial-relation VQA on rendered scenes"),
    "spatialrgpt": Task(read_spatialrgpt, "retrieval", "SpatialRGPT-Bench: spatial relations between labelled regions"),
    "mcq": Task(read_mcq_jsonl, "overlay", "your own MCQ JSONL, same-image overlay"),
    "mcq-retrieval": Task(read_mcq_jsonl, "retrieval", "your own MCQ JSONL, image retrieval (group by its 'group' field)"),
}


def is_task_spec(spec: str) -> bool:
    kind, sep, arg = str(spec).partition(":")
    return bool(sep and arg) and kind in TASKS


@lru_cache(maxsize=8)
def _records(spec: str):
    kind, _, arg = spec.partition(":")
    return tuple(TASKS[kind].reader(arg, spec))


@lru_cache(maxsize=8)
def _opened(spec: str):
    records = _records(spec)
    for rec in records:
        rec.image().close()  # an error names the file and row
    return records


@dataclass(frozen=True)
class BenchmarkItems:
    """Evaluation items of one pointing-suite task (``TASK:PATH``), ``cell`` pixels per grid cell."""

    source: str
    cell: int = 224
    templates: Templates = DEFAULT_TEMPLATES  # words the grid-oracle question ("cell" template)

    def __post_init__(self) -> None:
        if not is_task_spec(self.source):
            raise ValueError(f"unknown benchmark task {self.source!r}; use one of {', '.join(t + ':PATH' for t in TASKS)}")
        from vheads.data.builders import check_cell

        check_cell(self.cell)

    @property
    def task(self) -> str:
        return self.source.partition(":")[0]

    def open(self):
        """Read (and check) every question of the local copy, and open every image once: a
        missing or unreadable image is refused before the model loads, whatever ``--n``."""
        return _opened(self.source)

    def items(self, kind: str, n: int, seed: int = 0):
        return build_items(self.task, self.source, TASKS[self.task].recipe, list(self.open()), kind, n, seed, self.cell, self.templates)


def item_source(spec: str, cell: int = 224, classes: str = "", exclude: str = "", resize: str = "crop",
                templates: Templates = DEFAULT_TEMPLATES):
    """The item builder of a source spec: a benchmark task, or a class-labelled photo source."""
    if is_task_spec(spec):
        return BenchmarkItems(spec, cell, templates)
    from vheads.data.builders import RealItems

    return RealItems(spec, classes, exclude, cell=cell, resize=resize, templates=templates)


def open_item_source(spec: str, cell: int = 224):
    """The item builder of ``vheads evaluate --source`` and ``vheads audit --source``
    (:func:`item_source`) with its files read now: a bad ``--cell``, photo folder or benchmark
    row is refused before a model loads."""
    from vheads.data.builders import check_cell

    check_cell(cell, "--cell")
    source = item_source(spec, cell)
    source.open()
    return source


__all__ = ["BenchmarkItems", "KINDS", "RECIPES", "TASKS", "Task", "is_task_spec", "item_source", "open_item_source"]
