"""``vheads doctor``: :func:`vheads.doctor.doctor` on a checkpoint and device, with the study's sizes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vheads import _options


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

    study = load_config(config, model=model)  # its sizes and the questions this model is asked (no torch)
    _options.check_load_flags(device, device_map, quantize)  # before any work, each refusal naming its flag
    from vheads.doctor import doctor as run_doctor
    from vheads.study import study_rows

    rep = run_doctor(model, device, dtype, study=study, study_rows=study_rows, device_map=device_map, quantization=quantize)
    if json_out:
        from vheads._io import json_safe  # a NaN (a check that broke) is written as null

        typer.echo(json.dumps(json_safe(rep.to_dict()), indent=1, allow_nan=False))
    else:
        typer.echo(rep.text())
    if not rep.ok:
        typer.echo(f"error: doctor: invariant(s) failed on {model}: {', '.join(rep.failed)}", err=True)
        raise typer.Exit(1)
