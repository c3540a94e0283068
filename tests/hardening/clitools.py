"""Running ``vheads`` from the outside and checking a refusal: exit 2, one line, no traceback."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from vheads.cli import app

SRC = str(Path(__file__).resolve().parents[2] / "src")
#: a model path that fails if anything tries to load it: an error about the input instead
#: proves the input was checked before the model
NO_MODEL = "/nonexistent/vheads-model-never-loaded"


def vheads(*args) -> "CliRunner.Result":
    """``vheads ARGS`` in this process (typer's CliRunner)."""
    return CliRunner().invoke(app, [str(a) for a in args])


def refused(result, *fragments: str) -> str:
    """Assert exit 2 with exactly one stderr line ``error: …`` holding every fragment; return it."""
    code = getattr(result, "exit_code", getattr(result, "returncode", None))
    out = (result.stdout or "") + (result.stderr or "")
    assert code == 2, f"exit {code}: {out}"
    assert "Traceback" not in out, out
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in Path(root).rglob("*")}
