"""Thin CLI commands over the discovery library; the lead mounts them as
``vheads discover`` and ``vheads overlap``. Each calls one library function that a
notebook can call with the same arguments (:func:`discover_headsets`, :func:`overlap_report`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vheads import _options
from vheads._errors import MAX_ITEMS, MAX_SEED, VheadsError, check_range
from vheads._io import json_safe

# the library (torch, transformers) is imported inside each command: ``--help`` and a bad
# flag answer at once (tests/test_cli_startup.py)


def json_dumps(obj) -> str:
    """JSON for ``--json``: NaN and infinities become ``null`` (strict JSON has neither)."""
    return json.dumps(json_safe(obj), indent=1, allow_nan=False)


def check_positive(**values: int) -> None:
    """Each named option must be at least 1 (``--splits 0`` is refused before any work)."""
    for name, v in values.items():
        if v < 1:
            raise VheadsError(f"--{name.replace('_', '-')} must be at least 1, got {v}")


def discover(
    model: _options.Model = "tiny",
    corpus: Annotated[list[str], typer.Option(help="comics, photo, strips:FOLDER, coco:IMAGES[,ANN.json]; repeat for several")] = ["comics", "photo"],  # noqa: B006
    query: Annotated[list[str], typer.Option(help="ordinal and/or referring; repeat for several")] = ["ordinal", "referring"],  # noqa: B006
    source: Annotated[list[str], typer.Option(help="last, qspan and/or out; repeat for several")] = ["last", "qspan", "out"],  # noqa: B006
    score: Annotated[Optional[list[str]], typer.Option(help="a score point instead of the --source grid: a preset (gaze, localization, vrh, sparsemm, gaze_nosink), 'rows=out,keys=hit,...' or 'NAME:rows=...'; repeat for several")] = None,  # noqa: UP007
    k: Annotated[Optional[int], typer.Option(help="head-set size (per layer with --per-layer); default: scaled to the model")] = None,  # noqa: UP007
    per_layer: Annotated[bool, typer.Option("--per-layer", help="top-k of every layer instead of flat top-k")] = False,
    n: Annotated[int, typer.Option(help="discovery items per corpus and query type")] = 32,
    seed: Annotated[int, typer.Option(help="seed of the items (synthetic corpora, asked panels)")] = 0,
    out: Annotated[Path, typer.Option(help="folder for the head-set files")] = Path("headsets"),
    json_out: Annotated[bool, typer.Option("--json", help="print machine-readable JSON")] = False,
    max_new_tokens: Annotated[int, typer.Option(help="greedy answer length for the 'out' source")] = 4,
    panel_size: Annotated[int, typer.Option(help="COCO panel side in pixels")] = 224,
    revision: _options.Revision = None,
    device: _options.Device = "cpu",
    dtype: _options.Dtype = "auto",
    device_map: _options.DeviceMap = None,
    quantize: _options.Quantize = None,
    trust_remote_code: _options.TrustRemoteCode = False,
    with_overlap: Annotated[bool, typer.Option("--overlap", help="then print the overlap matrix with half-split ceilings and write overlap.png")] = False,
    splits: Annotated[int, typer.Option(help="half-splits for the noise ceilings (with --overlap)")] = 200,
    force: Annotated[bool, typer.Option("--force", help="overwrite head-set files already in --out")] = False,
    system_prompt: Annotated[Optional[str], typer.Option(help="a system turn before each prompt (default: what the chat template does without one)")] = None,  # noqa: UP007
    chat_template: Annotated[Optional[Path], typer.Option(help="a Jinja file replacing the checkpoint's chat template")] = None,  # noqa: UP007
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bars or library chatter; warnings print one line each")] = False,
) -> list[Path]:
    """Rank heads under every corpus × query × source setting (or × --score point) and write one head-set file each."""
    from vheads.discovery._discover import discover_headsets, load_corpora
    from vheads.discovery._files import check_out_folder
    from vheads.discovery._source_setting import SOURCES

    # every input is checked, and every corpus loaded, before the model is; the flags that
    # need no torch first, so a typo is refused at once
    check_positive(max_new_tokens=max_new_tokens, panel_size=panel_size, splits=splits)
    check_range("--n", n, 1, MAX_ITEMS)
    check_range("--seed", seed, 0, MAX_SEED)
    check_range("--splits", splits, 1, MAX_ITEMS)
    check_out_folder(out, force)
    for s in source:
        if s not in SOURCES:
            raise VheadsError(f"unknown attention source {s!r}; choose one of: {', '.join(SOURCES)}")
    named = check_scores(score, per_layer, k, with_overlap) if score else None
    from vheads.data import default_templates

    corpora = load_corpora(corpus, query, n, seed, panel_size, default_templates(model))  # the model's question set
    from vheads.models import load_model, preflight_prompts, read_chat_template

    _options.check_load_flags(device, device_map, quantize)  # asks torch what this machine has
    if chat_template is not None:
        read_chat_template(chat_template)  # exists and parses
    # the prompts can be built (template renders the image, ...), checked on the processor alone
    preflight_prompts(model, revision, chat_template=chat_template, system_prompt=system_prompt, trust_remote_code=trust_remote_code)
    from vheads._quiet import quiet_libraries

    bars = not (json_out or quiet)
    with quiet_libraries(quiet):
        lm = load_model(model, revision=revision, dtype=dtype, device=device, device_map=device_map, quantization=quantize,
                        trust_remote_code=trust_remote_code, system_prompt=system_prompt, chat_template=chat_template)
        if named is not None:
            from vheads.discovery._point_discovery import discover_scores

            records = discover_scores(lm, corpora, named, k, seed, out, max_new_tokens, progress=bars, force=force)
        else:
            records = discover_headsets(lm, corpora, query, source, k, "per-layer" if per_layer else "flat", n, seed, out,
                                        max_new_tokens, panel_size, progress=bars, force=force)
        paths = [r.path for r in records]
        rep = overlap_of_files(paths, splits, seed, Path(out) / "overlap.png", progress=bars) if with_overlap else None
    if json_out:
        listed = [{"setting": r.setting.id, "file": str(r.path), "k": r.k, "mode": r.mode,
                   "heads": [list(h) for h in r.ranked], "n_items": r.corpus["n_items"]} for r in records]
        # one JSON document: the head-set list alone, or with the overlap report beside it
        typer.echo(json_dumps(listed if rep is None else {"headsets": listed, "overlap": overlap_json(rep, Path(out) / "overlap.png")}))
        return paths
    for r in records:
        top = ", ".join(f"L{l}H{h}" for l, h in r.ranked[:5]) + (" …" if len(r.headset) > 5 else "")
        typer.echo(f"{r.setting.id:<14} k={r.k:<3} n={r.corpus['n_items']:<4} {top}  -> {r.path}")
    if rep is not None:
        typer.echo("")
        echo_overlap_table(rep, splits, Path(out) / "overlap.png")
    return paths


def check_scores(scores: list[str], per_layer: bool, k: int | None = None, with_overlap: bool = False) -> list[tuple]:
    """The ``--score`` points, named (:func:`~vheads.discovery._point_setting.parse_named_score`),
    each name once, of one size where ``--overlap`` compares them; refused before any work."""
    from vheads.discovery._point_setting import parse_named_score

    if per_layer:
        raise VheadsError("--per-layer applies to the --source grid; a score point names its own selection (select=per-layer)")
    if k is not None and k < 1:
        raise VheadsError(f"--k must be at least 1, got {k}: it would select nothing")
    named = [parse_named_score(s, f"--score {s!r}") for s in scores]
    names = [n for n, _ in named]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise VheadsError(f"--score: the name {twice[0]!r} is given twice; give each point its own name (NAME:axis=value,...)")
    if with_overlap:
        elbow = [n for n, p in named if p.select == "elbow"]
        if elbow:
            raise VheadsError(f"--overlap compares head-sets of one size, but --score {elbow[0]!r} selects by the elbow "
                              "(its size is found by scoring); run `vheads overlap` on files of one size afterwards")
        if k is None and len({p.k for _, p in named}) > 1:
            sizes = ", ".join(f"{n}: {p.k if p.k is not None else 'scaled'}" for n, p in named)
            raise VheadsError("--overlap compares head-sets of one size, but the --score points have different k "
                              f"({sizes}); pass --k")
    return named


def overlap(
    headsets: Annotated[list[Path], typer.Argument(help="head-set JSON files written by `vheads discover`")],
    splits: Annotated[int, typer.Option(help="random half-splits for the noise ceilings")] = 200,
    seed: Annotated[int, typer.Option(help="seed of the half-splits")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="print machine-readable JSON")] = False,
    figure: Annotated[Optional[Path], typer.Option(help="write the overlap heatmap here (.png/.pdf/.svg)")] = None,  # noqa: UP007
):
    """Top-k overlap of head-sets, one row per pair: on all items, at half size, each one's split-half noise
    ceiling, and the half-size overlap as a fraction of their geometric-mean ceiling (both taken at the same
    number of items) with its interval over the splits."""
    rep = overlap_of_files(headsets, splits, seed, figure, progress=not json_out)
    if json_out:
        typer.echo(json_dumps(overlap_json(rep, figure)))
    else:
        echo_overlap_table(rep, splits, figure)
    return rep


def overlap_of_files(headsets, splits: int, seed: int, figure: Path | None, progress: bool):
    """The :func:`overlap_report` of head-set files (checked first), its heatmap written to ``figure``."""
    from vheads.discovery._files import load_headset
    from vheads.discovery._overlap import overlap_report, plot_overlap_heatmap

    check_positive(splits=splits)
    check_range("--splits", splits, 1, MAX_ITEMS)
    check_range("--seed", seed, 0, MAX_SEED)
    if figure is not None and Path(figure).is_dir():
        raise VheadsError(f"--figure {figure} is a folder; pass a file name (.png, .pdf or .svg)")
    records = [load_headset(p) for p in headsets]
    rep = overlap_report(records, splits, seed, progress=progress)
    if figure is not None:
        plot_overlap_heatmap(rep.matrix, rep.ids, figure, k=rep.k, ceilings=rep.ceilings)
    return rep


def overlap_json(rep, figure: Path | None) -> dict:
    return {**rep.to_dict(), "figure": str(figure) if figure else None}


#: why a fraction of the ceiling can pass 1, said once under the table
FRACTION_NOTE = ("a fraction can exceed 1: it is a ratio of noisy overlaps (like a disattenuated correlation), "
                 "so two settings that agree as well as each agrees with itself land near 1, either side")


def echo_overlap_table(rep, splits: int, figure: Path | None) -> None:
    """One row per pair: overlap on all items, at half size, the two ceilings, and the
    fraction of their geometric mean with its interval over the splits."""
    w = max(max(len(i) for i in rep.ids), len("setting a"))
    ceiling = dict(zip(rep.ids, rep.ceilings))
    typer.echo(f"top-{rep.k} overlap ({rep.mode}): all = on all items; half = the two settings on disjoint item halves; "
               f"ceil = a setting with itself across halves; mean [2.5, 97.5] over {splits} half-splits")
    typer.echo(f"{'setting a':<{w}}  {'setting b':<{w}}  {'all':>3}  {'half':>5}  {'ceil a':>6}  {'ceil b':>6}  "
               f"{'fraction [2.5, 97.5]':>20}")
    for p in rep.pairs:
        lo, hi = (p.half.lo / p.geo_ceiling, p.half.hi / p.geo_ceiling) if p.geo_ceiling > 0 else (float("nan"),) * 2
        typer.echo(f"{p.a:<{w}}  {p.b:<{w}}  {p.all_items:>3}  {p.half.mean:>5.2f}  {ceiling[p.a].mean:>6.2f}  "
                   f"{ceiling[p.b].mean:>6.2f}  {p.fraction:>6.2f} [{lo:.2f}, {hi:.2f}]")
    if len(rep.ids) == 1:
        typer.echo(f"{rep.ids[0]}: ceiling {rep.ceilings[0].mean:.2f} [{rep.ceilings[0].lo:.1f}, {rep.ceilings[0].hi:.1f}] (one setting, no pair)")
    typer.echo(f"fraction = half / sqrt(ceil a * ceil b); {FRACTION_NOTE}")
    if figure is not None:
        typer.echo(f"figure: {figure}")
