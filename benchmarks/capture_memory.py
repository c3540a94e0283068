"""Peak memory of one forward at a long prompt: plain sdpa vs vheads capture vs eager
``output_attentions``. Each mode runs in a fresh subprocess; the figure is the growth of
the process's peak RSS (``peak_mb``; model, inputs and one warm-up plain forward are
already in memory, so the modes differ only by what their forward adds).

    python benchmarks/capture_memory.py --tokens 1024 2048
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile


def _measure(model_dir: str, mode: str, side: int) -> dict:
    import torch
    from PIL import Image

    from vheads.data import Item
    from vheads.engine import Capture, Engine, positions_mask
    from vheads.models import load_model

    torch.set_num_threads(2)
    lm = load_model(model_dir)
    rng = torch.Generator().manual_seed(0)
    img = Image.fromarray((torch.rand(side, side, 3, generator=rng) * 255).byte().numpy())
    prompt = lm.adapter.build(Item("m", "bench", img, "what is in panel 1 ?", "A", regions={"p": (0, 0, side // 2, side)}, options=("a", "b", "c", "d")), lm.processor)
    T = prompt.layout.n_tokens
    eng = Engine(lm)
    if mode == "eager":
        lm.model.set_attn_implementation({n: "eager" for n in lm.model.config.sub_configs})
    plan = None
    if mode == "capture":
        rows = positions_mask(T, prompt.layout.spans["question"] + prompt.layout.spans["last"])[None]
        groups = positions_mask(T, prompt.layout.regions["p"].positions)[None, None]
        plan = eng.plan(1, captures=[Capture(rows, groups)])
    with torch.no_grad():  # warm-up allocations of the model code itself
        lm.model(**{k: v for k, v in prompt.inputs.items()}, logits_to_keep=1) if mode != "eager" else None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with torch.no_grad():
        if mode == "eager":
            out = lm.model(**prompt.inputs, output_attentions=True, logits_to_keep=1)
            n = sum(a.numel() for a in out.attentions)
        else:
            eng.forward(prompt, plan, logits_at=[prompt.layout.last])
            n = 0
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"mode": mode, "tokens": T, "peak_mb": after / 1024, "growth_mb": (after - before) / 1024, "attention_values": n}


def build_model(out: str, layers: int = 8, heads: int = 16, kv_heads: int = 8) -> str:
    from vheads.models.tiny_random import build_tiny_random

    return str(build_tiny_random("qwen3_vl", out, hidden=256, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=16, vision_hidden=32, max_pixels=4096 * 4096))


def run(tokens: list[int], model_dir: str | None = None) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = model_dir or build_model(tmp + "/m")
        rows = []
        for t in tokens:
            side = 32 * max(1, int(round(t**0.5)))  # one merged token per 32 px
            for mode in ("plain", "capture", "eager"):
                res = subprocess.run([sys.executable, __file__, "--one", model_dir, mode, str(side)], capture_output=True, text=True, check=True)
                rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=3)
    ap.add_argument("--tokens", nargs="+", type=int, default=[1024, 2048])
    a = ap.parse_args()
    if a.one:
        print(json.dumps(_measure(a.one[0], a.one[1], int(a.one[2]))))
    else:
        for r in run(a.tokens):
            print(f"{r['mode']:8s} T={r['tokens']:5d}  peak RSS {r['peak_mb']:8.1f} MB  (+{r['growth_mb']:.1f} MB in the forward)")
