"""Thin CLI commands over the discovery library; the lead mounts them as
``vheads discover`` and ``vheads overlap``. Each calls one library function that a
notebook can call with the same arguments (:func:`discover_headsets`, :func:`overlap_report`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vheads._errors import MAX_ITEMS, MAX_SEED, VheadsError, check_range
from vheads._io import json_safe
from vheads.discovery._discover import check_out_folder, discover_headsets, load_corpora
from vheads.discovery._files import load_headset
from vheads.discovery._scores import SOURCES
from vheads.discovery._overlap import overlap_report, plot_overlap_heatmap


def json_dumps(obj) -> str:
    """JSON for ``--json``: NaN and infinities become ``null`` (strict JSON has neither)."""
    return json.dumps(json_safe(obj), indent=1, allow_nan=False)


def check_positive(**values: int) -> None:
    """Each named option must be at least 1 (``--splits 0`` is refused before any work)."""
    for name, v in values.items():
        if v < 1:
            raise VheadsError(f"--{name.replace('_', '-')} must be at least 1, got {v}")


def discover(
    model: Annotated[str, typer.Option(help="'tiny', a local model folder or a hub id")] = "tiny",
    corpus: Annotated[list[str], typer.Option(help="comics, photo, strips:FOLDER, coco:IMAGES[,ANN.json]; repeat for several")] = ["comics", "photo"],  # noqa: B006
    query: Annotated[list[str], typer.Option(help="ordinal and/or referring; repeat for several")] = ["ordinal", "referring"],  # noqa: B006
    source: Annotated[list[str], typer.Option(help="last, qspan and/or out; repeat for several")] = ["last", "qspan", "out"],  # noqa: B006
    k: Annotated[Optional[int], typer.Option(help="head-set size (per layer with --per-layer); default: scaled to the model")] = None,  # noqa: UP007
    per_layer: Annotated[bool, typer.Option("--per-layer", help="top-k of every layer instead of flat top-k")] = False,
    n: Annotated[int, typer.Option(help="discovery items per corpus and query type")] = 32,
    seed: Annotated[int, typer.Option(help="seed of the items (synthetic corpora, asked panels)")] = 0,
    out: Annotated[Path, typer.Option(help="folder for the head-set files")] = Path("headsets"),
    json_out: Annotated[bool, typer.Option("--json", help="print machine-readable JSON")] = False,
    max_new_tokens: Annotated[int, typer.Option(help="greedy answer length for the 'out' source")] = 4,
    panel_size: Annotated[int, typer.Option(help="COCO panel side in pixels")] = 224,
    device: Annotated[str, typer.Option(help="torch device")] = "cpu",
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16")] = "float32",
    device_map: Annotated[Optional[str], typer.Option(help="place the layers instead of --device: auto, balanced, sequential or a device (needs accelerate)")] = None,  # noqa: UP007
    quantize: Annotated[Optional[str], typer.Option(help="4bit or 8bit weights through bitsandbytes (CUDA only)")] = None,  # noqa: UP007
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="let the checkpoint run its own Python code")] = False,
    with_overlap: Annotated[bool, typer.Option("--overlap", help="then print the overlap matrix with half-split ceilings and write overlap.png")] = False,
    splits: Annotated[int, typer.Option(help="half-splits for the noise ceilings (with --overlap)")] = 200,
    force: Annotated[bool, typer.Option("--force", help="overwrite head-set files already in --out")] = False,
) -> list[Path]:
    """Rank heads under every corpus × query × source setting and write one head-set file each."""
    from vheads.models import load_model
    from vheads.models import check_load_options

    # every input is checked, and every corpus loaded, before the model is
    check_load_options(device, device_map, quantize)
    check_positive(max_new_tokens=max_new_tokens, panel_size=panel_size, splits=splits)
    check_range("--n", n, 1, MAX_ITEMS)
    check_range("--seed", seed, 0, MAX_SEED)
    check_range("--splits", splits, 1, MAX_ITEMS)
    check_out_folder(out, force)
    for s in source:
        if s not in SOURCES:
            raise VheadsError(f"unknown attention source {s!r}; choose one of: {', '.join(SOURCES)}")
    corpora = load_corpora(corpus, query, n, seed, panel_size)
    lm = load_model(model, dtype=dtype, device=device, device_map=device_map, quantization=quantize,
                    trust_remote_code=trust_remote_code)
    records = discover_headsets(lm, corpora, query, source, k, "per-layer" if per_layer else "flat", n, seed, out,
                                max_new_tokens, panel_size, progress=not json_out, force=force)
    paths = [r.path for r in records]
    if json_out:
        typer.echo(json_dumps([{"setting": r.setting.id, "file": str(r.path), "k": r.k, "mode": r.mode,
                                "heads": [list(h) for h in r.ranked], "n_items": r.corpus["n_items"]} for r in records]))
    else:
        for r in records:
            top = ", ".join(f"L{l}H{h}" for l, h in r.ranked[:5]) + (" …" if len(r.headset) > 5 else "")
            typer.echo(f"{r.setting.id:<14} k={r.k:<3} n={r.corpus['n_items']:<4} {top}  -> {r.path}")
    if with_overlap:
        if not json_out:
            typer.echo("")
        overlap(paths, splits=splits, seed=seed, json_out=json_out, figure=Path(out) / "overlap.png")
    return paths


def overlap(
    headsets: Annotated[list[Path], typer.Argument(help="head-set JSON files written by `vheads discover`")],
    splits: Annotated[int, typer.Option(help="random half-splits for the noise ceilings")] = 200,
    seed: Annotated[int, typer.Option(help="seed of the half-splits")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="print machine-readable JSON")] = False,
    figure: Annotated[Optional[Path], typer.Option(help="write the overlap heatmap here (.png/.pdf/.svg)")] = None,  # noqa: UP007
):
    """Top-k overlap matrix of head-sets, split-half noise ceilings, and each pair's overlap at half size as a
    fraction of their geometric-mean ceiling (both taken at the same number of items)."""
    check_positive(splits=splits)
    check_range("--splits", splits, 1, MAX_ITEMS)
    check_range("--seed", seed, 0, MAX_SEED)
    if figure is not None and Path(figure).is_dir():
        raise VheadsError(f"--figure {figure} is a folder; pass a file name (.png, .pdf or .svg)")
    records = [load_headset(p) for p in headsets]
    rep = overlap_report(records, splits, seed, progress=not json_out)
    if figure is not None:
        plot_overlap_heatmap(rep.matrix, rep.ids, figure, k=rep.k, ceilings=rep.ceilings)
    if json_out:
        d = rep.to_dict()
        d["figure"] = str(figure) if figure else None
        typer.echo(json_dumps(d))
        return rep
    w = max(len(i) for i in rep.ids) + 1
    typer.echo(f"top-{rep.k} overlap ({rep.mode}); diagonal: split-half ceiling mean [2.5, 97.5] over {splits} splits")
    typer.echo(" " * w + "".join(f"{i:>{w}}" for i in rep.ids))
    for a, row in enumerate(rep.matrix):
        cells = [f"{rep.ceilings[a].mean:>{w}.1f}" if a == b else f"{int(v):>{w}}" for b, v in enumerate(row)]
        typer.echo(f"{rep.ids[a]:<{w}}" + "".join(cells))
    typer.echo("\nceilings:")
    for i, c in zip(rep.ids, rep.ceilings):
        typer.echo(f"  {i:<{w}} {c.mean:.2f} [{c.lo:.1f}, {c.hi:.1f}]")
    typer.echo(f"\noverlap at half size (mean [2.5, 97.5] over {splits} splits) / geometric-mean ceiling = fraction:")
    for p in rep.pairs:
        typer.echo(f"  {p.a} vs {p.b}: {p.half.mean:.2f} [{p.half.lo:.1f}, {p.half.hi:.1f}] / {p.geo_ceiling:.2f} = "
                   f"{p.fraction:.2f}   (all items: {p.all_items})")
    if figure is not None:
        typer.echo(f"\nfigure: {figure}")
    return rep
