"""vheads benchmarks: ratios measured side by side in one run.

    python benchmarks/run.py [--quick] [--json PATH] [--only capture|evaluation|overhead|memory|layers|atp|study|ablation|grounding] [--model random|tiny|both|zoo|all]

Runs on CUDA + bf16 when a GPU is there, else CPU + fp32 (the same command either way),
on a random-initialised Qwen3-VL with the 2B language-model layout (28 layers × 16 heads
/ 8 KV heads; width cut on CPU, as printed) and on the built-in tiny model when it loads;
``--model zoo`` (or ``all``) adds capture rows on the same layout in Qwen3.5 (hybrid) and
InternVL (tiled).
Prints one row per comparison with its target and the command that reproduces it; the
JSON holds one entry per row: name, ratio, target, better, met, raw, command.
See benchmarks/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from benchmarks import _setup, bench_ablation, bench_atp, bench_capture, bench_evaluation, bench_grounding, bench_layers, bench_overhead, bench_study  # noqa: E402

CAPTURE_TIME_TARGET = 1.1  # at every prompt length from CAPTURE_TARGET_FROM tokens up
CAPTURE_MEMORY_TARGET = 1.05
CAPTURE_TARGET_FROM = 1024
QUESTION_ROWS_TARGET = 30.0  # these and the overhead targets apply from TARGET_IMAGE_TOKENS image tokens
ALL_ROWS_TARGET = 6.0
OVERHEAD_QUESTION_TARGET = 1.15
OVERHEAD_ALL_TARGET = 1.3
TARGET_IMAGE_TOKENS = 1000
LIMIT_FRACTION_TARGET = 0.95  # CPU: each batched intervention row ≥ 0.95× its limit row (issue 32)
STUDY_SPEEDUP_TARGET = 2.0  # cross-item off / on, default study (not --quick)


def params(device: str, quick: bool) -> dict:
    if device == "cuda":
        p = dict(lengths=[256, 1024, 4096], repeats=5, items=4, image_tokens=1024, baseline_sample=8, batched_sample=64, batch_size=64,
                 overhead_rows=64, budget_rows=[16, 64], memory_items=2, layer_controls=64, atp_items=4, atp_image_tokens=1024)
        if quick:
            p.update(repeats=3, items=1, baseline_sample=4, atp_items=2)
        return p
    if quick:
        return dict(lengths=[256, 1024], repeats=3, items=1, image_tokens=1024, baseline_sample=2, batched_sample=8, batch_size=64,
                    overhead_rows=8, budget_rows=[8, 32], memory_items=1, layer_controls=8, layer_image_tokens=256,
                    atp_items=1, atp_image_tokens=None)
    return dict(lengths=[256, 1024, 4096], repeats=3, items=2, image_tokens=1024, baseline_sample=4, batched_sample=16, batch_size=64,
                overhead_rows=16, budget_rows=[8, 32], memory_items=2, layer_controls=32,
                atp_items=2, atp_image_tokens=256)


def entry(name, ratio, target, better, raw, command, note=""):
    met = None
    if target is not None and ratio is not None:
        met = bool(ratio <= target) if better == "lower" else bool(ratio >= target)
    return {"name": name, "ratio": ratio, "target": target, "better": better, "met": met, "raw": raw, "command": command, "note": note}


def capture_entries(res: dict, model: str, cmd: str, quick: bool) -> list[dict]:
    out = []
    for T, r in sorted(res.items()):
        plain, cap, eager = r["plain"], r["capture"], r["eager"]
        at_target = T >= CAPTURE_TARGET_FROM
        note = "" if at_target else f"targets apply from {CAPTURE_TARGET_FROM:,} tokens"
        raw = {"tokens": T, "plain": plain, "capture": cap}
        out.append(entry(f"{model} capture time / plain, T={T}", cap["time_s"] / plain["time_s"],
                         CAPTURE_TIME_TARGET if at_target else None, "lower", raw, cmd, note))
        out.append(entry(f"{model} capture peak mem / plain, T={T}", cap["peak_mb"] / plain["peak_mb"],
                         CAPTURE_MEMORY_TARGET if at_target else None, "lower", raw, cmd, note))
        if "skipped" in eager:
            out.append(entry(f"{model} eager+output_attentions time / plain, T={T}", None, None, "lower", {"tokens": T, "eager": eager}, cmd, eager["skipped"]))
        else:
            raw_e = {"tokens": T, "plain": plain, "eager": eager}
            out.append(entry(f"{model} eager+output_attentions time / plain, T={T}", eager["time_s"] / plain["time_s"], None, "lower", raw_e, cmd))
            out.append(entry(f"{model} eager+output_attentions peak mem / plain, T={T}", eager["peak_mb"] / plain["peak_mb"], None, "lower", raw_e, cmd))
    return out


def evaluation_entries(res: dict, model: str, cmd: str, device: str) -> list[dict]:
    q, a = res["question"], res["all"]
    n = f"64 head-sets × {q['items']} item(s), {q['image_tokens']} image tokens, prompt {q['prompt_tokens']} tokens"
    applies = q["image_tokens"] >= TARGET_IMAGE_TOKENS
    why = "" if applies else f"; targets apply from {TARGET_IMAGE_TOKENS:,} image tokens"
    return [
        entry(f"{model} eval mask@question: per-head-set / batched+reuse",
              q["baseline_s"] / q["reuse_s"], QUESTION_ROWS_TARGET if applies else None, "higher", q, cmd, n + why),
        entry(f"{model} eval mask@question: per-head-set / batched",
              q["baseline_s"] / q["batched_s"], None, "higher", q, cmd),
        entry(f"{model} eval mask@all: per-head-set / batched",
              a["baseline_s"] / a["batched_s"], ALL_ROWS_TARGET if applies else None, "higher", a, cmd, n + why),
        *[entry(f"{model} eval mask@{g}: batched / its limit", r["limit_s"] / r["limit_batched_s"], LIMIT_FRACTION_TARGET if device == "cpu" else None,
                "higher", r, cmd, f"limit time / batched time: the same {r['limit_head_sets']} rows with no plan (prefix reused at question "
                f"rows), medians of {r['limit_repeats']} alternated runs after a warm-up; target on a CPU only (issue 32)") for g, r in (("question", q), ("all", a))],
    ]


def overhead_entries(res: dict, model: str, cmd: str) -> list[dict]:
    out = []
    for group, target in (("question", OVERHEAD_QUESTION_TARGET), ("all", OVERHEAD_ALL_TARGET)):
        r = res[group]
        applies = r["image_tokens"] >= TARGET_IMAGE_TOKENS and model.startswith("random-2B")
        note = f"{r['rows']} rows, T={r['tokens']}, {r['image_tokens']} image tokens, prefix {r['prefix']}" + (
            "" if applies else f"; target applies to the 2B layout from {TARGET_IMAGE_TOKENS:,} image tokens")
        out.append(entry(f"{model} masked forward / plain forward, mask@{group}", r["masked_s"] / r["plain_s"],
                         target if applies else None, "lower", r, cmd, note))
    return out


def memory_entries(res: list[dict], model: str, cmd: str) -> list[dict]:
    lo, hi = res
    bounded = all(r["max_positions"] <= r["budget"] for r in res)
    note = (f"budgets {lo['budget']:,} and {hi['budget']:,} positions: +{lo['growth_mb']:.0f} MB and +{hi['growth_mb']:.0f} MB; "
            f"largest forward {lo['max_positions']:,} and {hi['max_positions']:,} positions ({'within' if bounded else 'OVER'} budget)")
    return [entry(f"{model} eval peak mem growth, budget ×{hi['budget'] / lo['budget']:g} / budget ×1", hi["growth_mb"] / max(lo["growth_mb"], 1e-9),
                  None, "lower", {"budgets": res, "within_budget": bounded}, cmd, note)]


def study_entries(study: dict, quick: bool) -> list[dict]:
    q = " --quick" if quick else ""
    cmd = f"python benchmarks/run.py{q} --only study"
    if not study.get("available"):
        return [entry("study cross-item off / on", None, None, "higher", study, cmd, study.get("why", ""))]
    on = study["on"]
    rows = []
    for arm, what in (("all-off", "speed-ups off / on"), ("off", "cross-item off / on")):
        other, agree = study[arm], study[f"agree_{arm}"]
        same = f"same outcomes: keys {'equal' if agree['same_keys'] else 'DIFFER'}, max |Δ| {agree['max_abs_outcome_diff']}"
        note = (f"{study['config']} study: on {on['total_s']:.0f}s, {arm} {other['total_s']:.0f}s; {same}"
                + ("; reduced study: no target" if quick else ""))
        rows.append(entry(f"study {what}, total", other["total_s"] / on["total_s"], None if quick else STUDY_SPEEDUP_TARGET, "higher",
                          {"on": on, arm: other, **agree}, cmd, note))
        for stage in on["stages_s"]:
            if stage in other["stages_s"] and on["stages_s"][stage] > 0:
                rows.append(entry(f"study {what}, {stage}", other["stages_s"][stage] / on["stages_s"][stage], None, "higher",
                                  {"on_s": on["stages_s"][stage], f"{arm}_s": other["stages_s"][stage]}, cmd))
    return rows


def layers_entries(r: dict, model: str, cmd: str) -> list[dict]:
    note = (f"mask@all, {r['items']} item(s) × {r['head_sets']} head-sets, T={r['tokens']}; decoder-layer rows computed with "
            f"sharing: {r['layer_rows_fraction']:.2f} of all; max |ΔP| {r['max_abs_dP']:.1e}; context (kept on while ≥ 1)")
    return [entry(f"{model} layer sharing off / on, mask@all", r["off_s"] / r["on_s"], None, "higher", r, cmd, note)]


def print_table(entries: list[dict]) -> None:
    w = max(len(e["name"]) for e in entries)
    print(f"\n{'comparison':<{w}}  {'ratio':>8}  {'target':>8}  met")
    print("-" * (w + 26))
    for e in entries:
        ratio = "—" if e["ratio"] is None else f"{e['ratio']:.2f}×"
        target = "" if e["target"] is None else ("≤" if e["better"] == "lower" else "≥") + f"{e['target']:g}×"
        met = {True: "yes", False: "NO", None: ""}[e["met"]]
        print(f"{e['name']:<{w}}  {ratio:>8}  {target:>8}  {met}")
        if e["note"]:
            print(f"{'':<4}note: {e['note']}")
        print(f"{'':<4}reproduce: {e['command']}")


def bench_model(name, lm, model_dir, spec_line, args, p, device, dtype, log, model_flag: str = "") -> list[dict]:
    """The rows of ``args.only`` (all when None) on one model; ``model_flag`` reproduces it."""
    from vheads.engine import Engine

    log(f"[{name}] {spec_line}")
    eng = Engine(lm)
    q = " --quick" if args.quick else ""
    entries = []
    if args.only in (None, "capture"):
        lengths = args.lengths or p["lengths"]
        res = bench_capture.run(lm, eng, model_dir, lengths, p["repeats"], device, dtype, log)
        cmd = f"python benchmarks/run.py{q}{model_flag} --only capture --lengths {' '.join(map(str, lengths))}"
        entries += capture_entries(res, name, cmd, args.quick)
    if args.only in (None, "evaluation"):
        items = args.items or p["items"]
        res = bench_evaluation.run(lm, eng, items, p["image_tokens"], p["baseline_sample"], p["batched_sample"], p["batch_size"], device, log,
                                     p["repeats"])
        cmd = f"python benchmarks/run.py{q}{model_flag} --only evaluation --items {items}"
        entries += evaluation_entries(res, name, cmd, device)
    if args.only in (None, "overhead"):
        res = bench_overhead.run(lm, eng, p["image_tokens"], p["overhead_rows"], p["repeats"], device, log)
        entries += overhead_entries(res, name, f"python benchmarks/run.py{q}{model_flag} --only overhead")
    if args.only in (None, "layers"):
        res = bench_layers.run(lm, eng, p["items"], p.get("layer_image_tokens", p["image_tokens"]), p["layer_controls"], p["repeats"], device, log)
        entries += layers_entries(res, name, f"python benchmarks/run.py{q}{model_flag} --only layers")
    if args.only in (None, "atp"):
        res = bench_atp.run(lm, eng, p["atp_items"], p["atp_image_tokens"], p["batch_size"], device, log)
        mem = bench_atp.memory(model_dir, p["image_tokens"], device, dtype, log) if model_dir != "tiny" else None
        entries += bench_atp.entries(res, mem, name, f"python benchmarks/run.py{q}{model_flag} --only atp", entry)
    if args.only in (None, "ablation"):
        res = bench_ablation.run(lm, eng, p["items"], p["image_tokens"], p["baseline_sample"], p["overhead_rows"], p["repeats"], device, log,
                                 bench_ablation.LIMIT_ABLATIONS, p["batched_sample"])
        entries += bench_ablation.entries(res, name, f"python benchmarks/run.py{q}{model_flag} --only ablation", entry, device)
    if args.only in (None, "grounding"):
        res = bench_grounding.run(lm, eng, p["items"], p["image_tokens"], bench_grounding.CONTROLS, p["repeats"], device, log)
        entries += bench_grounding.entries(res, name, f"python benchmarks/run.py{q}{model_flag} --only grounding", entry)
    if args.only in (None, "memory") and model_dir != "tiny":
        T = _setup.prompt_of_length(lm, p["image_tokens"]).layout.n_tokens
        budgets = [r * T for r in p["budget_rows"]]
        res = bench_overhead.memory(model_dir, budgets, p["memory_items"], p["image_tokens"], device, dtype, log)
        entries += memory_entries(res, name, f"python benchmarks/run.py{q}{model_flag} --only memory")
    return entries


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter prompts, fewer repeats and samples (a few minutes on a 2-core CPU)")
    ap.add_argument("--json", type=Path, help="write the entries here")
    ap.add_argument("--only", choices=["capture", "evaluation", "overhead", "memory", "layers", "atp", "study", "ablation", "grounding"])
    ap.add_argument("--model", choices=["random", "tiny", "both", "zoo", "all"], default="both",
                    help="random 2B-layout Qwen3-VL, the built-in tiny model, both; zoo: capture rows on Qwen3.5 and InternVL; all: every one")
    ap.add_argument("--lengths", type=int, nargs="+", help="capture prompt lengths (tokens)")
    ap.add_argument("--items", type=int, help="evaluation items")
    args = ap.parse_args(argv)

    device, dtype = _setup.device_and_dtype()
    p = params(device, args.quick)
    t0 = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t0:6.0f}s] {msg}", flush=True)

    machine = torch.cuda.get_device_name() if device == "cuda" else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    log(f"device {device} ({machine}), dtype {dtype}, torch {torch.__version__}")
    entries: list[dict] = []
    study = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.model in ("random", "both", "all") and args.only != "study":
            spec = _setup.model_spec(device, args.quick)
            model_dir = _setup.build(spec, f"{tmp}/random")
            lm = _setup.load(model_dir, device, dtype)
            entries += bench_model("random-2B-layout", lm, model_dir, spec.describe(), args, p, device, dtype, log)
            del lm
        if args.model in ("tiny", "both", "all") and args.only != "study":
            try:
                lm = _setup.load("tiny", device, dtype)
            except Exception as e:  # noqa: BLE001 - the built-in model may not exist yet
                log(f"[tiny] skipped: the built-in tiny model does not load ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
            else:
                tiny_p = dict(p, lengths=[min(256, p["lengths"][0])], image_tokens=256)
                entries += bench_model("tiny", lm, "tiny", f"built-in tiny model, {lm.n_layers} layers × {lm.n_heads} heads", args, tiny_p, device, dtype, log,
                                       " --model tiny")
        if args.model in ("zoo", "all") and args.only in (None, "capture"):
            for spec, lengths in _setup.zoo_specs(device, args.quick):  # capture rows only
                model_dir = _setup.build(spec, f"{tmp}/{spec.family}")
                lm = _setup.load(model_dir, device, dtype)
                zoo_args = argparse.Namespace(**{**vars(args), "only": "capture", "lengths": args.lengths or lengths})
                entries += bench_model(f"random-{spec.family}", lm, model_dir, spec.describe(), zoo_args, p, device, dtype, log, " --model zoo")
                del lm
    if args.only in (None, "study"):
        study = bench_study.run(log, quick=args.quick)
        if not study["available"]:
            log(f"  study: {study['why']}")
        entries += study_entries(study, args.quick)
    if entries:
        print_table(entries)
    if args.json:
        args.json.write_text(json.dumps(entries, indent=1, default=float))
        log(f"wrote {args.json}")
    log("done")
    return entries


if __name__ == "__main__":
    main()
