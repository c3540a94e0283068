"""``vheads causal-map``: :func:`vheads.causal.run_causal_map`, its figures
(:func:`vheads.report.write_causal_figures`) and its summary or JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vheads import _options
from vheads._cli._common import Quiet


def causal_map(
    model: Annotated[str, typer.Option(help="'tiny', a local model folder or a hub id")] = "tiny",
    test: Annotated[list[str], typer.Option(help="ncs, ncs-grid and/or text; repeat for several")] = ["ncs", "ncs-grid", "text"],  # noqa: B006
    method: Annotated[list[str], typer.Option(help="exact (each head alone), atp (its gradient estimate) and/or regression (random multi-head ablations); repeat for several")] = ["exact"],  # noqa: B006
    n: Annotated[int, typer.Option(help="items per evaluation set (NCS: per arm)")] = 16,
    rows: Annotated[str, typer.Option(help="row group the heads are hidden at (NCS, NCS_grid): all, image, question, last")] = "all",
    ablation: Annotated[str, typer.Option(help="what hiding a head means: attention (its logits to the keys are -inf), zero or resample (its output; ncs and text only)")] = "attention",
    layers: Annotated[bool, typer.Option("--layers/--no-layers", help="also test every whole layer (exact map)")] = True,
    subsets: Annotated[int, typer.Option(help="regression: random head subsets in the design (at least the number of heads + 1)")] = 256,
    q: Annotated[Optional[float], typer.Option(help="regression: each head in a subset with probability q, in (0, 1) (default 0.5)")] = None,  # noqa: UP007
    m: Annotated[Optional[int], typer.Option(help="regression: subsets of exactly m heads instead of --q")] = None,  # noqa: UP007
    backups: Annotated[int, typer.Option(help="co-ablate this many top heads of the one-head map with every other head (backup heads; 0: none)")] = 0,
    k: Annotated[Optional[int], typer.Option(help="top-k of the recall between methods (default: the model's default k)")] = None,  # noqa: UP007
    seed: Annotated[int, typer.Option(help="seed of the items and the design")] = 0,
    batch_size: Annotated[int, typer.Option(help="head-sets per batched forward")] = 128,
    out: Annotated[Path, typer.Option(help="folder for causal_map.json and causal_map.png")] = Path("causal_map"),
    device: _options.Device = "cpu",
    dtype: _options.Dtype = "auto",
    metric: Annotated[str, typer.Option(help="metric the figure and the printed top heads show: p4, logprob, logit-diff")] = "p4",
    top: Annotated[int, typer.Option(help="print this many heads of largest effect per test")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="print one JSON document: every map, the regression's fits, the backup pairs, Spearman rho and top-k recall between every pair of methods")] = False,
    quiet: Quiet = False,
) -> None:
    """The causal map of every head: exact (each head alone, every whole layer), AtP, and head attribution by regression."""
    from vheads._io import json_safe
    from vheads.causal import run_causal_map

    res = run_causal_map(model, test, method, n, rows, ablation, layers, subsets, q, m, backups, k, seed, batch_size, out,
                         device, dtype, metric, top, quiet)
    from vheads.report import write_causal_figures

    write_causal_figures(res)
    typer.echo(json.dumps(json_safe(res.to_dict(top)), allow_nan=False) if json_out else res.text(top))
