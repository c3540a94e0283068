"""The results store of a study run: one SQLite file (WAL) in the run directory.

The study runner (:mod:`vheads.study`) writes it, the report (:mod:`vheads.report`) and
the export read it; it sits below both so neither reaches into the other.

Only the driver writes it. Each work unit's rows are written in one transaction together
with the unit's row in ``units``, so a unit is either wholly stored or absent: a killed
run resumes by skipping the units already there.

Schema (version 2: overlap at half size, random_overlap, sweep controls)
------------------
meta(key PRIMARY KEY, value)                      config (JSON), config_hash, vheads_version,
                                                  model_id, model_fingerprint, n_layers, n_heads
units(unit_id PRIMARY KEY, kind, finished, seconds)
discovery(setting PRIMARY KEY, query, source, corpus, n_items, k, scores, headset)
                                                  scores: JSON [L][H]; headset: JSON [[l, h], ...]
item_scores(setting, item_id, scores)             per-item region mass, JSON [L][H] (for ceilings, figures)
overlap(setting_a, setting_b, k, overlap, half_mean, half_lo, half_hi, same_items, ceiling_a, ceiling_b,
        geo_ceiling, fraction)                    one row per unordered pair (a < b): overlap = on all items;
                                                  half_* = overlap at half size over the splits (mean,
                                                  2.5 / 97.5 pct); fraction = half_mean / geo_ceiling
random_overlap(setting, k, draw, seed, overlap)   overlap of S with uniform random draws of its size (Fig. 7)
ceilings(setting, k, mean, lo, hi, splits)        half-split noise ceiling of one setting
headsets(setting, headset_id, control, draw, seed, heads)
                                                  control: 'S', a control name, or 'S@k=K' for the k sweep
outcomes(unit_id, setting, test, headset_id, item_id, value)
                                                  per-item outcome; test e.g. 'cers', 'cers-sym',
                                                  'ncs-all', 'ncs-image', 'ncs-question', 'ncs-last',
                                                  'ncs-grid', 'text', 'cers@beta=100', 'cers@k=8'
arms(unit_id, setting, test, headset_id, item_id, arm, value)
                                                  NCS arms: arm 'matched' / 'mismatched' drops
audit(name PRIMARY KEY, n, mean_p_key, lo, hi, ok)
strip_attention(setting, item_id, layer, head, masses)
                                                  masses: JSON list of the mass on each panel, for figures
ood_outcomes(unit_id, task, setting, test, headset_id, item_id, value)
                                                  pointing suite: per-item CERS ('cers') and NCS
                                                  ('ncs-all', with arms 'ncs-matched' / 'ncs-mismatched')
ood_audit(task, name, n, mean_p_key, lo, hi, ok)  pointing suite: baseline audit of each task
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from vheads._errors import MissingFileError, storage_error

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS units(unit_id TEXT PRIMARY KEY, kind TEXT, finished REAL, seconds REAL);
CREATE TABLE IF NOT EXISTS discovery(setting TEXT PRIMARY KEY, query TEXT, source TEXT, corpus TEXT,
    n_items INTEGER, k INTEGER, scores TEXT, headset TEXT);
CREATE TABLE IF NOT EXISTS item_scores(setting TEXT, item_id TEXT, scores TEXT, PRIMARY KEY(setting, item_id));
CREATE TABLE IF NOT EXISTS overlap(setting_a TEXT, setting_b TEXT, k INTEGER, overlap INTEGER, half_mean REAL,
    half_lo REAL, half_hi REAL, same_items INTEGER, ceiling_a REAL, ceiling_b REAL, geo_ceiling REAL, fraction REAL,
    PRIMARY KEY(setting_a, setting_b, k));
CREATE TABLE IF NOT EXISTS random_overlap(setting TEXT, k INTEGER, draw INTEGER, seed INTEGER, overlap INTEGER,
    PRIMARY KEY(setting, draw));
CREATE TABLE IF NOT EXISTS ceilings(setting TEXT, k INTEGER, mean REAL, lo REAL, hi REAL, splits INTEGER,
    PRIMARY KEY(setting, k));
CREATE TABLE IF NOT EXISTS headsets(setting TEXT, headset_id TEXT, control TEXT, draw INTEGER, seed INTEGER,
    heads TEXT, PRIMARY KEY(setting, headset_id));
CREATE TABLE IF NOT EXISTS outcomes(unit_id TEXT, setting TEXT, test TEXT, headset_id TEXT, item_id TEXT,
    value REAL, PRIMARY KEY(setting, test, headset_id, item_id));
CREATE TABLE IF NOT EXISTS arms(unit_id TEXT, setting TEXT, test TEXT, headset_id TEXT, item_id TEXT, arm TEXT,
    value REAL, PRIMARY KEY(setting, test, headset_id, item_id, arm));
CREATE TABLE IF NOT EXISTS audit(name TEXT PRIMARY KEY, n INTEGER, mean_p_key REAL, lo REAL, hi REAL, ok INTEGER);
CREATE TABLE IF NOT EXISTS ood_outcomes(unit_id TEXT, task TEXT, setting TEXT, test TEXT, headset_id TEXT, item_id TEXT,
    value REAL, PRIMARY KEY(task, setting, test, headset_id, item_id));
CREATE TABLE IF NOT EXISTS ood_audit(task TEXT, name TEXT, n INTEGER, mean_p_key REAL, lo REAL, hi REAL, ok INTEGER,
    PRIMARY KEY(task, name));
CREATE TABLE IF NOT EXISTS strip_attention(setting TEXT, item_id TEXT, layer INTEGER, head INTEGER, masses TEXT,
    PRIMARY KEY(setting, item_id, layer, head));
"""

