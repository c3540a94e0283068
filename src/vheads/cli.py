"""The ``vheads`` command: a thin layer over the library (each command calls one function)."""

from __future__ import annotations

import json

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Find and test the visual attention heads of VLMs.")


@app.callback()
def main() -> None:
    """vheads: discover visual heads, test necessity (NCS) and steerability (CERS) against random controls."""


@app.command()
def models(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """The supported model families and what each adapter knows."""
    from vheads.models import ADAPTERS

    seen, rows = set(), []
    for cls in ADAPTERS.values():
        if cls in seen:
            continue
        seen.add(cls)
        rows.append(cls().describe())
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        typer.echo(f"{r['family']}: model types {', '.join(r['model_types'])}")
        typer.echo(f"  image token {r['image_token']!r}; template {r['template']!r}")
        typer.echo(f"  {r['notes']}")


def _mount_optional() -> None:
    """Sub-commands that live beside their library code."""
    try:
        from vheads.tiny._cli import app as tiny_app

        app.add_typer(tiny_app, name="tiny", help="The built-in tiny model: train and evaluate it.")
    except ImportError:
        pass
    try:
        from vheads.discovery._cli import discover, overlap

        app.command("discover")(discover)
        app.command("overlap")(overlap)
    except ImportError:
        pass


_mount_optional()

if __name__ == "__main__":
    app()
