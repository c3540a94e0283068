"""``vheads study``: the whole study over :func:`vheads.study.run_study`, resumable after Ctrl-C."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from vheads._cli._common import Quiet


def study(
    config: Annotated[Optional[Path], typer.Argument(help="study config (TOML); default: the built-in tiny study")] = None,  # noqa: UP007
    out: Annotated[Path, typer.Option(help="run directory (rerun the same command to resume)")] = Path("runs/study"),
    print_config: Annotated[bool, typer.Option("--print-config", help="print the default config and exit")] = False,
    model: Annotated[Optional[str], typer.Option(help="override the config's model (or its models: a study of this one alone)")] = None,  # noqa: UP007
    quiet: Quiet = False,
    skip_doctor: Annotated[bool, typer.Option("--skip-doctor", help="start even if the doctor's fast checks fail (recorded in the run)")] = False,
    system_prompt: Annotated[Optional[str], typer.Option(help="override the config's system_prompt (a system turn before each prompt)")] = None,  # noqa: UP007
    chat_template: Annotated[Optional[Path], typer.Option(help="override the config's chat_template (a Jinja file replacing the checkpoint's)")] = None,  # noqa: UP007
) -> None:
    """The whole study: discovery x evaluation against random controls, then the report."""
    from vheads._quiet import quiet_libraries
    from vheads.study import default_toml, load_config

    if print_config:  # with --model: the question templates that apply to that model
        typer.echo(default_toml(model or "tiny"), nl=False)
        return
    cfg = load_config(config, model=model, system_prompt=system_prompt,
                      chat_template=None if chat_template is None else str(chat_template))
    from vheads.study import run_study  # torch loads here, once the config is known to be good

    t0 = time.time()
    with quiet_libraries(quiet):
        res = resumable(out, run_study, cfg, out, progress=not quiet, skip_doctor=skip_doctor)
    typer.echo(f"study finished in {time.time() - t0:.0f} s ({res.units_computed} work units computed this run)")
    for stage, secs in res.seconds.items():
        typer.echo(f"  {stage:<11} {secs:7.1f} s")
    if res.report:
        typer.echo(f"report: {res.report}")


def resumable(out: Path, fn, *args, **kwargs):
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
