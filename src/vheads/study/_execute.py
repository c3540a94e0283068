"""Running work units on a backend and committing each one's rows as it ends (the store, the
strips and grounding images beside it, ``units.log`` and the forward rows it ran)."""

from __future__ import annotations

import json
from pathlib import Path

from tqdm.auto import tqdm

from vheads._errors import path_inside
from vheads._io import atomic_write
from vheads.store import Store


#: one JSON line per unit: the full and suffix batch rows it ran (``vheads plan`` projects them)
FORWARD_ROWS = "forward_rows.jsonl"


def _log(run_dir: Path, line: str) -> None:
    with open(run_dir / "units.log", "a") as f:
        f.write(line + "\n")


def _commit(store: Store, run_dir: Path, res: dict) -> None:
    payload = res["rows"]
    strips = run_dir / "strips"
    for name, png in payload.get("strips", {}).items():  # item ids hold names from data: kept inside strips/
        atomic_write(path_inside(strips, f"{name}.png"), lambda fh: fh.write(png), mode="wb")
    for name, meta in payload.get("strip_meta", {}).items():
        atomic_write(path_inside(strips, f"{name}.json"), lambda fh: fh.write(json.dumps(meta)))
    for name, png in payload.get("grounding_images", {}).items():  # S's grounding maps for the report (vheads.study._grounding)
        atomic_write(path_inside(run_dir / "grounding", f"{name}.png"), lambda fh: fh.write(png), mode="wb")
    for name, maps in payload.get("grounding_maps", {}).items():
        atomic_write(path_inside(run_dir / "grounding", f"{name}.json"), lambda fh: fh.write(json.dumps(maps)))
    store.commit_unit(res["unit_id"], res["kind"], res["seconds"], payload["rows"])
    if res.get("forward_rows"):  # the batch rows the unit ran (vheads.study._plan projects them)
        with open(run_dir / FORWARD_ROWS, "a") as f:
            f.write(json.dumps({"model": store.model, "unit_id": res["unit_id"], **res["forward_rows"]}) + "\n")
    _log(run_dir, f"done {_logged(store, res['unit_id'])}")


def _logged(store: Store, unit_id: str) -> str:
    """A unit as ``units.log`` names it: ``<model>/<unit_id>`` in a multi-model run."""
    return f"{store.model}/{unit_id}" if store.model else unit_id


def _run_units(store, run_dir, backend, units, desc, progress) -> int:
    done = store.done_units()
    todo = [u for u in units if u["unit_id"] not in done]
    desc = f"{store.model}: {desc}" if store.model else desc
    bar = tqdm(total=len(units), initial=len(units) - len(todo), desc=desc, unit="unit", disable=not progress)
    # units marked "first" (a stage's checks that may refuse the run: the score points') finish
    # before the others start, on a backend of several replicas too
    first = [u for u in todo if u.get("first")]
    for part in (first, [u for u in todo if not u.get("first")]):
        for res in backend.run(part, on_start=lambda u: _log(run_dir, f"start {_logged(store, u['unit_id'])}")):
            _commit(store, run_dir, res)
            bar.update(1)
    bar.close()
    return len(todo)
