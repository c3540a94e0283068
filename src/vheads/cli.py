"""The ``vheads`` command: a thin layer over the library (each command calls one function).

This module and the command modules it mounts import typer and the standard library
only; each command imports the library it needs (torch, transformers) in its body, so
``vheads --help``, ``vheads CMD --help`` and a mistyped flag answer at once
(``tests/test_cli_startup.py``).
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
import typer.core

from vheads import _options
from vheads._quiet import one_line_warning as _one_line_warning  # noqa: F401  (re-exported)
from vheads._quiet import quiet_libraries as _quiet_libraries

#: the order ``vheads --help`` lists the commands in: a study's workflow, then the tools around it
COMMAND_ORDER = ("study", "discover", "overlap", "evaluate", "audit", "causal-map", "report", "export", "compare",
                 "plan", "doctor", "models", "data", "tiny")


class _WorkflowOrder(typer.core.TyperGroup):
    def list_commands(self, ctx) -> list[str]:
        rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
        return sorted(super().list_commands(ctx), key=lambda name: (rank.get(name, len(rank)), name))


app = typer.Typer(cls=_WorkflowOrder, add_completion=False, no_args_is_help=True,
                  help="Find and test the visual attention heads of VLMs.")


@app.callback()
def main() -> None:
    """vheads: discover visual heads, test necessity (NCS) and steerability (CERS) against random controls."""


@app.command()
def models(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """The supported model families and what each adapter knows."""
    # the shipped copy of vheads.models.describe_adapters() (reading it needs no torch)
    rows = json.loads((Path(__file__).parent / "models" / "adapters.json").read_text())
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        typer.echo(f"{r['family']}: model types {', '.join(r['model_types'])}")
        typer.echo(f"  image token {r['image_token']!r}; template {r['template']!r}")
        typer.echo(f"  chat-template image: {r['template_image']}")
        for key, label in (("image_tokens", "image tokens"), ("box_to_tokens", "box -> tokens"), ("softmax_layers", "softmax heads")):
            if r.get(key):
                typer.echo(f"  {label}: {r[key]}")
        typer.echo(f"  tested with transformers {', '.join(r['tested_with_transformers'])}")
        typer.echo(f"  {r['notes']}")


@app.command()
def study(
    config: Annotated[Optional[Path], typer.Argument(help="study config (TOML); default: the built-in tiny study")] = None,  # noqa: UP007
    out: Annotated[Path, typer.Option(help="run directory (rerun the same command to resume)")] = Path("runs/study"),
    print_config: Annotated[bool, typer.Option("--print-config", help="print the default config and exit")] = False,
    model: Annotated[Optional[str], typer.Option(help="override the config's model (or its models: a study of this one alone)")] = None,  # noqa: UP007
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bars or library chatter; warnings print one line each")] = False,
    skip_doctor: Annotated[bool, typer.Option("--skip-doctor", help="start even if the doctor's fast checks fail (recorded in the run)")] = False,
    system_prompt: Annotated[Optional[str], typer.Option(help="override the config's system_prompt (a system turn before each prompt)")] = None,  # noqa: UP007
    chat_template: Annotated[Optional[Path], typer.Option(help="override the config's chat_template (a Jinja file replacing the checkpoint's)")] = None,  # noqa: UP007
) -> None:
    """The whole study: discovery x evaluation against random controls, then the report."""
    from vheads.study import default_toml, load_config

    if print_config:  # with --model: the question templates that apply to that model
        typer.echo(default_toml(model or "tiny"), nl=False)
        return
    cfg = _fail_clearly(load_config, config, model=model, system_prompt=system_prompt,
                        chat_template=None if chat_template is None else str(chat_template))
    from vheads.study import run_study  # torch loads here, once the config is known to be good

    t0 = time.time()
    with _quiet_libraries(quiet):
        res = _fail_clearly(_resumable, out, run_study, cfg, out, progress=not quiet, skip_doctor=skip_doctor)
    typer.echo(f"study finished in {time.time() - t0:.0f} s ({res.units_computed} work units computed this run)")
    for stage, secs in res.seconds.items():
        typer.echo(f"  {stage:<11} {secs:7.1f} s")
    if res.report:
        typer.echo(f"report: {res.report}")


@app.command()
def evaluate(
    headset: Annotated[Optional[list[Path]], typer.Option(help="head-set file(s): from `vheads discover`, or a plain head list (JSON: a list of (layer, head) pairs, or an object whose 'heads' is one); repeat for several")] = None,  # noqa: UP007
    heads: Annotated[Optional[list[str]], typer.Option("--heads", help="a head list on the command line, 0-based: L1H0,L2H3 (with --model); repeat for several head-sets")] = None,  # noqa: UP007
    test: Annotated[list[str], typer.Option(help="cers, cers-sym, ncs, ncs-grid, text, grounding; repeat for several")] = ["cers", "ncs"],  # noqa: B006
    controls: Annotated[str, typer.Option(help="e.g. layer-matched:100,any-layer:100")] = "layer-matched:100,any-layer:100",
    n: Annotated[int, typer.Option(help="items per evaluation set (a benchmark file: at most its rows)")] = 24,
    beta: Annotated[float, typer.Option(help="steering strength (CERS) under --beta-rule fixed")] = 1e4,
    beta_rule: Annotated[str, typer.Option(help="fixed (--beta) or controls[:TOL]: the study's rule, the largest beta of 1..1e4 at which 5 layer-matched draws' CERS has RMS <= TOL (default 0.05)")] = "fixed",
    rows: Annotated[str, typer.Option(help="row group masks act at (NCS, NCS_grid): all, image, question, last")] = "all",
    steer_rows: Annotated[str, typer.Option(help="row group CERS steers at: all (default), image, question, last")] = "all",
    seed: Annotated[int, typer.Option(help="seed of items and control draws")] = 0,
    model: Annotated[Optional[str], typer.Option(help="model (default: the one a head-set file names, found by its recorded folder or hub id)")] = None,  # noqa: UP007
    revision: _options.Revision = None,
    device: _options.Device = "cpu",
    dtype: _options.Dtype = "auto",
    device_map: _options.DeviceMap = None,
    quantize: _options.Quantize = None,
    trust_remote_code: _options.TrustRemoteCode = False,
    force: Annotated[bool, typer.Option("--force", help="use head-sets discovered on another model")] = False,
    batch_size: Annotated[int, typer.Option(help="head-sets per batched forward")] = 128,
    json_out: Annotated[bool, typer.Option("--json", help="machine-readable output with per-item outcomes, beta, n, seed, the model and each head list")] = False,
    out: Annotated[Optional[Path], typer.Option(help="also write that JSON document to this file")] = None,  # noqa: UP007
    source: Annotated[Optional[str], typer.Option(help="real photos (imagenet:DIR, imagefolder:DIR, hf:DIR[,SPLIT]) or a benchmark (cvbench:DIR, mcq:FILE.jsonl, …)")] = None,  # noqa: UP007
    cell: Annotated[int, typer.Option(help="real photos: pixels per grid cell")] = 224,
    system_prompt: Annotated[Optional[str], typer.Option(help="a system turn before each prompt (default: what the chat template does without one)")] = None,  # noqa: UP007
    chat_template: Annotated[Optional[Path], typer.Option(help="a Jinja file replacing the checkpoint's chat template")] = None,  # noqa: UP007
    ablation: Annotated[str, typer.Option(help="what hiding S means: attention (mask its keys; default), zero, mean, resample (its head outputs; NCS and text only)")] = "attention",
    reference_n: Annotated[Optional[int], typer.Option(help="--ablation mean: reference items per kind (default --n)")] = None,  # noqa: UP007
    grounding_rows: Annotated[str, typer.Option(help="grounding: query rows of the maps: last, qspan, out")] = "last",
    aggregation: Annotated[str, typer.Option(help="grounding: a head-set's map: mean-norm (mean of per-head image-normalised maps), mean-raw")] = "mean-norm",
    box_threshold: Annotated[float, typer.Option(help="grounding: the box rule keeps cells at least this fraction of the peak")] = 0.5,
    connectivity: Annotated[int, typer.Option(help="grounding: connected components with 4 or 8 neighbours")] = 8,
    refer: Annotated[Optional[str], typer.Option(help="grounding on a referring corpus: refer:DIR[,DATASET,SPLIT[,SPLITBY]] (refer API + COCO train2014) or refcoco-hf:DIR[,SPLIT] (lmms-lab parquet)")] = None,  # noqa: UP007
    controls_h: Annotated[int, typer.Option(help="h >= 1: Besag-Clifford sequential rank p over each exchangeable control's draws in draw order (stops at the h-th reaching S); 0: fixed-R rank p")] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bars or library chatter; warnings print one line each")] = False,
) -> None:
    """Test head-sets (CERS, NCS, NCS_grid, text arm, grounding) against random controls."""
    from vheads.study import evaluate_heads

    res = evaluate_heads(headset or [], heads or [], test, controls, n, beta, beta_rule, rows, steer_rows, seed, model,
                         revision, device, dtype, device_map, quantize, trust_remote_code, force, batch_size, out, source,
                         cell, system_prompt, chat_template, ablation, reference_n, grounding_rows, aggregation,
                         box_threshold, connectivity, refer, controls_h, quiet, progress=not (json_out or quiet))
    typer.echo(res.json() if json_out else res.text())


@app.command()
def audit(
    model: _options.Model = "tiny",
    n: Annotated[int, typer.Option(help="items per set (a benchmark file: at most its rows)")] = 24,
    seed: Annotated[int, typer.Option(help="seed of the items")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="one JSON document: per set its n, mean P(key), expected range and ok")] = False,
    source: Annotated[Optional[str], typer.Option(help="real photos (imagenet:DIR, imagefolder:DIR, hf:DIR[,SPLIT]) or a benchmark (cvbench:DIR, mcq:FILE.jsonl, …)")] = None,  # noqa: UP007
    cell: Annotated[int, typer.Option(help="real photos: pixels per grid cell")] = 224,
    revision: _options.Revision = None,
    device: _options.Device = "cpu",
    dtype: _options.Dtype = "auto",
    device_map: _options.DeviceMap = None,
    quantize: _options.Quantize = None,
    trust_remote_code: _options.TrustRemoteCode = False,
) -> None:
    """Baseline audit of the evaluation sets: oracle, floor, matched, mismatched, leak."""
    from vheads.evaluation import run_baseline_audit

    rep = run_baseline_audit(model, n, seed, source, cell, revision, device, dtype, device_map, quantize, trust_remote_code)
    if json_out:
        typer.echo(json.dumps(rep, indent=1))
        return
    for name, r in rep.items():
        flag = "ok" if r["ok"] else "OUT OF RANGE"
        typer.echo(f"{name:<11} n={r['n']:<4} mean P(key) = {r['mean_p_key']:.3f}   expected {r['expected'][0]:.2f}–{r['expected'][1]:.2f}   {flag}")


@app.command()
def doctor(
    model: Annotated[str, typer.Option(help="'tiny', a local folder or a hub id")] = "tiny",
    device: _options.Device = "cpu",
    dtype: _options.Dtype = "auto",
    device_map: _options.DeviceMap = None,
    quantize: _options.Quantize = None,
    config: Annotated[Optional[Path], typer.Option(help="study config (TOML) whose projected time to print; default: the built-in study")] = None,  # noqa: UP007
    json_out: Annotated[bool, typer.Option("--json", help="one JSON document")] = False,
) -> None:
    """Check vheads on your own checkpoint and device before a long study (exit 1: an invariant failed)."""
    from vheads.study import load_config

    study = _fail_clearly(load_config, config, model=model)  # its sizes and the questions this model is asked (no torch)
    _options.check_load_flags(device, device_map, quantize)  # before any work, each refusal naming its flag
    from vheads.doctor import doctor as run_doctor

    from vheads.study import study_rows

    rep = _fail_clearly(run_doctor, model, device, dtype, study=study, study_rows=study_rows, device_map=device_map,
                        quantization=quantize)
    if json_out:
        from vheads._io import json_safe  # a NaN (a check that broke) is written as null

        typer.echo(json.dumps(json_safe(rep.to_dict()), indent=1, allow_nan=False))
    else:
        typer.echo(rep.text())
    if not rep.ok:
        typer.echo(f"error: doctor: invariant(s) failed on {model}: {', '.join(rep.failed)}", err=True)
        raise typer.Exit(1)


@app.command()
def plan(
    config: Annotated[Optional[Path], typer.Argument(help="study config (TOML); default: the built-in tiny study")] = None,  # noqa: UP007
    model_layout: Annotated[Optional[str], typer.Option("--model-layout", help="a built-in layout (qwen3-vl-8b, qwen3-vl-8b-paper, qwen3-vl-2b, tiny) or a JSON file; default: the config's model")] = None,  # noqa: UP007
    rates: Annotated[Optional[Path], typer.Option(help="rates file (JSON, per layout); default: the shipped measured rates")] = None,  # noqa: UP007
    json_out: Annotated[bool, typer.Option("--json", help="one JSON document")] = False,
) -> None:
    """Every stage's forward rows and projected GPU- and CPU-hours of a study, without loading weights."""
    from vheads.study import load_config_for_plan
    from vheads.study import plan_study, plan_text

    cfg = load_config_for_plan(config)
    d = plan_study(cfg, model_layout, rates)
    typer.echo(json.dumps(d, indent=1) if json_out else plan_text(d))



