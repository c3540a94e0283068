"""The results store of a study run: one SQLite file (WAL) in the run directory.

The study runner (:mod:`vheads.study`) writes it, the report (:mod:`vheads.report`) and
the export read it; it sits below both so neither reaches into the other.

Only the driver writes it. Each work unit's rows are written in one transaction together
with the unit's row in ``units``, so a unit is either wholly stored or absent: a killed
run resumes by skipping the units already there.

Models
------
One store holds the rows of one or several models (a study's ``models = [...]``). Every
table has a ``model`` column first, part of its primary key: ``''`` for a single-model run
(and, in a multi-model run, for the run's own rows: its config and the model list in
``meta``), the model's name (a :func:`~vheads._errors.safe_name`) otherwise. A
``Store(run_dir, model=NAME)`` is a view of one model's rows: on its connection every table
name below is a TEMP VIEW of that table restricted to ``model = NAME``, with the columns
listed here (no ``model``), so readers query one model's rows as if the store held only
that model; writes (:meth:`Store.commit_unit`, :meth:`Store.set_meta`) add the model.
Stores of schema 2 (no ``model`` column, single-model only) are read and resumed as
before.

Schema 4 stores the per-item tables (:data:`CODED`: outcomes, arms, causal_map,
ood_outcomes) with their text keys as integer ids of ``names(id, name)``, in
``coded_<table>`` (WITHOUT ROWID); a view named after each shows the text columns below, so
readers (and plain sqlite3) see what schema 3 showed (docs/store.md). A schema-3 store (text
keys in every row) is read and resumed in its own layout.

Schema (version 4: coded keys; version 3: the ``model`` column; version 2: overlap at half
size, random_overlap, sweep controls) — the columns each model's view shows
------------------
meta(key PRIMARY KEY, value)                      config (JSON), config_hash, vheads_version,
                                                  model_id, model_fingerprint, n_layers, n_heads,
                                                  control_fallbacks (JSON {setting: {control label:
                                                  [fallback, ...]}}, labels e.g. 'layer-matched',
                                                  'layer-matched@k=8', 'shared/layer-matched';
                                                  older runs: {setting: [fallback, ...]}),
                                                  control_pools (JSON {setting: {control label: {mode,
                                                  pool, n, R}}}: how each control's head-sets were
                                                  chosen — mode 'exact' (the whole pool, each member
                                                  once) or 'sampled' (distinct draws), pool its size
                                                  where known, n the head-sets stored and compared,
                                                  R asked; absent in a run before wave 4, whose
                                                  draws may repeat a head-set);
                                                  headline_beta (JSON {beta, rule, tolerance, rms by
                                                  sweep β, met, n_draws}: the β Table 3's CERS ran at
                                                  and the rule that chose it from the β sweep's
                                                  controls; absent before wave 4: beta);
                                                  a multi-model run's '' rows: config, config_hash,
                                                  vheads_version, models (JSON [{name, model, ...}])
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
                                                  control: 'S', a control name, or 'S@k=K' for the k sweep;
                                                  each row of a control is one pool member compared
                                                  with S (draw = its place in the seeded order)
outcomes(unit_id, setting, test, headset_id, item_id, value, logprob, logit_diff)
                                                  per-item outcome; test e.g. 'cers', 'cers-sym',
                                                  'ncs-all', 'ncs-image', 'ncs-question', 'ncs-last',
                                                  'ncs-grid', 'text', 'cers@beta=100', 'cers@k=8';
                                                  value in p4 (P over the four letters), logprob and
                                                  logit_diff the same outcome in the other metrics
                                                  (METRIC_COLUMNS; NULL in a store of an older vheads)
arms(unit_id, setting, test, headset_id, item_id, arm, value, logprob, logit_diff)
                                                  NCS arms: arm 'matched' / 'mismatched' drops
audit(name PRIMARY KEY, n, mean_p_key, lo, hi, ok)
strip_attention(setting, item_id, layer, head, masses)
                                                  masses: JSON list of the mass on each panel, for figures
ood_outcomes(unit_id, task, setting, test, headset_id, item_id, value, logprob, logit_diff)
                                                  pointing suite: per-item CERS ('cers') and NCS
                                                  ('ncs-all', with arms 'ncs-matched' / 'ncs-mismatched')
ood_audit(task, name, n, mean_p_key, lo, hi, ok)  pointing suite: baseline audit of each task
stability(setting, k, curve, n_items, draw, seed, overlap)
                                                  stability curves (vheads.discovery.stability_curve):
                                                  curve 'full' (overlap with the all-items top-k) or
                                                  'split' (split-half overlap) of each seeded draw of
                                                  n_items of the setting's item_scores (item_id order)
causal_map(unit_id, method, test, ablation, headset_id, item_id, arm, value, logprob, logit_diff)
                                                  causal maps (vheads.causal): per item, each head alone
                                                  ('L3H5') and each whole layer ('L3'); method 'exact'
                                                  (each set run) or 'atp' (attribution patching, heads
                                                  only, value in p4, logprob / logit_diff NULL); arm
                                                  'matched' / 'mismatched' (NCS drops) or 'value'
                                                  (NCS_grid, text arm); a run before it has no such table

A stage may add a table of its own (:func:`register_table`, when its module is imported):
kind_necessity(setting, kind, test, metric, headset_id, control, n, mean, sd, t_lo, t_hi, boot_lo, boot_hi,
               boot_seed)                         necessity per item kind (vheads.study.stages.kinds)
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from vheads._errors import MissingFileError, VheadsError, storage_error

#: table -> (columns, primary key) as each model sees them; the stored table has ``model`` first
TABLES: dict[str, tuple[str, str]] = {
    "meta": ("key TEXT, value TEXT", "key"),
    "units": ("unit_id TEXT, kind TEXT, finished REAL, seconds REAL", "unit_id"),
    "discovery": ("setting TEXT, query TEXT, source TEXT, corpus TEXT, n_items INTEGER, k INTEGER, scores TEXT, "
                  "headset TEXT", "setting"),
    "item_scores": ("setting TEXT, item_id TEXT, scores TEXT", "setting, item_id"),
    "overlap": ("setting_a TEXT, setting_b TEXT, k INTEGER, overlap INTEGER, half_mean REAL, half_lo REAL, half_hi REAL, "
                "same_items INTEGER, ceiling_a REAL, ceiling_b REAL, geo_ceiling REAL, fraction REAL",
                "setting_a, setting_b, k"),
    "random_overlap": ("setting TEXT, k INTEGER, draw INTEGER, seed INTEGER, overlap INTEGER", "setting, draw"),
    "ceilings": ("setting TEXT, k INTEGER, mean REAL, lo REAL, hi REAL, splits INTEGER", "setting, k"),
    "headsets": ("setting TEXT, headset_id TEXT, control TEXT, draw INTEGER, seed INTEGER, heads TEXT",
                 "setting, headset_id"),
    "outcomes": ("unit_id TEXT, setting TEXT, test TEXT, headset_id TEXT, item_id TEXT, value REAL, logprob REAL, "
                 "logit_diff REAL", "setting, test, headset_id, item_id"),
    "arms": ("unit_id TEXT, setting TEXT, test TEXT, headset_id TEXT, item_id TEXT, arm TEXT, value REAL, logprob REAL, "
             "logit_diff REAL", "setting, test, headset_id, item_id, arm"),
    "audit": ("name TEXT, n INTEGER, mean_p_key REAL, lo REAL, hi REAL, ok INTEGER", "name"),
    "ood_outcomes": ("unit_id TEXT, task TEXT, setting TEXT, test TEXT, headset_id TEXT, item_id TEXT, value REAL, "
                     "logprob REAL, logit_diff REAL", "task, setting, test, headset_id, item_id"),
    "ood_audit": ("task TEXT, name TEXT, n INTEGER, mean_p_key REAL, lo REAL, hi REAL, ok INTEGER", "task, name"),
    "strip_attention": ("setting TEXT, item_id TEXT, layer INTEGER, head INTEGER, masses TEXT",
                        "setting, item_id, layer, head"),
    "stability": ("setting TEXT, k INTEGER, curve TEXT, n_items INTEGER, draw INTEGER, seed INTEGER, overlap INTEGER",
                  "setting, curve, n_items, draw"),
    "causal_map": ("unit_id TEXT, method TEXT, test TEXT, ablation TEXT, headset_id TEXT, item_id TEXT, arm TEXT, "
                   "value REAL, logprob REAL, logit_diff REAL", "method, test, ablation, headset_id, item_id, arm"),
}
#: the column of each metric of an outcome (vheads.evaluation.METRICS) in outcomes, arms, ood_outcomes
METRIC_COLUMNS = {"p4": "value", "logprob": "logprob", "logit-diff": "logit_diff"}


def columns(table: str) -> list[str]:
    """The column names of ``table`` as one model's view shows them."""
    return [c.split()[0] for c in TABLES[table][0].split(", ")]


