"""``vheads causal-map``: the exact causal map of every head of a model, as a file and a figure.

A thin layer over :func:`vheads.causal.exact_causal_map`; the library (torch) is imported
inside the command, so ``--help`` and a bad flag answer at once (tests/test_cli_startup.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from vheads._errors import VheadsError, check_range
from vheads._quiet import quiet_libraries


def causal_map(
    model: Annotated[str, typer.Option(help="'tiny', a local model folder or a hub id")] = "tiny",
    test: Annotated[list[str], typer.Option(help="ncs, ncs-grid and/or text; repeat for several")] = ["ncs", "ncs-grid", "text"],  # noqa: B006
    n: Annotated[int, typer.Option(help="items per evaluation set (NCS: per arm)")] = 16,
    rows: Annotated[str, typer.Option(help="row group the heads are hidden at (NCS, NCS_grid): all, image, question, last")] = "all",
    ablation: Annotated[str, typer.Option(help="what hiding a head means: attention (its logits to the keys are -inf), zero or resample (its output; ncs and text only)")] = "attention",
    layers: Annotated[bool, typer.Option("--layers/--no-layers", help="also test every whole layer")] = True,
    seed: Annotated[int, typer.Option(help="seed of the items")] = 0,
    batch_size: Annotated[int, typer.Option(help="head-sets per batched forward")] = 128,
    out: Annotated[Path, typer.Option(help="folder for causal_map.json and causal_map.png")] = Path("causal_map"),
    device: Annotated[str, typer.Option(help="torch device")] = "cpu",
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16")] = "float32",
    metric: Annotated[str, typer.Option(help="metric the figure and the printed top heads show: p4, logprob, logit-diff")] = "p4",
    top: Annotated[int, typer.Option(help="print this many heads of largest effect per test")] = 10,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bars or library chatter; warnings print one line each")] = False,
) -> None:
    """The exact causal map: every head alone (and every whole layer) hidden in NCS, NCS_grid and the text arm."""
    from vheads._errors import check_output_path

    from vheads.causal import check_causal_request

    check_causal_request(test, rows, n=n, batch_size=batch_size, seed=seed, ablation=ablation)
    check_range("--top", top, 0, 1_000_000)
    if metric not in ("p4", "logprob", "logit-diff"):
        raise VheadsError(f"--metric {metric!r}: choose from p4, logprob, logit-diff")
    out = check_output_path(out)
    if out.exists() and not out.is_dir():
        raise VheadsError(f"--out {out} is a file, not a folder")

    from vheads._errors import make_output_folder
    from vheads._io import atomic_write
    from vheads.causal import causal_item_sets, exact_causal_map, save_causal_map
    from vheads.data import default_templates
    from vheads.engine import Engine
    from vheads.models import load_model

    sets = causal_item_sets(test, n, lambda kind: seed, templates=default_templates(model))
    with quiet_libraries(quiet):
        lm = load_model(model, dtype=dtype, device=device)
        maps = exact_causal_map(Engine(lm), sets, test, rows=rows, ablation=ablation, layers=layers, seed=seed,
                                batch_size=batch_size, progress=not quiet)
    from vheads.report import causal_map_figure

    out = make_output_folder(out)
    path = save_causal_map(maps, out / "causal_map.json", {"id": model, "n_layers": lm.n_layers, "n_heads": lm.n_heads})
    png = causal_map_figure(maps, metric)
    atomic_write(out / "causal_map.png", lambda fh: fh.write(png), mode="wb")
    for key, m in maps.items():
        e = m.head_map(metric)
        order = [i for i in (-e).ravel().argsort(kind="stable") if e.ravel()[i] == e.ravel()[i]][:top]  # NaN left out
        typer.echo(f"{key}: top heads by effect ({metric}): "
                   + ", ".join(f"L{i // m.n_heads}H{i % m.n_heads} {e.ravel()[i]:+.4f}" for i in order))
    typer.echo(f"causal map: {path}")
    typer.echo(f"figure: {out / 'causal_map.png'}")
