"""``vheads evaluate``: the options of :func:`vheads.study.evaluate_heads`, and its table or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from vheads import _options
from vheads._cli._common import Cell, Quiet, Source


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
    source: Source = None,
    cell: Cell = 224,
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
    quiet: Quiet = False,
) -> None:
    """Test head-sets (CERS, NCS, NCS_grid, text arm, grounding) against random controls."""
    from vheads.study import evaluate_heads

    res = evaluate_heads(headset or [], heads or [], test, controls, n, beta, beta_rule, rows, steer_rows, seed, model,
                         revision, device, dtype, device_map, quantize, trust_remote_code, force, batch_size, out, source,
                         cell, system_prompt, chat_template, ablation, reference_n, grounding_rows, aggregation,
                         box_threshold, connectivity, refer, controls_h, quiet, progress=not (json_out or quiet))
    typer.echo(res.json() if json_out else res.text())