@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="a study's run directory")],
    out: Annotated[Optional[Path], typer.Option(help="write the report here (default: RUN_DIR; for a run on read-only media)")] = None,  # noqa: UP007
    metric: Annotated[Optional[str], typer.Option(help="the metric the tables lead with: p4, logprob or logit-diff (default: the run's config key metric)")] = None,  # noqa: UP007
    screenshot: Annotated[bool, typer.Option("--screenshot", help="also write report.png, the top of the page in headless Chromium (where installed)")] = False,
) -> None:
    """Rebuild the report (Markdown + HTML) of a study run from its results store."""
    from vheads.store import METRIC_COLUMNS

    if metric is not None and metric not in METRIC_COLUMNS:
        _die(f"--metric: unknown metric {metric!r}; choose from {', '.join(METRIC_COLUMNS)}")
    if not (run_dir / "results.sqlite").is_file():
        _die(f"{str(run_dir)!r} holds no results.sqlite; is it a study run directory?")
    if out is not None:  # before any work: the report is a folder of files
        from vheads._errors import check_output_path

        _fail_clearly(check_output_path, out, "--out")
    from vheads.study import build_report_if_available

    png = (out if out is not None else run_dir) / "report.png"
    before = png.stat().st_mtime_ns if png.is_file() else None
    path = _fail_clearly(build_report_if_available, run_dir, out, metric, screenshot)
    typer.echo(f"report: {path}")
    if screenshot and (not png.is_file() or png.stat().st_mtime_ns == before):  # the screenshot never fails the report: say so
        from vheads.report import CHROMIUM_NAMES, find_chromium

        why = (f"no Chromium on PATH ({', '.join(CHROMIUM_NAMES)}); install one (Debian: apt-get install chromium)"
               if find_chromium() is None else "Chromium ran but wrote no image")
        typer.echo(f"⚠ --screenshot: report.png not written: {why}", err=True)


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="a study's run directory")],
    format: Annotated[str, typer.Option("--format", help="parquet (typed, compressed) or csv")] = "parquet",
    out: Annotated[Optional[Path], typer.Option(help="output folder (default: RUN_DIR/export)")] = None,  # noqa: UP007
) -> None:
    """Export the per-item outcomes and tables of a run as Parquet (default) or CSV."""
    if format not in ("parquet", "csv"):
        _die(f"--format {format!r}: choose parquet or csv")
    if not (run_dir / "results.sqlite").is_file():
        _die(f"{str(run_dir)!r} holds no results.sqlite; is it a study run directory?")
    from vheads.study import export_run

    for p in _fail_clearly(export_run, run_dir, format, out):
        typer.echo(str(p))


