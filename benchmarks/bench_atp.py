"""Attribution patching vs the exact causal map: time and agreement, and the backward's memory.

Time (:func:`run`), same NCS items, one run:
(a) the exact scan — :func:`vheads.causal._atp.exact_map`: the evaluation's NCS with one
    head-set per head (L·H batch rows per item, image hidden at all rows; cross-item
    batching and layer-prefix sharing as in every test);
(b) AtP* — :func:`vheads.causal._atp.atp_map`: one forward and one backward per forward of
    items, every head's estimate at once.
The row is (a) / (b), with Spearman ρ and top-k recall between the two maps beside it.

Memory (:func:`memory`), each in a fresh process after one warm-up plain forward: the peak
memory (weights included, as the capture rows) of a plain forward (no gradient) of one
prompt of ``image_tokens`` image tokens, and of AtP's forward + backward on it with the
decoder layers checkpointed and without (CPU: peak RSS, GPU: ``max_memory_allocated``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from benchmarks import _setup

TIME_TARGET = 20.0  # exact / AtP at the 2B layout (28 × 16 heads)
TOP_K = 10


def ncs_sets(lm, n: int, image_tokens: int | None) -> dict:
    """``n`` matched and ``n`` mismatched synthetic NCS items; with ``image_tokens``, their
    images (and boxes) scaled to about that many image tokens (:func:`_setup.image_size_for`)."""
    from vheads.data import default_templates
    from vheads.evaluation import item_sets

    sets = item_sets(["class-matched", "class-mismatched"], n, lambda kind: 0, templates=default_templates(lm.model_id))
    if image_tokens is None:
        return sets
    w, h = _setup.image_size_for(lm, image_tokens)

    def scaled(it):
        sx, sy = w / it.image.width, h / it.image.height
        boxes = {k: (round(b[0] * sx), round(b[1] * sy), round(b[2] * sx), round(b[3] * sy)) for k, b in it.regions.items()}
        return replace(it, image=it.image.resize((w, h)), regions=boxes)

    return {kind: [scaled(it) for it in items] for kind, items in sets.items()}


def run(lm, eng, n_items: int, image_tokens: int | None, batch_size: int, device: str, log) -> dict:
    from vheads.causal._atp import atp_map, exact_map
    from vheads.causal._compare import compare_maps

    sets = ncs_sets(lm, n_items, image_tokens)
    pr = lm.adapter.build(sets["class-matched"][0], lm.processor)
    atp_map(eng, {k: v[:1] for k, v in sets.items()})  # warm-up
    holder = {}
    atp_s = _setup.timed(lambda: holder.__setitem__("atp", atp_map(eng, sets)), device)
    exact_s = _setup.timed(lambda: holder.__setitem__("exact", exact_map(eng, sets, batch_size=batch_size)[0]), device)
    heads = len(lm.attention_layers) * lm.n_heads
    cmp = compare_maps(holder["exact"], holder["atp"].map(), k=min(TOP_K, heads))
    log(f"  AtP map {atp_s:.1f}s, exact one-head scan {exact_s:.1f}s ({exact_s / atp_s:.1f}×); ρ {cmp['spearman']:.3f}, "
        f"top-{cmp['k']} recall {cmp['top_k_recall']:.2f}")
    # per-row throughput for the GPU-hour projection of docs/causal.md: the exact scan runs one row per head and
    # one baseline per prompt; AtP one forward + backward per prompt
    return {"atp_s": atp_s, "exact_s": exact_s, "items_per_arm": n_items, "heads": heads,
            "exact_rows_per_s": 2 * n_items * (heads + 1) / exact_s, "atp_s_per_prompt": atp_s / (2 * n_items),
            "layers": lm.n_layers, "n_heads": lm.n_heads, "prompt_tokens": pr.layout.n_tokens,
            "image_tokens": len(pr.layout.image_positions), "spearman": cmp["spearman"], "top_k": cmp["k"], "top_k_recall": cmp["top_k_recall"]}


def memory_one(model_dir: str, mode: str, image_tokens: int, device: str, dtype: str) -> dict:
    """Run in a fresh process: peak memory growth of ``mode`` (plain, atp, atp-nockpt) on one prompt."""
    from vheads.causal._atp import estimate_drops
    from vheads.data import OPTION_LETTERS
    from vheads.engine import Engine

    lm = _setup.load(model_dir, device, dtype)
    eng = Engine(lm)
    pr = _setup.prompt_of_length(lm, image_tokens)
    eng.forward(pr, None, logits_at=[pr.layout.last])  # warm-up: the model code's own allocations
    letter = OPTION_LETTERS.index(pr.item.answer)
    if mode == "plain":
        fn = lambda: eng.forward(pr, None, logits_at=[pr.layout.last])  # noqa: E731
    else:
        fn = lambda: estimate_drops(eng, [pr], [letter], checkpoint=mode == "atp")  # noqa: E731
    before, peak = _setup.peak_memory(fn, device)
    return {"mode": mode, "tokens": pr.layout.n_tokens, "image_tokens": len(pr.layout.image_positions),
            "growth_mb": (peak - before) / 2**20, "peak_mb": peak / 2**20}


def memory(model_dir: str, image_tokens: int, device: str, dtype: str, log) -> dict:
    out = {}
    for mode in ("plain", "atp", "atp-nockpt"):
        cmd = [sys.executable, "-m", "benchmarks.bench_atp", model_dir, mode, str(image_tokens), device, dtype]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
        if res.returncode != 0:
            raise RuntimeError(f"memory subprocess {' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
        out[mode] = json.loads(res.stdout.strip().splitlines()[-1])
        log(f"  {mode}: +{out[mode]['growth_mb']:.0f} MB at T={out[mode]['tokens']}")
    return out


def entries(res: dict, mem: dict | None, model: str, cmd: str, entry) -> list[dict]:
    """The benchmark table's rows (``entry`` is :func:`benchmarks.run.entry`)."""
    full = res["layers"] == 28 and res["n_heads"] == 16
    note = (f"ρ = {res['spearman']:.3f}, top-{res['top_k']} recall {res['top_k_recall']:.2f} (exact vs AtP map); {res['heads']} heads, "
            f"{res['items_per_arm']}+{res['items_per_arm']} items, prompt {res['prompt_tokens']} tokens ({res['image_tokens']} image)"
            + ("" if full else "; target applies to the 2B layout (28 × 16 heads)"))
    rows = [entry(f"{model} causal map: exact one-head scan / AtP*", res["exact_s"] / res["atp_s"], TIME_TARGET if full else None,
                  "higher", res, cmd, note)]
    if mem is not None:
        plain = mem["plain"]
        for mode, what in (("atp", "checkpointed layers"), ("atp-nockpt", "no checkpointing")):
            r = mem[mode]
            rows.append(entry(f"{model} AtP forward+backward peak mem / plain forward, {what}, T={r['tokens']}",
                              r["peak_mb"] / plain["peak_mb"], None, "lower", {"plain": plain, mode: r}, cmd,
                              f"peak {r['peak_mb']:.0f} MB vs {plain['peak_mb']:.0f} MB (growth after the warm-up +{r['growth_mb']:.0f} MB vs "
                              f"+{plain['growth_mb']:.0f} MB), {r['image_tokens']} image tokens"))
    return rows


if __name__ == "__main__":
    model_dir, mode, image_tokens, device, dtype = sys.argv[1:6]
    print(json.dumps(memory_one(model_dir, mode, int(image_tokens), device, dtype)))
