"""Engine overhead against the physical limit, and peak memory against the token budget.

*Overhead*: a masked batched forward cannot beat a plain batched sdpa forward of the same
tokens. Both run the same :class:`vheads.engine.RowBatch` — ``rows`` copies of one
prompt of about ``image_tokens`` image tokens, with the prefix (system prompt and image)
computed once at question rows, and no prefix at all rows — once under a plan that hides
the image from ``rows`` random head-sets (the seed study's size) and once with no plan
(every layer on sdpa). Times are medians of interleaved repeats.

*Memory*: :func:`vheads.evaluation._probe.run_probes` over ``items`` items × 64 head-sets
(mask@all: no prefix, every row holds the whole prompt) at two token budgets, each in a
fresh subprocess after one warm-up forward (CPU: growth of the peak RSS, ``VmHWM``; GPU:
``max_memory_allocated`` above what was allocated before). The run also records the
largest ``rows × padded length`` any forward held: it must not exceed the budget.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks import _setup


def _pieces(probes):
    return [(i, 0, pb.n_rows) for i, pb in enumerate(probes)]


def run(lm, eng, image_tokens: int, rows: int, repeats: int, device: str, log) -> dict:
    """{row group: {"masked_s", "plain_s", "rows", "tokens", "prefix"}}."""
    from benchmarks.bench_evaluation import random_headsets
    from vheads.evaluation._probe import Action, Probe, probe_batch

    prompt = _setup.prompt_of_length(lm, image_tokens)
    headsets = random_headsets(lm.n_layers, lm.n_heads, n=rows)
    out = {}
    for group in ("question", "all"):
        probes = [Probe(prompt, Action("mask", rows=group), headsets)]
        batch, plan = probe_batch(eng, probes, _pieces(probes))
        last = [batch.length - 1]
        run_masked = lambda: eng.run(batch, plan, logits_at=last)  # noqa: E731
        run_plain = lambda: eng.run(batch, None, logits_at=last)  # noqa: E731
        t = _setup.interleaved({"masked": run_masked, "plain": run_plain}, repeats, device)
        r = {"rows": rows, "tokens": prompt.layout.n_tokens, "image_tokens": len(prompt.layout.image_positions), "prefix": batch.prefix,
             "masked_s": _setup.median(t["masked"]), "plain_s": _setup.median(t["plain"]), "times": t}
        log(f"  overhead rows={group}: masked {r['masked_s']:.2f}s, plain {r['plain_s']:.2f}s ({rows} rows, T={r['tokens']}, prefix {batch.prefix})")
        out[group] = r
    return out


def memory_one(model_dir: str, budget: int, items: int, image_tokens: int, device: str, dtype: str) -> dict:
    """Run in a fresh process: peak memory of the probes of ``items`` items × 64 head-sets
    (mask@all) at ``budget`` positions per forward."""
    from benchmarks.bench_evaluation import random_headsets
    from vheads.engine import Batching, Engine
    from vheads.evaluation._probe import Action, Probe, run_probes

    lm = _setup.load(model_dir, device, dtype)
    eng = Engine(lm, Batching(cross_item=True, max_rows=1 << 20, token_budget=budget))
    prompts = [_setup.prompt_of_length(lm, image_tokens, seed=i) for i in range(items)]
    eng.forward(prompts[0], None, logits_at=[prompts[0].layout.last])  # warm-up: the model code's own allocations
    held, run = [], eng.run

    def counted(batch, *a, **k):
        held.append(batch.n_rows * batch.length)
        return run(batch, *a, **k)

    eng.run = counted
    probes = [Probe(p, Action("mask", rows="all"), random_headsets(lm.n_layers, lm.n_heads)) for p in prompts]
    before, peak = _setup.peak_memory(lambda: run_probes(eng, probes), device)
    return {"budget": budget, "growth_mb": (peak - before) / 2**20, "peak_mb": peak / 2**20, "forwards": len(held), "max_positions": max(held)}


def memory(model_dir: str, budgets: list[int], items: int, image_tokens: int, device: str, dtype: str, log) -> list[dict]:
    out = []
    for b in budgets:
        cmd = [sys.executable, "-m", "benchmarks.bench_overhead", model_dir, str(b), str(items), str(image_tokens), device, dtype]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
        if res.returncode != 0:
            raise RuntimeError(f"memory subprocess {' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
        r = json.loads(res.stdout.strip().splitlines()[-1])
        log(f"  memory at a budget of {b:,} positions: +{r['growth_mb']:.0f} MB in {r['forwards']} forwards (largest {r['max_positions']:,} positions)")
        out.append(r)
    return out


if __name__ == "__main__":
    model_dir, budget, items, image_tokens, device, dtype = sys.argv[1:7]
    print(json.dumps(memory_one(model_dir, int(budget), int(items), int(image_tokens), device, dtype)))
