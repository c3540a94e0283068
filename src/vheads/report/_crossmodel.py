"""The cross-model section: do a study's findings replicate across models? (seed Tables 8,
19, 24, 27 and Fig. 7)

Built from the store of one multi-model run (``models = [...]``: each model's rows are
read through its scoped view, :class:`vheads.store.Store`), or from several single-model
runs by ``vheads compare`` (:func:`vheads.study.compare_runs`) — the same tables either way. Heads are
discovered anew per model and every model is tested against its own controls (drawn on its
own layer × head grid), so each number below compares a model's S only with that model's
random head-sets:

- **models**: each model's layers × heads, the heads that can be chosen, k and R;
- **replication summary** (Table 8 / 24 layout): per model and test (NCS, CERS), the range
  of ``T_S`` over the query-span and output-token settings and the range of their
  layer-matched controls' mean ``mean_r T_r``, with the last-token set (``cm-ord-last``
  where present) beside them;
- **per setting** (Table 19 layout): ``T_S`` vs. the mean of its R layer-matched draws and
  the rank p ``(1 + #{T_r ≥ T_S}) / (R + 1)``;
- **pointing suite per setting** (Table 24 layout): CERS and NCS of each S, its
  layer-matched draw(s) in parentheses;
- **pointing suite** (Table 27): CERS pooled over the suite's tasks per model and head-set,
  with a two-sided one-sample t-test against zero, ``t = mean / (sd / √n)`` (sd with n − 1),
  ``p = 2 · P(T_{n−1} ≥ |t|)``;
- **overlap** (Fig. 7): per model, the overlap of the native sets (ord-last, ref-qsp,
  ref-out) with each other and with uniform random draws of their size;
- **one figure** of every model's S against its layer-matched band (Fig. 3 layout).
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps

from vheads._errors import make_output_folder, safe_name
from vheads.evaluation import rank_p
from vheads.report._data import RunData, load_run
from vheads.report._doc import Figure, Section, Table
from vheads.report._figures import band_figure
from vheads.report._ood import _values as ood_values
from vheads.report._overlaps import native_overlap_bars, overlap_bars_figure
from vheads.report._tables import ALPHA, TEST_NAMES, fmt, fmt_p
from vheads.report._write import write_report
from vheads.store import Store

CONTROL = "layer-matched"  # the control every cross-model comparison uses (seed: layer-matched draws)
SPAN_SOURCES = ("qspan", "out")
CROSSMODEL_FIGURES = ("crossmodel_band", "crossmodel_overlap")  # the figures of the cross-model report  # Table 8's range: the query-span and output-token sets

HOW = (
    "Heads are discovered anew on every model (k scaled to each model, stated below) and each model's S is tested "
    "against layer-matched random head-sets drawn on that model's own layer × head grid. A finding replicates "
    "where S stands apart from its own random band on each model: the summary gives ranges over the query-span "
    "and output-token settings with the last-token set beside them; the per-setting tables give the rank p against "
    "its n distinct head-sets (floor 1/(n+1)); the pointing suite tests each model's CERS against zero."
)


@dataclass
class ModelRun:
    """One model's results: its report data and its pointing-suite per-item values
    (``(task, setting, test, role) -> values``, role 'S' or 'random')."""

    name: str
    run: RunData
    ood: dict[tuple[str, str, str, str], np.ndarray]


def load_model_run(run_dir: str | Path, model: str = "", name: str | None = None, metric: str | None = None) -> ModelRun:
    run = load_run(run_dir, model, metric)
    store = Store(run_dir, readonly=True, model=model)
    try:
        ood = ood_values(store)
    finally:
        store.close()
    return ModelRun(name or model, run, ood)


def multi_model_names(run_dir: str | Path) -> list[str]:
    """The model names of a multi-model run, in config order ([] for a single-model run);
    each a safe name (it names the model's report folder)."""
    store = Store(run_dir, readonly=True)
    try:
        models = store.get_meta("models")
    finally:
        store.close()
    return [safe_name(m.get("name"), f"{store.path}: meta 'models' name") for m in json.loads(models)] if models else []


def is_multi_model(run_dir: str | Path) -> bool:
    return bool(multi_model_names(run_dir))


# ---- tables ---------------------------------------------------------------------------------


def _ncs_test(run: RunData) -> str:
    return "ncs-all" if any((s, "ncs-all") in run.cells for s in run.settings) else "ncs"


def _tests(run: RunData) -> list[str]:
    return [_ncs_test(run), "cers"]


def _heads(run: RunData) -> int | None:
    L, H = run.shape
    if not (L and H):
        return None
    return H * (len(run.attention_layers) if run.attention_layers is not None else L)


def _R(run: RunData) -> int:
    return max((len(c.controls.get(CONTROL, ())) for c in run.cells.values()), default=0)


def _ks(run: RunData) -> str:
    """The head-set sizes k of a run's settings ("3", or "3, 4" where they differ)."""
    return ", ".join(map(str, sorted({int(d["k"]) for d in run.discovery.values() if d.get("k") is not None}))) or "–"


def models_table(runs: list[ModelRun]) -> Table:
    rows = []
    for m in runs:
        L, H = m.run.shape
        rows.append([m.name, m.run.model_id, f"{L} × {H}" if L and H else "–", str(_heads(m.run) or "–"),
                     _ks(m.run), str(len(m.run.settings)), str(_R(m.run))])
    return Table("Models", ["Model", "model id", "layers × heads", "heads", "k", "settings", f"R ({CONTROL})"], rows,
                 "heads: the heads a head-set can hold (a hybrid model's softmax layers only); k: the head-set size "
                 "used on that model (scaled to its heads unless the config fixes it).", text_cols=2)


def _s_and_random(run: RunData, setting: str, test: str) -> tuple[float | None, float | None]:
    """``T_S`` and the mean of the layer-matched draws' ``T_r`` of one cell."""
    cell = run.cells.get((setting, test))
    if cell is None:
        return None, None
    t_s = float(cell.s.mean()) if cell.s is not None and len(cell.s) else None
    draws = cell.controls.get(CONTROL)
    return t_s, (float(draws.mean()) if draws is not None and len(draws) else None)


def _range(values: list[float]) -> str:
    if not values:
        return "–"
    lo, hi = min(values), max(values)
    return fmt(lo) if len(values) == 1 else f"{fmt(lo)} – {fmt(hi)}"


def last_token_setting(run: RunData) -> str | None:
    """The last-token set shown beside the ranges: the first ordinal last-token setting
    (the seed's cm-ord-last), else the first last-token setting."""
    last = [s for s in run.settings if run.discovery.get(s, {}).get("source") == "last"]
    ordinal = [s for s in last if run.discovery[s].get("query") == "ordinal"]
    return (ordinal or last or [None])[0]


def replication_table(runs: list[ModelRun]) -> Table | None:
    rows = []
    for m in runs:
        run = m.run
        span = [s for s in run.settings if run.discovery.get(s, {}).get("source") in SPAN_SOURCES]
        last = last_token_setting(run)
        row = [m.name, _ks(run)]
        for test in _tests(run):
            pairs = [_s_and_random(run, s, test) for s in span]
            row += [_range([p[0] for p in pairs if p[0] is not None]), _range([p[1] for p in pairs if p[1] is not None])]
            s_last, r_last = _s_and_random(run, last, test) if last else (None, None)
            row += [fmt(s_last), fmt(r_last)]
        rows.append(row)
    if not any(any(c != "–" for c in r[2:]) for r in rows):
        return None
    lasts = sorted({last_token_setting(m.run) or "–" for m in runs})
    return Table("Replication across models (seed Tables 8 / 24 layout)",
                 ["Model", "k", "S", "random", "S", "random", "S", "random", "S", "random"], rows,
                 f"NCS (necessity, all rows) and CERS (steerability) per model. Query span + output: the range over "
                 f"the settings with those attention sources of T_S, and of the mean over the {CONTROL} draws of "
                 f"each setting. Last token: {', '.join(lasts)}. Heads discovered anew per model.",
                 groups=[("", 2), ("NCS · query span + output", 2), ("NCS · last token", 2),
                         ("CERS · query span + output", 2), ("CERS · last token", 2)])


def per_setting_table(runs: list[ModelRun], test: str) -> Table | None:
    """``test`` is 'ncs' (each run's all-row NCS) or 'cers'."""
    settings = list(dict.fromkeys(s for m in runs for s in m.run.settings))
    rows, any_value = [], False
    for s in settings:
        row = [s]
        for m in runs:
            t = _ncs_test(m.run) if test == "ncs" else test
            cell = m.run.cells.get((s, t))
            draws = cell.distinct(CONTROL) if cell is not None and CONTROL in cell.controls else None  # one per head-set
            if cell is None or cell.s is None or not len(cell.s) or draws is None or not len(draws):
                row.append("–")
                continue
            t_s = float(cell.s.mean())
            rp = rank_p(t_s, draws)
            s_txt = f"**{fmt(t_s)}**" if rp.n_at_least == 0 else fmt(t_s)
            row.append(f"{s_txt} vs. {fmt(float(draws.mean()))} ({fmt_p(rp.p)})")
            any_value = True
        rows.append(row)
    if not any_value:
        return None
    name = TEST_NAMES.get("ncs-all" if test == "ncs" else test, test)
    return Table(f"{name} per setting and model (seed Table 19 layout)", ["Setting", *(m.name for m in runs)], rows,
                 f"T_S vs. the mean of the model's n distinct {CONTROL} head-sets (one-sided rank p = (1 + #controls ≥ S)/(n + 1), "
                 "floor 1/(n+1)). Bold: above every one.")


def one_sample_t(x: np.ndarray) -> tuple[float, float]:
    """Two-sided one-sample t-test of mean 0: ``t = mean / (sd / √n)`` (sd with n − 1),
    ``p = 2 · P(T_{n−1} ≥ |t|)``; NaN where n < 2 or sd = 0."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    sd = float(np.std(x, ddof=1)) if n >= 2 else 0.0
    if sd == 0.0:
        return float("nan"), float("nan")
    t = float(np.mean(x)) / (sd / np.sqrt(n))
    return t, float(2 * sps.t.sf(abs(t), n - 1))


def pointing_table(runs: list[ModelRun]) -> Table | None:
    rows = []
    for m in runs:
        tasks = sorted({k[0] for k in m.ood})
        for setting in m.run.settings:
            for role in ("S", "random"):
                parts = [m.ood[(t, setting, "cers", role)] for t in tasks if (t, setting, "cers", role) in m.ood]
                if not parts:
                    continue
                x = np.concatenate(parts)
                t, p = one_sample_t(x)
                mean = fmt(float(x.mean()))
                tested = bool(np.isfinite(p))
                rows.append([m.name, setting if role == "S" else f"{setting} · {CONTROL}", str(len(tasks)), str(len(x)),
                             f"**{mean}**" if tested and p < ALPHA else mean, fmt(t, 2) if tested else "–",
                             fmt_p(p) if tested else "–"])
    if not rows:
        return None
    return Table("Pointing-suite CERS per model (seed Table 27 layout)",
                 ["Model", "Head-set", "tasks", "n", "CERS", "t", "p"], rows,
                 f"CERS pooled over the suite's tasks (n items), for each discovered S and its {CONTROL} draw(s) "
                 f"(averaged per item). t, p: two-sided one-sample t-test against zero; bold: p < {ALPHA}.", text_cols=2)


def _pooled_ood(m: ModelRun, setting: str, test: str, role: str) -> float | None:
    """A head-set's pointing-suite statistic, items of all tasks pooled: CERS = mean; NCS =
    mean matched drop − mean mismatched drop."""
    def pooled(t):
        parts = [v for (task, s, tt, r), v in m.ood.items() if s == setting and tt == t and r == role]
        return np.concatenate(parts) if parts else None

    if test == "cers":
        x = pooled("cers")
        return None if x is None else float(x.mean())
    a, b = pooled("ncs-matched"), pooled("ncs-mismatched")
    return None if a is None or b is None else float(a.mean() - b.mean())


def pointing_per_setting_table(runs: list[ModelRun], test: str) -> Table | None:
    """Seed Table 24 layout: per setting and model, S's pointing-suite CERS or NCS with its
    layer-matched draw(s) in parentheses."""
    settings = list(dict.fromkeys(s for m in runs for s in m.run.settings))
    rows = []
    for s in settings:
        cells = []
        for m in runs:
            v_s, v_r = _pooled_ood(m, s, test, "S"), _pooled_ood(m, s, test, "random")
            cells.append("–" if v_s is None else f"{fmt(v_s)} ({fmt(v_r)})")
        rows.append([s, *cells])
    if all(c == "–" for r in rows for c in r[1:]):
        return None
    what = "CERS" if test == "cers" else "NCS (matched − mismatched mean drop)"
    return Table(f"Pointing-suite {what.split(' ')[0]} per setting and model (seed Table 24 layout)",
                 ["Setting", *(m.name for m in runs)], rows,
                 f"{what} of each discovered S, items of all tasks pooled; in parentheses its {CONTROL} draw(s), "
                 "averaged per item.")


def overlap_groups(runs: list[ModelRun]) -> list[tuple]:
    """Fig. 7's bar groups, one per model and corpus with native sets (titled ``model · corpus``)."""
    return [(f"{m.name} · {corpus}", *rest) for m in runs for corpus, *rest in native_overlap_bars(m.run)]


def overlap_table(runs: list[ModelRun]) -> Table | None:
    rows = []
    for title, k, labels, vals, lo, hi in overlap_groups(runs):
        for lab, v, a, b in zip(labels, vals, lo, hi):
            rows.append([title, lab, str(k), str(int(v)) if a == b else f"{fmt(float(v), 1)} [{int(a)}, {int(b)}]"])
    if not rows:
        return None
    return Table("Native head-sets against each other and a uniform random draw (seed Fig. 7)",
                 ["Model · corpus", "Pair", "k", "shared heads"], rows,
                 "Random: mean [min, max] over the stored uniform draws of k heads on that model.", text_cols=2)


def crossmodel_band_figure(runs: list[ModelRun]) -> bytes | None:
    """Every model's S against its layer-matched band: one row per model · setting."""
    labels, cells = [], {}
    for m in runs:
        ncs = _ncs_test(m.run)
        for s in m.run.settings:
            label = f"{m.name} · {s}"
            for test, key in ((ncs, "ncs-all"), ("cers", "cers")):
                if (s, test) in m.run.cells:
                    cells[(label, key)] = m.run.cells[(s, test)]
            if any((label, t) in cells for t in ("ncs-all", "cers")):
                labels.append(label)
    return band_figure(labels, cells, ["ncs-all", "cers"], shown=(CONTROL,), row_label="model · setting")


def crossmodel_blocks(runs: list[ModelRun]) -> list:
    """The section's tables and figures (those the runs have data for)."""
    blocks: list = [models_table(runs)]
    blocks += [t for t in (replication_table(runs), per_setting_table(runs, "ncs"), per_setting_table(runs, "cers")) if t]
    png = crossmodel_band_figure(runs)
    if png:
        blocks.append(Figure("crossmodel_band", png, f"Every model's discovered S (red diamond) against its {CONTROL} "
                             "draws (dots; bar: mean ± SD), one row per model · setting."))
    blocks += [t for t in (pointing_per_setting_table(runs, "cers"), pointing_per_setting_table(runs, "ncs"),
                           pointing_table(runs)) if t]
    png = overlap_bars_figure(overlap_groups(runs))
    if png:
        blocks.append(Figure("crossmodel_overlap", png, "Fig. 7 layout per model: top-k overlap of the native sets with "
                             "each other (blue) and with uniform random draws of k heads (grey: mean, bar: min–max).",
                             wide=True))
    ot = overlap_table(runs)
    if ot:
        blocks.append(ot)
    return blocks


# ---- reports --------------------------------------------------------------------------------


def build_crossmodel_report(runs: list[ModelRun], out: str | Path, source: str, links: list[str] = ()) -> Path:
    """Write the cross-model report of ``runs`` into ``out`` (``report.md``, ``report.html``,
    ``figures/``); ``links``: paragraphs placed after the tables (e.g. each model's report)."""
    out = make_output_folder(out, "pass --out to a writable folder for the report")
    section = Section("crossmodel", "Replication across models", HOW, [*crossmodel_blocks(runs), *links])
    subtitle = f"{source} · {len(runs)} models · built {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}"
    return write_report(out, f"vheads cross-model report — {', '.join(m.name for m in runs)}", subtitle, [], [section],
                        CROSSMODEL_FIGURES)
