"""Export a run's results store as CSV or Parquet files (one per table)."""

from __future__ import annotations

import csv
from pathlib import Path

from vheads.study._store import Store

TABLES = ("outcomes", "arms", "discovery", "headsets", "overlap", "ceilings", "audit", "ood_outcomes", "ood_audit")


def export_run(run_dir: str | Path, fmt: str = "csv", out: str | Path | None = None) -> list[Path]:
    if fmt not in ("csv", "parquet"):
        raise ValueError(f"unknown export format {fmt!r}; use csv or parquet")
    run_dir = Path(run_dir)
    out = Path(out) if out else run_dir / "export"
    out.mkdir(parents=True, exist_ok=True)
    store = Store(run_dir)
    paths = []
    try:
        for table in TABLES:
            cur = store.db.execute(f"SELECT * FROM {table}")
            cols = [d[0] for d in cur.description]
            rows = cur.fetchall()
            if fmt == "csv":
                p = out / f"{table}.csv"
                with open(p, "w", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(cols)
                    w.writerows(rows)
            else:
                try:
                    import pyarrow as pa
                    import pyarrow.parquet as pq
                except ImportError:
                    raise RuntimeError("parquet export needs pyarrow: pip install pyarrow") from None
                p = out / f"{table}.parquet"
                pq.write_table(pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)}), p)
            paths.append(p)
    finally:
        store.close()
    return paths
