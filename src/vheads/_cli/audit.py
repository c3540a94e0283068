"""``vheads audit``: the baseline audit of the evaluation sets (:func:`vheads.evaluation.run_baseline_audit`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from vheads import _options
from vheads._cli._common import Cell, Source


def audit(
    model: _options.Model = "tiny",
    n: Annotated[int, typer.Option(help="items per set (a benchmark file: at most its rows)")] = 24,
    seed: Annotated[int, typer.Option(help="seed of the items")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="one JSON document: per set its n, mean P(key), expected range and ok")] = False,
    source: Source = None,
    cell: Cell = 224,
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
