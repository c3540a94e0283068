"""Capture: vheads capture vs a plain sdpa forward vs eager + ``output_attentions``.

Capture here is what discovery does per item: region mass from the query span and the
last prompt row onto the six panels and the whole image, every (layer, head), batch 1.
*plain* is the same model's forward with no plan (the language model on sdpa);
*eager* switches the language model to transformers' eager attention and asks for
``output_attentions=True`` (the usual way: keep every ``[H, T, T]`` map to read a row).

Times are medians of interleaved repeats in this process. Peak memory comes from a
fresh subprocess per (mode, length) — CPU: the process's peak RSS (VmHWM), GPU: the peak of
``torch.cuda.max_memory_allocated`` — so one mode's allocations cannot hide another's.
Both include the model's weights: the ratio is the whole footprint of a forward.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks import _setup


def _capture_plan(eng, prompt):
    from vheads.engine import Capture, positions_mask

    lay = prompt.layout
    T = lay.n_tokens
    rows = positions_mask(T, lay.spans["query"] + lay.spans["last"])[None]  # [1, T]
    groups = [r.positions for r in lay.regions.values()] + [lay.image_positions]
    gmask = torch.stack([positions_mask(T, g) for g in groups])[None]  # [1, G, T]
    return eng.plan(1, captures=[Capture(rows, gmask)])


def _runner(lm, eng, prompt, mode: str):
    """A no-argument function running one forward of ``mode``."""
    from vheads.engine import install

    last = prompt.layout.last
    if mode == "plain":
        return lambda: eng.forward(prompt, None, logits_at=[last])
    if mode == "capture":
        plan = _capture_plan(eng, prompt)
        return lambda: eng.forward(prompt, plan, logits_at=[last])
    if mode == "eager":
        inputs = {k: v.to(lm.device) for k, v in prompt.inputs.items()}
        inputs["pixel_values"] = inputs["pixel_values"].to(lm.model.dtype)

        def eager():
            lm.model.set_attn_implementation({"text_config": "eager", "vision_config": "sdpa"})
            try:
                with torch.no_grad():
                    out = lm.model(**inputs, output_attentions=True, logits_to_keep=1)
                assert len(out.attentions) == len(lm.attention_layers)  # hybrid models: softmax layers only
            finally:
                install(lm.model)
        return eager
    raise ValueError(f"unknown capture mode {mode!r}")


def eager_attention_bytes(lm, n_tokens: int) -> int:
    """What ``output_attentions`` keeps: L · H · T² values (L: the softmax-attention layers)."""
    return len(lm.attention_layers) * lm.n_heads * n_tokens**2 * lm.model.dtype.itemsize


def _available_bytes(device: str) -> int:
    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return int(free)
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def peak_memory_one(model_dir: str, mode: str, n_tokens: int, device: str, dtype: str) -> dict:
    """Run in a fresh process: load, one warm-up plain forward, then one ``mode`` forward."""
    from vheads.engine import Engine

    lm = _setup.load(model_dir, device, dtype)
    eng = Engine(lm)
    prompt = _setup.prompt_of_length(lm, n_tokens)
    _runner(lm, eng, prompt, "plain")()  # warm-up: the model code's own allocations
    before, peak = _setup.peak_memory(_runner(lm, eng, prompt, mode), device)
    return {"mode": mode, "tokens": prompt.layout.n_tokens, "peak_mb": peak / 2**20, "growth_mb": (peak - before) / 2**20}


def _peak_memory(model_dir: str, mode: str, n_tokens: int, device: str, dtype: str) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.bench_capture", model_dir, mode, str(n_tokens), device, dtype]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    if res.returncode != 0:
        raise RuntimeError(f"memory subprocess {' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def run(lm, eng, model_dir: str, lengths: list[int], repeats: int, device: str, dtype: str, log) -> dict:
    """{T: {mode: {"times": [...], "time_s": median, "peak_mb", "growth_mb"} | {"skipped": why}}}."""
    results = {}
    for n in lengths:
        prompt = _setup.prompt_of_length(lm, n)
        T = prompt.layout.n_tokens
        modes = ["plain", "capture", "eager"]
        res: dict[str, dict] = {m: {"times": []} for m in modes}
        need = eager_attention_bytes(lm, T)
        avail = _available_bytes(device)
        if need > 0.6 * avail:
            res["eager"] = {"skipped": f"output_attentions would keep {need / 2**30:.1f} GiB of maps (L·H·T²); {avail / 2**30:.1f} GiB free"}
            modes.remove("eager")
        runners = {m: _runner(lm, eng, prompt, m) for m in modes}
        for m, times in _setup.interleaved(runners, repeats, device).items():
            res[m]["times"] = times
        for m in modes:
            res[m]["time_s"] = _setup.median(res[m]["times"])
            res[m].update({k: v for k, v in _peak_memory(model_dir, m, n, device, dtype).items() if k in ("peak_mb", "growth_mb")})
        log(f"  capture T={T}: " + ", ".join(
            f"{m} {r['time_s']:.2f}s {r['peak_mb']:.0f}MB" if "time_s" in r else f"{m} skipped" for m, r in res.items()))
        results[T] = res
    return results


if __name__ == "__main__":
    model_dir, mode, n, device, dtype = sys.argv[1:6]
    print(json.dumps(peak_memory_one(model_dir, mode, int(n), device, dtype)))
