"""GPU check: the realistic widths of Qwen3-VL-2B and -8B (random init, bf16) on one GPU.

    bash benchmarks/gpu_check.sh [--out DIR] [--only 2b|8b]        (≤ 8 minutes; DIR default ./gpu_check/)
    python benchmarks/gpu_check.py --smoke --out DIR                 (CPU, tiny widths: checks the script runs)

Every timed row is warmed up first (one untimed run of the same shapes: kernels chosen,
caches filled), timed between device synchronisations, and reports the peak GPU memory
of that row alone (the peak statistics are reset before each row). ``DIR/gpu_check.json``
holds every figure (written after each width, so a run stopped at the limit keeps what
finished) and ``DIR/gpu_check.txt`` the printed summary.

For each width, models are initialised at random directly on the GPU (no download, no
model folder), language model and vision tower at the published layout (below), with the
word-level test tokenizer (so the vocabulary, and only the vocabulary, is small). Rows:

- host–device syncs CUDA reports while the decoder layers run (masked forwards at all and
  question rows, a zero ablation; target 0, issue 34.7);
- capture time / plain forward at T ≈ 1,000 and 4,000 tokens (batch 1; discovery's read);
- masked forward at the paper's real prompt (8B width): a 448-px 2 × 2 grid, 196 image tokens,
  at batch 64 and 256, question and all rows: ms per row, the second point of the rates that
  ``vheads plan`` reads (``src/vheads/study/plan_rates.json``; record it there after a run);
- masked forward / plain forward on the same batch (64 head-sets × one 1,024-image-token
  prompt) at question rows (prefix shared) and at all rows; tokens/s of both;
- evaluation: one forward per head-set (eager head mask) / vheads batched, question and
  all rows (the ``benchmarks/run.py`` evaluation rows);
- head-output ablation (``zero``, 2B only): one forward per head-set (sdpa, ``o_proj``
  pre-hooks) / vheads batched, question rows (prefix reused) and all rows, beside the limit
  (the same rows batched with no plan) and ablated / plain forward (``benchmarks/bench_ablation.py``);
- bf16 vs fp32 agreement of P(option) under masking (2B only: the same weights cast);
- a padded multi-item batch: items of different lengths (so different prefixes) in one
  forward against one forward per item, mask at all rows; time and max |ΔP| between the two;
- the projected GPU-hours of a paper-like study: the evaluation stage's batch rows counted
  from the study configuration (:func:`evaluation_rows`, 12 settings, 400 items per set,
  the default controls) × the measured time per row, 8B width. A projection until it is
  checked against a real run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks import _setup, bench_ablation, bench_capture, bench_evaluation, bench_overhead  # noqa: E402

#: Qwen3-VL language model and vision tower layouts (the published configs)
WIDTHS = {
    "2b": dict(layers=28, heads=16, kv_heads=8, hidden=2048, head_dim=128, intermediate=6144,
               vision_hidden=1024, vision_depth=24, vision_heads=16, vision_intermediate=4096, deepstack=(5, 11, 17)),
    "8b": dict(layers=36, heads=32, kv_heads=8, hidden=4096, head_dim=128, intermediate=12288,
               vision_hidden=1152, vision_depth=27, vision_heads=16, vision_intermediate=4304, deepstack=(8, 16, 24)),
}
SMOKE = dict(layers=3, heads=4, kv_heads=2, hidden=64, head_dim=16, vision_hidden=32, vision_depth=1, vision_heads=2, deepstack=(0,))
PAPER = dict(n_eval=400)
#: image tokens of the evaluation prompt configs/paper.toml builds on Qwen3-VL: a 448-px 2 x 2 grid of
#: 224-px cells, 32-px merged patches -> 14 x 14 = 196 (the plan's layout 'qwen3-vl-8b-paper')
PAPER_IMAGE_TOKENS = 196  # with the default 12 settings and controls of vheads.study.StudyConfig


def build(spec: dict, device: str, dtype: str):
    """A random Qwen3-VL of ``spec`` as a LoadedModel, initialised on ``device``."""
    from vheads.models import LoadedModel
    from vheads.models._adapter import adapter_for
    from vheads.models._loading import DTYPES, ProcessorBundle
    from vheads.models.tiny_random import build_qwen_vl

    model, tok, ip = build_qwen_vl("qwen3_vl", **spec, max_pixels=4096 * 4096, dtype=DTYPES[dtype], device=device)
    model.eval()
    return LoadedModel(model=model, processor=ProcessorBundle(ip, tok, 16), adapter=adapter_for("qwen3_vl"), model_id="random",
                       revision=None, fingerprint="random", n_layers=spec["layers"], n_heads=spec["heads"],
                       n_kv_heads=spec["kv_heads"], head_dim=spec["head_dim"])


def evaluation_rows(cfg, layout: str = "qwen3-vl-8b") -> dict[str, int]:
    """Batch rows (one head-set on one item in one forward) of a study's evaluation stages at
    ``layout``, by cost: ``full`` rows compute the whole prompt, ``suffix`` rows only what
    follows the shared prefix. Read from the study's one plan
    (:func:`vheads.study._plan.study_plan`, which ``vheads plan`` and the doctor read too);
    discovery is left out."""
    from vheads.study._plan import load_layout, study_plan

    plan = study_plan(cfg, load_layout(layout))
    stages = [s for s in plan.stages if s.name != "discovery"]
    return {"settings": plan.settings, "full_rows": sum(s.full for s in stages), "suffix_rows": sum(s.suffix for s in stages),
            "n_eval": cfg.n_eval, "controls_R": sum(cfg.controls.values())}


class _Rows:
    """Runs each row with its own peak-memory reading (reset before, read after)."""

    def __init__(self, device: str):
        self.device, self.peaks = device, {}

    def __call__(self, name: str, fn, *args):
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        out = fn(*args)
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.peaks[name] = torch.cuda.max_memory_allocated() / 2**30
        return out


def _warm_up(lm, eng, image_tokens: int, rows: int) -> None:
    """One untimed batched run of every action the rows time (mask at question / all,
    zero ablation), so the first timed row does not pay for kernel selection."""
    from vheads.evaluation._probe import Action, Probe, run_probes

    hs = bench_evaluation.random_headsets(lm.n_layers, lm.n_heads, n=rows)
    prompt = _setup.prompt_of_length(lm, image_tokens)
    probes = [Probe(prompt, Action("mask", rows=g), hs) for g in ("question", "all")] + [Probe(prompt, None)]
    run_probes(eng, probes)


def _padded(lm, eng, image_tokens: int, head_sets: int, repeats: int, device: str, log) -> dict:
    """Eight items, two of each of four lengths, × ``head_sets`` masked head-sets (mask at
    all rows) in one call of the engine: packed into padded forwards (``one_length`` off),
    and in forwards of one length each (``one_length`` on, the CUDA default since issue
    34.8), against one call per item."""
    from vheads.engine import Batching, Engine
    from vheads.evaluation._probe import Action, Probe, run_probes

    hs = bench_evaluation.random_headsets(lm.n_layers, lm.n_heads, n=head_sets)
    sizes = [max(4, int(image_tokens * f)) for f in (1.0, 0.8, 0.6, 0.45)]
    prompts = [_setup.prompt_of_length(lm, n, seed=i + 10 * r) for r in range(2) for i, n in enumerate(sizes)]
    probes = [Probe(p, Action("mask", rows="all"), hs) for p in prompts]
    engines = {m: Engine(lm, dataclasses.replace(eng.batching, one_length=m == "by_length")) for m in ("padded", "by_length")}
    runs = {m: (lambda e=e: run_probes(e, probes, prefix_reuse=False)) for m, e in engines.items()}
    runs["per_item"] = lambda: [run_probes(eng, [pr], prefix_reuse=False)[0] for pr in probes]  # noqa: E731
    P = {m: np.concatenate(f()) for m, f in runs.items()}  # warm-up, and the agreement
    t = {m: [] for m in runs}
    for _ in range(repeats):
        for m, f in runs.items():
            t[m].append(_setup.timed(f, device))
    lengths = [p.layout.n_tokens for p in prompts]
    r = {"lengths": lengths, "head_sets": head_sets, **{f"{m}_s": _setup.median(x) for m, x in t.items()},
         "max_abs_dP": float(max(np.abs(P["padded"] - P["per_item"]).max(), np.abs(P["by_length"] - P["per_item"]).max()))}
    r["per-item / padded"] = r["per_item_s"] / r["padded_s"]
    r["per-item / by length"] = r["per_item_s"] / r["by_length_s"]
    r["padded tokens/s"] = sum(lengths) * head_sets / r["padded_s"]
    log(f"  items of lengths {lengths} × {head_sets} head-sets: padded {r['padded_s']:.2f}s, by length {r['by_length_s']:.2f}s, "
        f"per item {r['per_item_s']:.2f}s (per item / padded {r['per-item / padded']:.2f}×, / by length {r['per-item / by length']:.2f}×), "
        f"max |ΔP| {r['max_abs_dP']:.1e}")
    return r


def _ratio_rows(lm, eng, image_tokens: int, rows: int, repeats: int, device: str, log) -> dict:
    over = bench_overhead.run(lm, eng, image_tokens, rows, repeats, device, log)
    out = {}
    for g, r in over.items():
        toks = r["rows"] * (r["tokens"] - r["prefix"]) + r["prefix"]  # tokens computed per forward
        out[g] = {**{k: v for k, v in r.items() if k != "times"}, "masked / plain": r["masked_s"] / r["plain_s"],
                  "plain tokens/s": toks / r["plain_s"], "masked tokens/s": toks / r["masked_s"],
                  "masked s per row": r["masked_s"] / r["rows"]}
    return out


def _capture_rows(lm, eng, lengths: list[int], repeats: int, device: str) -> dict:
    out = {}
    for n in lengths:
        prompt = _setup.prompt_of_length(lm, n)
        run = {m: bench_capture._runner(lm, eng, prompt, m) for m in ("plain", "capture")}
        t = _setup.interleaved(run, repeats, device)
        out[prompt.layout.n_tokens] = _setup.median(t["capture"]) / _setup.median(t["plain"])
    return out


def _agreement(lm, eng, image_tokens: int, log) -> dict:
    """max |P_bf16 − P_fp32| over the four option letters, masked head-sets at all and
    question rows, two items; the same weights cast to fp32."""
    from vheads.evaluation._probe import Action, Probe, run_probes

    hs = bench_evaluation.random_headsets(lm.n_layers, lm.n_heads, n=16)
    prompts = [_setup.prompt_of_length(lm, image_tokens, seed=i) for i in range(2)]
    probes = [Probe(p, Action("mask", rows=g), hs) for p in prompts for g in ("all", "question")] + [Probe(p, None) for p in prompts]
    p16 = np.concatenate(run_probes(eng, probes))
    lm.model.to(torch.float32)
    p32 = np.concatenate(run_probes(eng, probes))
    lm.model.to(torch.bfloat16)
    r = {"max_abs_dP": float(np.abs(p16 - p32).max()), "mean_abs_dP": float(np.abs(p16 - p32).mean()),
         "P_range_fp32": [float(p32.min()), float(p32.max())], "rows": int(len(p32))}
    log(f"  bf16 vs fp32: max |ΔP| {r['max_abs_dP']:.2e} (mean {r['mean_abs_dP']:.2e}; P in [{r['P_range_fp32'][0]:.3f}, {r['P_range_fp32'][1]:.3f}])")
    return r


def _layer_loop_syncs(lm, eng, image_tokens: int, rows: int, log) -> dict:
    """Host–device syncs CUDA reports (``torch.cuda.set_sync_debug_mode("warn")``) while the
    language model's decoder layers run — from the first layer's entry to the final norm's —
    in one forward each: the image hidden at all rows, at question rows (prefix reused), and
    a zero ablation at question rows. Issue 34.7 asks 0 each (the CPU test:
    tests/engine/test_syncs.py). None on a CPU (no such report)."""
    import warnings

    from vheads.engine._layers import decoder_layers
    from vheads.evaluation._probe import Action, Probe, run_probes

    if not torch.cuda.is_available() or lm.device.type != "cuda":
        return {}
    hs = bench_evaluation.random_headsets(lm.n_layers, lm.n_heads, n=rows)
    prompt = _setup.prompt_of_length(lm, image_tokens)
    on = lambda *a: torch.cuda.set_sync_debug_mode("warn")  # noqa: E731
    off = lambda *a: torch.cuda.set_sync_debug_mode("default")  # noqa: E731
    out = {}
    for name, action in {"mask@all": Action("mask", rows="all"), "mask@question": Action("mask", rows="question"),
                         "zero@question": Action("ablate", rows="question", ablation="zero")}.items():
        probes = [Probe(prompt, action, hs)]
        run_probes(eng, probes)  # warm-up (memos, first-call set-up)
        hooks = [decoder_layers(lm.model)[0].register_forward_pre_hook(on, prepend=True),
                 lm.model.get_decoder().norm.register_forward_pre_hook(off, prepend=True)]
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                run_probes(eng, probes)
        finally:
            off()
            for h in hooks:
                h.remove()
        syncs = [str(w.message) for w in seen if "called a synchronizing" in str(w.message)]  # not the mode's own "prototype" notice
        out[name] = len(syncs)
        log(f"  host-device syncs in the decoder-layer loop, {name}: {len(syncs)}" + (f" (first: {syncs[0][:160]})" if syncs else ""))
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("gpu_check"), help="folder of the results (default ./gpu_check/): gpu_check.json, gpu_check.txt")
    ap.add_argument("--only", choices=sorted(WIDTHS), help="one width only")
    ap.add_argument("--smoke", action="store_true", help="tiny widths on the CPU: checks that this script runs, measures nothing")
    args = ap.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); this check needs a GPU. "
              "CPU figures: python benchmarks/run.py --quick", file=sys.stderr)
        sys.exit(2)
    if args.out.exists() and not args.out.is_dir():
        print(f"gpu_check: --out {args.out} is a file; give a folder", file=sys.stderr)
        sys.exit(2)
    args.out.mkdir(parents=True, exist_ok=True)
    out_json = args.out / "gpu_check.json"
    device, dtype = ("cpu", "float32") if args.smoke else ("cuda", "bfloat16")
    t0 = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t0:6.0f}s] {msg}", flush=True)

    from vheads.engine import Engine
    from vheads.study._config import StudyConfig

    machine = torch.cuda.get_device_name() if device == "cuda" else "CPU (smoke run: no figure here means anything)"
    import transformers

    results: dict = {"device": machine, "dtype": dtype, "torch": torch.__version__, "transformers": transformers.__version__,
                     "projection": True, "widths": {}}
    widths = {"smoke": SMOKE} if args.smoke else {k: v for k, v in WIDTHS.items() if args.only in (None, k)}
    image_tokens, rows, repeats = (16, 4, 1) if args.smoke else (1024, 64, 3)
    paper_tokens, paper_batches = (8, (4, 8)) if args.smoke else (PAPER_IMAGE_TOKENS, (64, 256))
    for name, spec in widths.items():
        log(f"[{name}] building a random Qwen3-VL ({spec['layers']} layers × {spec['heads']} heads / {spec['kv_heads']} KV, hidden {spec['hidden']}) on {device}")
        lm = build(spec, device, dtype)
        eng = Engine(lm)
        row = _Rows(device)
        r = {"spec": spec}
        row("warm-up", _warm_up, lm, eng, image_tokens, rows)
        log("  warmed up")
        r["layer-loop syncs"] = _layer_loop_syncs(lm, eng, image_tokens, rows, log)
        r["forward"] = row("forward", _ratio_rows, lm, eng, image_tokens, rows, repeats, device, log)
        if name in ("8b", "smoke"):  # the prompt configs/paper.toml builds: a 448-px 2 x 2 grid, 14 x 14 = 196 image tokens
            r["paper prompt"] = {str(b): row(f"paper prompt, batch {b}", _ratio_rows, lm, eng, paper_tokens, b, repeats, device, log)
                                 for b in paper_batches}
            for b, pr in r["paper prompt"].items():
                log(f"  paper prompt ({paper_tokens} image tokens), batch {b}: " + ", ".join(
                    f"{g} {x['masked s per row'] * 1e3:.2f} ms/row (T={x['tokens']})" for g, x in pr.items()))
        r["capture / plain"] = row("capture", _capture_rows, lm, eng, [image_tokens, 4 * image_tokens], repeats, device)
        log(f"  capture / plain: {r['capture / plain']}")
        ev = row("evaluation", bench_evaluation.run, lm, eng, 1, image_tokens, 2 if args.smoke else 4, rows, rows, device, log)
        r["evaluation per-head-set / batched"] = {"question (+reuse)": ev["question"]["baseline_s"] / ev["question"]["reuse_s"],
                                                  "all": ev["all"]["baseline_s"] / ev["all"]["batched_s"],
                                                  "max_abs_dP": max(ev["question"]["max_abs_dP"], ev["all"]["max_abs_dP"])}
        r["padded batch"] = row("padded batch", _padded, lm, eng, image_tokens, 4 if args.smoke else 16, repeats, device, log)
        if name in ("2b", "smoke"):
            ab = row("ablation zero", bench_ablation.run, lm, eng, 1, image_tokens, 2 if args.smoke else 4, rows, repeats, device, log)
            r["ablation zero"] = {g: {"per-head-set / batched": a["baseline_s"] / a["reuse_s"],
                                      "limit": a["baseline_s"] / a["items"] / a["plain_batched_s"],
                                      "ablated / plain": a["ablated_s"] / a["plain_s"], "max_abs_dP": a["max_abs_dP"]} for g, a in ab.items()}
            lm.model.to(torch.bfloat16)  # (the smoke run is fp32 until here)
            r["bf16 vs fp32"] = row("bf16 vs fp32", _agreement, lm, eng, image_tokens, log)
        if device == "cuda":
            r["peak_gib"] = dict(row.peaks)
        results["widths"][name] = r
        del eng, lm
        if device == "cuda":
            torch.cuda.empty_cache()
        out_json.write_text(json.dumps(results, indent=1, default=float))  # what is done so far survives a timeout
    # projection: the paper-like study's evaluation rows × time per row at the largest width measured
    last = list(results["widths"])[-1]
    fwd = results["widths"][last]["forward"]
    rows_count = evaluation_rows(StudyConfig(**PAPER))
    hours = (rows_count["full_rows"] * fwd["all"]["masked s per row"] + rows_count["suffix_rows"] * fwd["question"]["masked s per row"]) / 3600
    simple = 12 * (1 + rows_count["controls_R"]) * 400 * 4
    results["projection_gpu_hours"] = {"width": last, "image_tokens": image_tokens, **rows_count, "gpu_hours": hours,
                                       "issue_formula_rows": simple, "issue_formula_gpu_hours": simple * fwd["all"]["masked s per row"] / 3600}
    results["seconds"] = time.perf_counter() - t0
    out_json.write_text(json.dumps(results, indent=1, default=float))
    text = _print(results)
    print(text)
    (args.out / "gpu_check.txt").write_text(text + "\n")
    log(f"wrote {out_json} and {args.out / 'gpu_check.txt'}")
    return results


def _print(res: dict) -> str:
    lines: list[str] = []
    print = lines.append  # noqa: A001 (the summary is returned, then printed and saved)
    print(f"GPU check on {res['device']} ({res['dtype']}); all figures are measurements of random-init models, the GPU-hours a projection")
    for name, r in res["widths"].items():
        f = r["forward"]
        print(f"[{name}]")
        for g, n in r.get("layer-loop syncs", {}).items():
            print(f"  host-device syncs in the decoder-layer loop, {g}: {n}  (target 0)")
        for g in ("question", "all"):
            print(f"  masked / plain forward, mask@{g}: {f[g]['masked / plain']:.2f}×  (target ≤ {1.15 if g == 'question' else 1.3}); "
                  f"plain {f[g]['plain tokens/s']:,.0f} tokens/s, masked {f[g]['masked tokens/s']:,.0f} tokens/s")
        for b, pr in r.get("paper prompt", {}).items():
            print(f"  paper prompt, batch {b}: " + ", ".join(f"mask@{g} {x['masked s per row'] * 1e3:.2f} ms/row at T={x['tokens']}"
                                                          for g, x in pr.items()) + "  (a rate point for vheads plan)")
        for T, x in r["capture / plain"].items():
            print(f"  capture / plain, T={T}: {x:.2f}×  (target ≤ 1.1 from 1,024 tokens)")
        e = r["evaluation per-head-set / batched"]
        print(f"  per-head-set / batched: question {e['question (+reuse)']:.1f}× (target ≥ 30), all {e['all']:.1f}× (target ≥ 6); max |ΔP| {e['max_abs_dP']:.1e}")
        for g, a in r.get("ablation zero", {}).items():
            print(f"  ablate zero@{g}: per-head-set / batched {a['per-head-set / batched']:.1f}× (target ≥ {30 if g == 'question' else 6}; "
                  f"limit {a['limit']:.1f}×), ablated / plain {a['ablated / plain']:.2f}× (target ≤ 1.15); max |ΔP| {a['max_abs_dP']:.1e}")
        if isinstance(r.get("bf16 vs fp32"), dict):
            print(f"  bf16 vs fp32 P(option): max |ΔP| {r['bf16 vs fp32']['max_abs_dP']:.2e}")
        pb = r.get("padded batch")
        if pb:
            print(f"  {len(pb['lengths'])} items (T = {pb['lengths']}) × {pb['head_sets']} head-sets, mask@all, one call: per item / padded "
                  f"{pb['per-item / padded']:.2f}×, per item / forwards of one length {pb.get('per-item / by length', float('nan')):.2f}× "
                  f"(target > 1); max |ΔP| {pb['max_abs_dP']:.1e}")
        if "peak_gib" in r:
            print("  peak GPU memory by row: " + ", ".join(f"{k} {v:.1f} GiB" for k, v in r["peak_gib"].items()))
    p = res["projection_gpu_hours"]
    print(f"projected evaluation GPU-hours, paper-like study ({p['settings']} settings, {p['n_eval']} items per set, R = {p['controls_R']}): "
          f"{p['gpu_hours']:.1f} h ({p['full_rows']:,} full rows + {p['suffix_rows']:,} suffix rows at the {p['width']} width); "
          f"issue's formula 12 × (1 + R) × 400 × 4 = {p['issue_formula_rows']:,} rows: {p['issue_formula_gpu_hours']:.1f} h")
    print(f"({res.get('seconds', 0):.0f} s in all; torch {res['torch']}, transformers {res.get('transformers', '?')})")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