#: the tables of vheads itself; :func:`register_table` adds the others
BUILTIN_TABLES = frozenset(TABLES)


def register_table(name: str, cols: str, pk: str) -> None:
    """Add a table to the store, as :data:`TABLES` writes one (``cols``: ``"a TEXT, b REAL"``,
    ``pk``: ``"a"``): a study stage's own results, registered when its module is imported
    (``vheads.study.stages``; a plugin's too). A store opened for writing creates it (the
    first :meth:`Store.commit_unit` to it, where it was registered after the store opened);
    a reader need not register it: every stored table gets its per-model view. The same
    name twice must be the same table."""
    if TABLES.get(name, (cols, pk)) != (cols, pk):
        raise ValueError(f"results-store table {name!r} is registered twice, with different columns"
                         + (" (it is one of vheads' own tables)" if name in BUILTIN_TABLES else ""))
    TABLES[name] = (cols, pk)


SCHEMA_VERSION = 4
#: schema 3: every table as :data:`TABLES` says, text keys in every row
SCHEMA_V3 = "\n".join(f"CREATE TABLE IF NOT EXISTS {t}(model TEXT NOT NULL DEFAULT '', {cols}, PRIMARY KEY(model, {pk}));"
                      for t, (cols, pk) in TABLES.items())
#: schema 4: the tables of one row per item (the bulk of a store) keep these text columns as
#: integer ids of the ``names`` table, in ``coded_<table>`` (WITHOUT ROWID: the primary key is
#: the table, not a second copy of it); a view of the table's own name shows them as text
CODED: dict[str, tuple[str, ...]] = {
    "outcomes": ("unit_id", "setting", "test", "headset_id", "item_id"),
    "arms": ("unit_id", "setting", "test", "headset_id", "item_id", "arm"),
    "causal_map": ("unit_id", "method", "test", "ablation", "headset_id", "item_id", "arm"),
    "ood_outcomes": ("unit_id", "task", "setting", "test", "headset_id", "item_id"),
}