@app.command()
def compare(
    runs: Annotated[list[str], typer.Argument(help="finished single-model run folders (RUN or NAME=RUN), configs alike but for the model")],
    out: Annotated[Path, typer.Option(help="folder for the cross-model report")] = Path("runs/compare"),
) -> None:
    """The cross-model tables (seed Tables 8, 19, 27; Fig. 7) from separate single-model runs."""
    from vheads.study import compare_runs

    typer.echo(f"report: {_fail_clearly(compare_runs, runs, out)}")


@app.command("causal-map")
def causal_map(
    model: Annotated[str, typer.Option(help="'tiny', a local model folder or a hub id")] = "tiny",
    test: Annotated[list[str], typer.Option(help="ncs, ncs-grid and/or text; repeat for several")] = ["ncs", "ncs-grid", "text"],  # noqa: B006
    method: Annotated[list[str], typer.Option(help="exact (each head alone), atp (its gradient estimate) and/or regression (random multi-head ablations); repeat for several")] = ["exact"],  # noqa: B006
    n: Annotated[int, typer.Option(help="items per evaluation set (NCS: per arm)")] = 16,
    rows: Annotated[str, typer.Option(help="row group the heads are hidden at (NCS, NCS_grid): all, image, question, last")] = "all",
    ablation: Annotated[str, typer.Option(help="what hiding a head means: attention (its logits to the keys are -inf), zero or resample (its output; ncs and text only)")] = "attention",
    layers: Annotated[bool, typer.Option("--layers/--no-layers", help="also test every whole layer (exact map)")] = True,
    subsets: Annotated[int, typer.Option(help="regression: random head subsets in the design (at least the number of heads + 1)")] = 256,
    q: Annotated[Optional[float], typer.Option(help="regression: each head in a subset with probability q, in (0, 1) (default 0.5)")] = None,  # noqa: UP007
    m: Annotated[Optional[int], typer.Option(help="regression: subsets of exactly m heads instead of --q")] = None,  # noqa: UP007
    backups: Annotated[int, typer.Option(help="co-ablate this many top heads of the one-head map with every other head (backup heads; 0: none)")] = 0,
    k: Annotated[Optional[int], typer.Option(help="top-k of the recall between methods (default: the model's default k)")] = None,  # noqa: UP007
    seed: Annotated[int, typer.Option(help="seed of the items and the design")] = 0,
    batch_size: Annotated[int, typer.Option(help="head-sets per batched forward")] = 128,
    out: Annotated[Path, typer.Option(help="folder for causal_map.json and causal_map.png")] = Path("causal_map"),
    device: _options.Device = "cpu",
    dtype: _options.Dtype = "auto",
    metric: Annotated[str, typer.Option(help="metric the figure and the printed top heads show: p4, logprob, logit-diff")] = "p4",
    top: Annotated[int, typer.Option(help="print this many heads of largest effect per test")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="print one JSON document: every map, the regression's fits, the backup pairs, Spearman rho and top-k recall between every pair of methods")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bars or library chatter; warnings print one line each")] = False,
) -> None:
    """The causal map of every head: exact (each head alone, every whole layer), AtP, and head attribution by regression."""
    from vheads._io import json_safe
    from vheads.causal import run_causal_map

    res = run_causal_map(model, test, method, n, rows, ablation, layers, subsets, q, m, backups, k, seed, batch_size, out,
                         device, dtype, metric, top, quiet)
    from vheads.report import write_causal_figures

    write_causal_figures(res)
    typer.echo(json.dumps(json_safe(res.to_dict(top)), allow_nan=False) if json_out else res.text(top))


