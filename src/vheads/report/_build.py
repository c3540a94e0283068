"""``build_report(run_dir)``: the study's report from its results store.

Writes into ``run_dir`` (or ``out_dir``):

- ``report.md`` — Markdown, figures linked from ``figures/``;
- ``report.html`` — one self-contained page (inline CSS, figures as ``data:`` PNG URIs,
  no external reference), the file to open or send;
- ``figures/*.png`` — every figure;
- ``headsets/<setting>.json`` — each discovered setting's head-set file (:mod:`vheads.report._headsets`).

The sections are the registered ones (:mod:`vheads.report._registry`, one module each
under :mod:`vheads.report.sections`), in their order; sections whose data the run lacks
(no sweeps, no audit, …) are left out, not shown empty. The warnings of every checklist
(the reporting protocol's) are repeated at the top of both files.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from vheads._errors import make_output_folder, path_inside
from vheads.report._crossmodel import CROSSMODEL_FIGURES, build_crossmodel_report, is_multi_model, load_model_run, multi_model_names
from vheads.report._data import RunData, load_run, settings_text
from vheads.report._doc import Section
from vheads.report._headsets import write_headset_files
from vheads.report._registry import registered_sections
from vheads.report._write import write_report


#: the sections that take the longest, started first when they are built in parallel
#: (measured on the default study: the causal maps, the score maps, the stability curves)
_SLOW_FIRST = ("causal", "discovery", "stability", "comparisons", "sweeps", "overlap")

#: the run being built in a forked worker (inherited from the parent, never pickled)
_RUN: RunData | None = None


def report_workers() -> int:
    """How many processes build the sections: ``VHEADS_REPORT_WORKERS`` if set, else one per
    core up to 2 where the platform forks (Linux); 1 builds them in this process."""
    import multiprocessing as mp
    import os

    env = os.environ.get("VHEADS_REPORT_WORKERS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            return 1
    if "fork" not in mp.get_all_start_methods() or os.uname().sysname != "Linux":
        return 1
    return max(1, min(2, len(os.sched_getaffinity(0))))


def _worker_start() -> None:
    """A forked section worker's signals as a fresh process has them: the parent's handlers
    (``vheads study`` raises KeyboardInterrupt on SIGTERM, to stop with a resume line) would
    print a ``ForkPoolWorker`` traceback when the pool ends its workers."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


def _build_one(i: int):
    """Section ``i`` of the registry built for the run the forked worker inherited."""
    return i, [b for b in registered_sections()[i].build(_RUN) if b is not None]


def build_sections(run: RunData, workers: int | None = None) -> tuple[list[Section], list[str]]:
    """The report's sections (empty ones dropped) and the warnings of their checklists.

    With ``workers`` > 1 (default :func:`report_workers`) the sections are drawn in forked
    worker processes, the slowest first (figures are the report's cost and each section's
    are its own); the page is the same, in the registry's order."""
    global _RUN
    specs = registered_sections()
    workers = report_workers() if workers is None else workers
    built: dict[int, list] = {}
    if workers > 1 and len(specs) > 1:
        import multiprocessing as mp

        rank = {sid: r for r, sid in enumerate(_SLOW_FIRST)}
        order = sorted(range(len(specs)), key=lambda i: rank.get(specs[i].id, len(rank)))
        _RUN = run
        try:
            with mp.get_context("fork").Pool(min(workers, len(specs)), initializer=_worker_start) as pool:
                for i, blocks in pool.imap_unordered(_build_one, order):
                    built[i] = blocks
                pool.close()  # every section is in: let the workers exit, not be terminated
                pool.join()
        finally:
            _RUN = None
    else:
        built = {i: [b for b in spec.build(run) if b is not None] for i, spec in enumerate(specs)}
    sections = [Section(spec.id, spec.title, spec.how_to_read, built[i]) for i, spec in enumerate(specs) if built[i]]
    warnings = [f"{c.item}: {c.warning}" for s in sections for b in s.blocks if isinstance(b, list) for c in b if c.warning]
    return sections, warnings


def build_report(run_dir: str | Path, out_dir: str | Path | None = None, model: str = "", metric: str | None = None) -> Path:
    """Build ``report.md``, ``report.html`` and ``figures/*.png`` from ``run_dir``'s results
    store (the rows of ``model``, a multi-model run's model name), its tables led by
    ``metric`` (``p4``, ``logprob``, ``logit-diff``; default: the config's); returns the path of
    ``report.html``. Rebuilding replaces the previous report. A multi-model run's report is
    the cross-model one (:func:`build_multi_model_report`), with each model's own report
    under ``models/<name>/``."""
    if not model and is_multi_model(run_dir):
        return build_multi_model_report(run_dir, out_dir, metric)
    run = load_run(run_dir, model, metric)
    out = make_output_folder(Path(out_dir) if out_dir is not None else Path(run_dir), "pass --out to a writable folder for the report")
    sections, warnings = build_sections(run)
    write_headset_files(run, out)  # RUN/headsets/<setting>.json: each setting's S, for vheads evaluate

    L, H = run.shape
    title = f"vheads report — {run.model_id}"
    subtitle = (f"Run {Path(run_dir).resolve()}" + (f" · model {model}" if model else "") + f" · {settings_text(run)}"
                + (f" · {L} layers × {H} heads" if L and H else "")
                + f" · built {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}")
    return write_report(out, title, subtitle, warnings, sections, CROSSMODEL_FIGURES)


def build_multi_model_report(run_dir: str | Path, out_dir: str | Path | None = None, metric: str | None = None) -> Path:
    """A multi-model run's report: each model's own report in ``models/<name>/`` and the
    cross-model report at the top (``metric``: as :func:`build_report`)."""
    out = make_output_folder(Path(out_dir) if out_dir is not None else Path(run_dir), "pass --out to a writable folder for the report")
    names = multi_model_names(run_dir)
    for n in names:
        build_report(run_dir, path_inside(out, "models", n), model=n, metric=metric)
    runs = [load_model_run(run_dir, n, metric=metric) for n in names]
    links = ["Each model's full report (every table of a single-model run): "
             + ", ".join(f"models/{n}/report.html" for n in names) + "."]
    return build_crossmodel_report(runs, out, f"Run {Path(run_dir).resolve()}", links)
