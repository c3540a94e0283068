"""Compare two runs' results stores key by key: ``python benchmarks/compare_stores.py RUN_A RUN_B``.

For every table of :data:`vheads.store.TABLES` but ``units`` (times of day), the rows are
matched on the table's primary key (as each store's views show them, so stores of
different storage layouts compare by what a reader sees) and every other column is
compared: numbers (and the numbers inside JSON text, e.g. scores ``[L][H]``) within
``--tol`` (default 1e-5, absolute), everything else exactly. It prints, per table, the
keys only one store has and the largest |difference| of each column, and exits 1 when the
stores differ beyond the tolerance. Meta keys that record the run rather than its results
(:data:`IGNORED_META`) are left out.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from vheads.store import TABLES, Store, columns

IGNORED_META = ("vheads_version", "doctor", "config", "config_hash")


def _key_columns(table: str) -> list[str]:
    return [c.strip() for c in TABLES[table][1].split(",")]


def _numbers(v):
    """``v`` as a flat list of numbers (JSON text parsed), or None when it holds text."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return [float(v)]
    if isinstance(v, list):
        out = []
        for x in v:
            n = _numbers(x)
            if n is None:
                return None
            out += n
        return out
    return None


def _diff(a, b) -> float:
    """|a − b| for numbers (the largest over the entries of a JSON list); inf when they differ otherwise."""
    if a == b:
        return 0.0
    na, nb = _numbers(a), _numbers(b)
    if na is None or nb is None or len(na) != len(nb):
        return math.inf
    return max((abs(x - y) if not (math.isnan(x) and math.isnan(y)) else 0.0 for x, y in zip(na, nb)), default=0.0)


def _rows(store: Store, table: str) -> dict[tuple, tuple]:
    stored = {n for (n,) in store.query("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                        "UNION SELECT name FROM sqlite_temp_master")}
    if table not in stored:
        return {}
    keys = _key_columns(table)
    rest = [c for c in columns(table) if c not in keys and c != "unit_id"]
    got = store.query(f"SELECT {', '.join(keys + rest)} FROM {table}")
    out = {r[:len(keys)]: r[len(keys):] for r in got}
    if table == "meta":
        out = {k: v for k, v in out.items() if k[0] not in IGNORED_META}
    return out


def compare_stores(run_a: str | Path, run_b: str | Path, model: str = "") -> dict[str, dict]:
    """``{table: {"a_only": n, "b_only": n, "rows": n matched, "max_abs": {column: largest |Δ|},
    "examples": [a few keys only one has]}}`` for every table either store holds rows of."""
    sa, sb = Store(run_a, readonly=True, model=model), Store(run_b, readonly=True, model=model)
    try:
        out = {}
        for table in TABLES:
            if table == "units":
                continue
            ra, rb = _rows(sa, table), _rows(sb, table)
            if not ra and not rb:
                continue
            keys = _key_columns(table)
            rest = [c for c in columns(table) if c not in keys and c != "unit_id"]
            both = ra.keys() & rb.keys()
            worst = {c: 0.0 for c in rest}
            for k in both:
                for c, x, y in zip(rest, ra[k], rb[k]):
                    worst[c] = max(worst[c], _diff(x, y))
            only = sorted(ra.keys() ^ rb.keys(), key=repr)[:3]
            out[table] = {"a_only": len(ra.keys() - rb.keys()), "b_only": len(rb.keys() - ra.keys()), "rows": len(both),
                          "max_abs": worst, "examples": [list(k) for k in only]}
        return out
    finally:
        sa.close()
        sb.close()


def stores_agree(result: dict[str, dict], tol: float = 1e-5) -> bool:
    """Same keys in every table and every column within ``tol``."""
    return all(t["a_only"] == 0 and t["b_only"] == 0 and all(v <= tol for v in t["max_abs"].values()) for t in result.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_a")
    ap.add_argument("run_b")
    ap.add_argument("--tol", type=float, default=1e-5, help="largest |difference| of a number that counts as equal")
    ap.add_argument("--model", default="", help="a multi-model run's model name ('' = a single-model run)")
    args = ap.parse_args(argv)
    for run in (args.run_a, args.run_b):
        if not (Path(run) / "results.sqlite").is_file():
            print(f"compare_stores: {run} holds no results.sqlite; pass two run folders", file=sys.stderr)
            return 2
    res = compare_stores(args.run_a, args.run_b, args.model)
    for table, r in res.items():
        cols = ", ".join(f"{c} {v:.1e}" for c, v in r["max_abs"].items() if v)
        print(f"{table:<16} {r['rows']:>9} rows matched, {r['a_only']} only in A, {r['b_only']} only in B"
              + (f"; largest |Δ|: {cols}" if cols else "") + (f"; e.g. {r['examples'][0]}" if r["examples"] else ""))
    ok = stores_agree(res, args.tol)
    print("stores agree" if ok else f"stores DIFFER (tolerance {args.tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
