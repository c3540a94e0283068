"""`vheads tiny train` and `vheads tiny eval`: thin wrappers over :func:`train` and :func:`evaluate`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(help="The built-in tiny VLM: train it, evaluate it.", no_args_is_help=True)


@app.command("train")
def train_cmd(
    out: Path = typer.Option(..., "--out", help="folder to write the model files and training.json to"),
    seed: int = typer.Option(0, help="seed of weights, data and batch order"),
    max_steps: int | None = typer.Option(None, "--max-steps", help="one-stage run of at most this many steps (default: the shipped two-stage recipe)"),
    threads: int = typer.Option(2, help="torch CPU threads"),
) -> None:
    """Train the tiny Qwen3-VL on the synthetic world (about 30 minutes on 2 CPU cores)."""
    from vheads.tiny._train import MC_MIX, train, train_shipped

    if max_steps is None:
        record = train_shipped(out, seed=seed, threads=threads, log=typer.echo)
    else:
        record = train(out, seed=seed, max_steps=max_steps, batch_mix=MC_MIX, threads=threads, log=typer.echo)
    typer.echo(json.dumps(record["held_out"], indent=2))


@app.command("eval")
def eval_cmd(
    model: str = typer.Option("tiny", "--model", help="model folder (default: the built-in tiny model)"),
    n: int = typer.Option(200, "--n", help="held-out items per question kind"),
    seed: int | None = typer.Option(None, help="seed of the held-out items (default: the fixed evaluation seed)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Held-out accuracy per question kind (and mean P(key) over the four letters for lettered kinds)."""
    from vheads.tiny._evaluate import EVAL_SEED, evaluate

    report = evaluate(model, n_per_kind=n, seed=EVAL_SEED if seed is None else seed)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    typer.echo(f"{'kind':<24} {'n':>5} {'accuracy':>9} {'P(key)':>7}")
    for kind, r in report.items():
        pk = f"{r['p_key']:.3f}" if "p_key" in r else ""
        typer.echo(f"{kind:<24} {r['n']:>5} {r['accuracy']:>9.3f} {pk:>7}")
