"""``vheads plan``: a study's forward rows and projected hours (:func:`vheads.study.plan_study`), no weights loaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer


def plan(
    config: Annotated[Optional[Path], typer.Argument(help="study config (TOML); default: the built-in tiny study")] = None,  # noqa: UP007
    model_layout: Annotated[Optional[str], typer.Option("--model-layout", help="a built-in layout (qwen3-vl-8b, qwen3-vl-8b-paper, qwen3-vl-2b, tiny) or a JSON file; default: the config's model")] = None,  # noqa: UP007
    rates: Annotated[Optional[Path], typer.Option(help="rates file (JSON, per layout); default: the shipped measured rates")] = None,  # noqa: UP007
    json_out: Annotated[bool, typer.Option("--json", help="one JSON document")] = False,
) -> None:
    """Every stage's forward rows and projected GPU- and CPU-hours of a study, without loading weights."""
    from vheads.study import load_config_for_plan, plan_study, plan_text

    d = plan_study(load_config_for_plan(config), model_layout, rates)
    typer.echo(json.dumps(d, indent=1) if json_out else plan_text(d))