def _resumable(out: Path, fn, *args, **kwargs):
    """Run ``fn``; SIGINT (Ctrl-C) or SIGTERM stops it with one line saying how to resume.

    SIGTERM is raised as a KeyboardInterrupt, so both unwind the same way: the work unit in
    flight is dropped (its transaction rolls back), every finished one stays committed, the
    run lock is released. Exit code 128 + the signal's number (130, 143), as a shell reports it."""
    import signal

    def on_term(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        return fn(*args, **kwargs)
    except KeyboardInterrupt as e:
        name = str(e) or "SIGINT"
        typer.echo(f"error: interrupted ({name}); the work units finished so far are committed to {out / 'results.sqlite'}; "
                   "rerun the same command to resume", err=True)
        raise typer.Exit(128 + int(getattr(signal, name, signal.SIGINT))) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _die(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _fail_clearly(fn, *args, **kwargs):
    """Run ``fn``; an error a user can act on becomes one line on stderr and exit 2.

    That is :class:`~vheads._errors.VheadsError` (and the ``ValueError`` /
    ``FileNotFoundError`` / ``RuntimeError`` of library checks), a failed write (full or
    read-only disk: :func:`~vheads._errors.storage_error` says what is safe and what to
    do) and a damaged results store. Anything else is a bug and keeps its traceback.
    """
    import sqlite3

    from vheads._errors import storage_error

    try:
        return fn(*args, **kwargs)
    except (typer.Exit, typer.Abort):  # already decided (click's Exit is a RuntimeError)
        raise
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        _die(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    except (OSError, sqlite3.DatabaseError) as e:
        explained = storage_error(e)
        if explained is None:
            raise
        _die(str(explained))


def _one_line_errors(command):
    """Every command runs inside :func:`_fail_clearly` (the one place errors become exit 2)."""

    @functools.wraps(command)
    def guarded(*args, **kwargs):
        return _fail_clearly(command, *args, **kwargs)

    return guarded


def _mount_optional() -> None:
    """Sub-commands that live beside their library code."""
    try:
        from vheads.tiny import app as tiny_app

        app.add_typer(tiny_app, name="tiny", help="The built-in tiny model: train and evaluate it.")
    except ImportError:
        pass
    try:
        from vheads.data import data_app

        app.add_typer(data_app, name="data", help="Preview the items vheads builds (contact sheets).")
    except ImportError:
        pass
    try:
        from vheads.discovery import discover_command, overlap_command

        app.command("discover")(discover_command)
        app.command("overlap")(overlap_command)
    except ImportError:
        pass


_mount_optional()
for _info in [*app.registered_commands, *(c for g in app.registered_groups for c in g.typer_instance.registered_commands)]:
    _info.callback = _one_line_errors(_info.callback)

if __name__ == "__main__":
    app()