def _coded_table(table: str) -> str:
    """``coded_<table>``'s CREATE and the decoding view named ``table``."""
    cols, pk = TABLES[table]
    typed = ", ".join(f"{c.split()[0]} INTEGER NOT NULL" if c.split()[0] in CODED[table] else c for c in cols.split(", "))
    sel, joins = ["o.model AS model"], []
    for i, c in enumerate(columns(table)):
        if c in CODED[table]:
            sel.append(f"n{i}.name AS {c}")
            joins.append(f"JOIN names n{i} ON n{i}.id = o.{c}")
        else:
            sel.append(f"o.{c} AS {c}")
    return (f"CREATE TABLE IF NOT EXISTS coded_{table}(model TEXT NOT NULL DEFAULT '', {typed}, PRIMARY KEY(model, {pk})) "
            f"WITHOUT ROWID;\nCREATE VIEW IF NOT EXISTS {table} AS SELECT {', '.join(sel)} FROM coded_{table} o {' '.join(joins)};")


SCHEMA = "\n".join(["CREATE TABLE IF NOT EXISTS names(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"] + [
    _coded_table(t) if t in CODED else f"CREATE TABLE IF NOT EXISTS {t}(model TEXT NOT NULL DEFAULT '', {cols}, PRIMARY KEY(model, {pk}));"
    for t, (cols, pk) in TABLES.items()])



STORE_NAME = "results.sqlite"


