"""Export a run's results store as Parquet (default) or CSV files (one per table; a multi-model
run's with a ``model`` column first).

Parquet keeps each column's type and stores a column's repeated text (setting, test,
head-set and item ids) once per page as a dictionary, compressed with zstd: the default
study's export is about 1/20 of its CSV (docs/store.md)."""

from __future__ import annotations

import csv
from pathlib import Path

from vheads._errors import make_output_folder
from vheads._io import atomic_write
from vheads.store import TABLES as STORE_TABLES
from vheads.store import Store, columns

#: the store's tables that hold no result: bookkeeping, and the per-item vectors behind the figures
NOT_EXPORTED = frozenset({"meta", "units", "item_scores", "strip_attention"})


def export_tables() -> list[str]:
    """Every results table of the store, vheads' own and those stages (built in, or a plugin's)
    register (:func:`vheads.store.register_table`), in registration order."""
    from vheads.study._stage import registered_stages

    registered_stages()  # imports every stage module: each registers its tables
    return [t for t in STORE_TABLES if t not in NOT_EXPORTED]


def export_run(run_dir: str | Path, fmt: str = "parquet", out: str | Path | None = None) -> list[Path]:
    if fmt not in ("csv", "parquet"):
        raise ValueError(f"unknown export format {fmt!r}; use parquet or csv")
    run_dir = Path(run_dir)
    out = Path(out) if out else run_dir / "export"
    make_output_folder(out)
    store = Store(run_dir, readonly=True)  # a run on read-only media exports too (with --out elsewhere)
    multi = store.models() != [""]  # a multi-model run: every model's rows, a model column first
    paths = []
    try:
        # a table, or (schema 4) the view that shows a coded table's text keys
        stored = {name for (name,) in store.query("SELECT name FROM main.sqlite_master WHERE type IN ('table', 'view')")}
        for table in (t for t in export_tables() if t in stored):  # a run of an older vheads lacks the later tables
            cols = ["model", *columns(table)] if multi else columns(table)
            rows = store.query(f"SELECT {', '.join(cols)} FROM main.{table} WHERE model != '' ORDER BY model" if multi
                               else f"SELECT {', '.join(cols)} FROM {table}")
            if fmt == "csv":
                p = out / f"{table}.csv"

                def write(f, cols=cols, rows=rows):
                    w = csv.writer(f)
                    w.writerow(cols)
                    w.writerows(rows)

                atomic_write(p, write)
            else:
                try:
                    import pyarrow as pa
                    import pyarrow.parquet as pq
                except ImportError:
                    raise RuntimeError("parquet export needs pyarrow: pip install pyarrow") from None
                p = out / f"{table}.parquet"
                tab = pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)})
                atomic_write(p, lambda fh, tab=tab: pq.write_table(tab, fh, compression="zstd"), mode="wb")
            paths.append(p)
    finally:
        store.close()
    return paths
