"""``vheads data``: look at the items vheads builds before running a model on them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evaluation and discovery items: preview them.")


@app.command()
def preview(
    source: Annotated[str, typer.Argument(help="synthetic, imagenet:DIR, imagefolder:DIR, hf:DIR, a benchmark (cvbench:DIR, mcq:FILE.jsonl, …), comics, strips:DIR, coco:IMAGES")],
    kind: Annotated[str, typer.Option(help="item kind: grid-neutral, grid-oracle, grid-blank, class-matched, class-mismatched, text, strip-ordinal, strip-referring")],
    out: Annotated[Path, typer.Option(help="the contact sheet (.png)")],
    n: Annotated[int, typer.Option(help="items on the sheet")] = 8,
    seed: Annotated[int, typer.Option(help="seed of the items")] = 0,
    cell: Annotated[int, typer.Option(help="pixels per grid cell (photo and benchmark sources)")] = 224,
) -> None:
    """A contact sheet of built items: image with its regions framed, question, options, key."""
    from vheads.data.preview import write_preview

    try:
        path = write_preview(source, kind, out, n, seed, cell)
    except (ValueError, FileNotFoundError) as e:  # bad input: one line, exit 2 (as every vheads command)
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"preview: {path}")
