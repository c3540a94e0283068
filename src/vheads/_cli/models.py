"""``vheads models``: the supported model families, from the shipped copy of the adapter registry."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def models(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """The supported model families and what each adapter knows."""
    # the shipped copy of vheads.models.describe_adapters() (reading it needs no torch)
    rows = json.loads((Path(__file__).parents[1] / "models" / "adapters.json").read_text())
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