class Store:
    """The results store of one run directory."""

    def __init__(self, run_dir: str | Path, readonly: bool = False, model: str = ""):
        """Open (or create) the store, as a view of ``model``'s rows ('' = a single-model run,
        or a multi-model run's own rows). ``readonly``: open an existing store for reading only
        (``report``, ``export``), which works on read-only media too. A damaged file, a
        full or read-only disk are :class:`~vheads._errors.VheadsError` (one line)."""
        self.path = Path(run_dir) / STORE_NAME
        self.model = model
        try:
            if readonly:
                self.db = _connect_readonly(self.path)
                self.db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a damaged file fails here
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(self.path, isolation_level=None)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
            self.scoped = _has_model_column(self.db)
            self.coded = _has_names(self.db)  # schema 4; a new store too
            self._names: dict[str, int] | None = None  # text -> id of ``names``, read in each transaction
            if not readonly:  # a new store, or tables a later version added
                schema = (SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION};" if self.coded else
                          SCHEMA_V3 + "PRAGMA user_version = 3;" if self.scoped else SCHEMA_V2)
                self.db.executescript(schema)
                for table in TABLES.keys() - BUILTIN_TABLES:  # the registered tables (register_table)
                    self._create_registered(table, views=False)  # the views come once every column is there
                self._add_later_columns()
            if self.scoped:
                self._create_model_views()
            elif readonly:
                self._fill_later_columns()
            elif model:
                raise VheadsError(f"results store {self.path} was written by a single-model vheads (schema 2); "
                                  f"it has no rows of model {model!r}")
        except (sqlite3.DatabaseError, OSError) as e:
            explained = storage_error(e, self.path)
            if explained is None:  # e.g. MissingFileError: already one line
                raise
            raise explained from None

    def _create_registered(self, table: str, views: bool = True) -> None:
        """CREATE a table of :func:`register_table` (and, on a model's view, its view)."""
        cols, pk = TABLES[table]
        model = "model TEXT NOT NULL DEFAULT '', " if self.scoped else ""
        self.db.execute(f"CREATE TABLE IF NOT EXISTS main.{table}({model}{cols}, PRIMARY KEY({'model, ' if model else ''}{pk}))")
        if self.scoped and views:
            self._create_model_views()

    def _stored_columns(self, table: str) -> set[str]:
        return {r[1] for r in self.db.execute(f"PRAGMA main.table_info({table})")}

    def _select_list(self, table: str) -> str:
        """``table``'s columns, ``NULL AS c`` for a column a later vheads added that this
        (older, read-only) store lacks: the metric columns of a run made before them."""
        have = self._stored_columns(table)
        return ", ".join(c if c in have or not have else f"NULL AS {c}" for c in columns(table))

    def _add_later_columns(self) -> None:
        """A writable store of an older vheads gets the columns added since (as NULL)."""
        for table, (cols, _) in TABLES.items():
            have = self._stored_columns(table)
            for col in cols.split(", "):
                if col.split()[0] not in have:
                    self.db.execute(f"ALTER TABLE main.{table} ADD COLUMN {col}")

    def _fill_later_columns(self) -> None:
        """A read-only schema-2 store lacking later columns: TEMP VIEWs that add them as NULL."""
        for table in TABLES:
            have = self._stored_columns(table)
            if have and not set(columns(table)) <= have:
                self.db.execute(f"CREATE TEMP VIEW IF NOT EXISTS {table} AS SELECT {self._select_list(table)} FROM main.{table}")

    def has_metric(self, metric: str, table: str = "outcomes") -> bool:
        """Whether every row of ``table`` holds ``metric`` (a store of an older vheads, or a
        run resumed across versions, has NULL there)."""
        col = METRIC_COLUMNS[metric]
        return not self.db.execute(f"SELECT 1 FROM {table} WHERE {col} IS NULL LIMIT 1").fetchone()

    def _create_model_views(self) -> None:
        """On this connection, each table name is a TEMP VIEW of ``self.model``'s rows."""
        literal = "'" + self.model.replace("'", "''") + "'"
        for table in TABLES:
            self.db.execute(f"CREATE TEMP VIEW IF NOT EXISTS {table} AS SELECT {self._select_list(table)} "
                            f"FROM main.{table} WHERE model = {literal}")
        # a stored table this process has not registered (a stage's own: register_table): its columns as stored
        stored = {n for (n,) in self.db.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")}
        for table in sorted(stored - set(TABLES) - {"names"} - {f"coded_{t}" for t in CODED}):
            cols = [r[1] for r in self.db.execute(f"PRAGMA main.table_info({table})")]
            if "model" in cols:
                self.db.execute(f"CREATE TEMP VIEW IF NOT EXISTS {table} AS SELECT {', '.join(c for c in cols if c != 'model')} "
                                f"FROM main.{table} WHERE model = {literal}")

    def models(self) -> list[str]:
        """The models with rows in this store, '' first where present (a schema-2 store: [''])."""
        if not self.scoped:
            return [""]
        return [m for (m,) in self.db.execute("SELECT model FROM main.meta UNION SELECT model FROM main.units ORDER BY model")]

    def close(self) -> None:
        self.db.close()

    # ---- meta ------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, **values) -> None:
        with self.transaction():
            for k, v in values.items():
                self._insert("meta", (k, v if isinstance(v, str) else json.dumps(v)), "OR REPLACE")

    # ---- units -----------------------------------------------------------------------------
    def done_units(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT unit_id FROM units")}

    @contextmanager
    def transaction(self):
        """All or nothing; a failed write (full disk, damaged file) is one clear line."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            self._names = None  # what another connection added, and nothing a rolled-back write left
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
                if tuples:
                    self._insert(table, tuples, "OR REPLACE", many=True)
            self._insert("units", (unit_id, kind, time.time(), seconds))

    def _insert(self, table: str, values, conflict: str = "", many: bool = False) -> None:
        """INSERT one tuple (or ``many``) of ``table``'s view columns, in order, into this
        model's rows; a tuple may stop before the last columns (they stay NULL)."""
        if table not in TABLES:
            raise ValueError(f"unknown results-store table {table!r} (a stage's own table: vheads.store.register_table)")
        if table not in BUILTIN_TABLES:  # registered after this store opened, perhaps
            self._create_registered(table)
        rows = values if many else [values]
        n = len(rows[0])
        names = ", ".join(columns(table)[:n])  # a shorter tuple leaves the last columns NULL (the metric columns)
        stored = table
        if self.coded and table in CODED:  # schema 4: text keys as ids of ``names``
            rows, stored = self._encode(table, rows), f"coded_{table}"
        if self.scoped:  # the view is read-only: write the stored table, model first
            sql = f"INSERT {conflict} INTO main.{stored} (model, {names}) VALUES ({','.join('?' * (n + 1))})"
            self.db.executemany(sql, [(self.model, *r) for r in rows])
        else:
            self.db.executemany(f"INSERT {conflict} INTO main.{table} ({names}) VALUES ({','.join('?' * n)})", rows)

    def _encode(self, table: str, rows: list[tuple]) -> list[tuple]:
        """``rows`` of ``table`` with its :data:`CODED` columns as ids of ``names`` (new text
        gets the next ids, written in the same transaction)."""
        if self._names is None:
            self._names = dict(self.db.execute("SELECT name, id FROM main.names"))
        known, new = self._names, []
        at = [i for i, c in enumerate(columns(table)) if c in CODED[table]]

        def code(v) -> int:
            if v not in known:
                known[v] = len(known) + 1  # ids 1..n: every name is kept
                new.append((known[v], v))
            return known[v]

        if not at or not rows:
            return rows
        cols = list(zip(*rows))  # column by column: one lookup per coded value, the rest as they are
        get = known.get
        for i in (i for i in at if i < len(cols)):  # a shorter tuple leaves the last columns out
            cols[i] = [get(v) or code(v) for v in cols[i]]  # ids start at 1
        out = list(zip(*cols))
        if new:
            self.db.executemany("INSERT INTO main.names (id, name) VALUES (?, ?)", new)
        return out

    def query(self, sql: str, *args) -> list[tuple]:
        return self.db.execute(sql, args).fetchall()


#: the schema-2 tables (a store written before multi-model runs): no ``model`` column
SCHEMA_V2 = "\n".join(f"CREATE TABLE IF NOT EXISTS {t}({cols}, PRIMARY KEY({pk}));" for t, (cols, pk) in TABLES.items())


def _has_names(db: sqlite3.Connection) -> bool:
    """Schema 4 (coded keys, a ``names`` table), or a new, empty store (made as schema 4)."""
    have = {n for (n,) in db.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")}
    return "names" in have or "meta" not in have


def _has_model_column(db: sqlite3.Connection) -> bool:
    """Schema 3 (a ``model`` column) or later; a new, empty store counts as schema 3."""
    cols = [r[1] for r in db.execute("PRAGMA main.table_info(meta)")]
    return not cols or "model" in cols


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """Open the store for reading without creating a file beside it.

    A closed store has no ``-wal`` / ``-shm`` file (the last writer checkpoints and deletes
    them), so all of it is in ``results.sqlite``: it is opened ``immutable=1``, which makes
    SQLite create no WAL index (``mode=ro`` alone would leave ``-wal`` / ``-shm`` in the run
    folder). With a WAL present (a study writing now, or killed), ``mode=ro`` reads through
    it; on read-only media, where SQLite cannot make the WAL index, ``immutable=1`` again
    (nothing can write there, so the file cannot change while it is read)."""
    if not path.is_file():
        raise MissingFileError(f"no results store at {path}; pass the run directory a `vheads study` wrote")
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    if not any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-shm")):
        return sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None)
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
