"""What every command shares: the one place an error a user can act on becomes one line on
stderr and exit 2 (:func:`fail_clearly`, wrapped around each command by :func:`one_line_errors`).

Typer and the standard library only at module level (``tests/test_cli_startup.py``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Optional

import typer

# the options several commands share, with one help text each (the model-loading flags are in vheads._options)
Quiet = Annotated[bool, typer.Option("--quiet", help="no progress bars or library chatter; warnings print one line each")]
Source = Annotated[Optional[str], typer.Option(help="real photos (imagenet:DIR, imagefolder:DIR, hf:DIR[,SPLIT]) or a benchmark (cvbench:DIR, mcq:FILE.jsonl, …)")]  # noqa: UP007
Cell = Annotated[int, typer.Option(help="real photos: pixels per grid cell")]
RunDir = Annotated[Path, typer.Argument(help="a study's run directory")]


def die(msg: str) -> None:
    """``error: msg`` on stderr, exit 2 (a usage error)."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def check_run_dir(run_dir: Path) -> None:
    """A study's run directory holds its results store; anything else is refused (exit 2)."""
    if not (run_dir / "results.sqlite").is_file():
        die(f"{str(run_dir)!r} holds no results.sqlite; is it a study run directory?")


def fail_clearly(fn, *args, **kwargs):
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
        die(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    except (OSError, sqlite3.DatabaseError) as e:
        explained = storage_error(e)
        if explained is None:
            raise
        die(str(explained))


def one_line_errors(command):
    """``command`` run inside :func:`fail_clearly` (every command is: ``vheads._cli`` wraps them)."""

    @functools.wraps(command)
    def guarded(*args, **kwargs):
        return fail_clearly(command, *args, **kwargs)

    return guarded