STORE_NAME = "results.sqlite"


class Store:
    """The results store of one run directory."""

    def __init__(self, run_dir: str | Path, readonly: bool = False):
        """Open (or create) the store. ``readonly``: open an existing store for reading only
        (``report``, ``export``), which works on read-only media too. A damaged file, a
        full or read-only disk are :class:`~vheads._errors.VheadsError` (one line)."""
        self.path = Path(run_dir) / STORE_NAME
        try:
            if readonly:
                self.db = _connect_readonly(self.path)
                self.db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a damaged file fails here
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except (sqlite3.DatabaseError, OSError) as e:
            raise storage_error(e, self.path) from None

    def close(self) -> None:
        self.db.close()

    # ---- meta ------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, **values) -> None:
        with self.transaction():
            for k, v in values.items():
                self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, v if isinstance(v, str) else json.dumps(v)))

    # ---- units -----------------------------------------------------------------------------
    def done_units(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT unit_id FROM units")}

    @contextmanager
    def transaction(self):
        """All or nothing; a failed write (full disk, damaged file) is one clear line."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
            else:
                self.db.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            raise storage_error(e, self.path) from None

    def commit_unit(self, unit_id: str, kind: str, seconds: float, rows: dict[str, list[tuple]]) -> None:
        """Write ``rows`` (table -> tuples in column order) and mark the unit done, atomically."""
        with self.transaction() as db:
            for table, tuples in rows.items():
                if not tuples:
                    continue
                marks = ",".join("?" * len(tuples[0]))
                db.executemany(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", tuples)
            db.execute("INSERT INTO units VALUES (?, ?, ?, ?)", (unit_id, kind, time.time(), seconds))

    def query(self, sql: str, *args) -> list[tuple]:
        return self.db.execute(sql, args).fetchall()


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """``mode=ro``; on read-only media, where SQLite cannot make the WAL index, ``immutable=1``
    (nothing can write there, so the file cannot change while it is read)."""
    if not path.is_file():
        raise MissingFileError(f"no results store at {path}; pass the run directory a `vheads study` wrote")
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    db = sqlite3.connect(uri, uri=True, isolation_level=None)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db
    except sqlite3.OperationalError:
        db.close()
        if os.access(path.parent, os.W_OK) and not _read_only_fs(path):
            raise
    return sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None)


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False
