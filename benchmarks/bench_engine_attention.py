"""The CPU attention of short prompts (:mod:`vheads.engine._short_attention`) against sdpa.

At the tiny model's shapes (16 query heads on 4 KV heads, head_dim 8, 28 tokens, batches of
512 rows) the engine's plain path used to be transformers' sdpa function: KV heads copied per
query head, then sdpa's CPU flash kernel (``is_causal`` when no padding, a boolean mask
otherwise). It is now two batched matmuls and a softmax in chunks of batch rows. Printed:
each path's median time over interleaved repeats and the ratio sdpa / short, measured in the
same run, with the largest difference of their outputs; past ``MAX_KEYS`` keys the engine
keeps sdpa, and the last rows show why.

    python benchmarks/bench_engine_attention.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))


def _median_ms(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def main(argv=None) -> int:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from vheads.engine._short_attention import MAX_KEYS, short_attention

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, smaller batches")
    args = ap.parse_args(argv)
    repeats, B = (5, 128) if args.quick else (21, 512)
    H, Hkv, D = 16, 4, 8

    class Layer(torch.nn.Module):
        layer_idx, num_key_value_groups, is_causal = 0, H // Hkv, True

    g = torch.Generator().manual_seed(0)
    print(f"B = {B} rows, {H} query heads on {Hkv} KV heads, head_dim {D}; medians of {repeats} repeats")
    print(f"{'T':>4} {'mask':>8} {'sdpa ms':>9} {'short ms':>9} {'sdpa/short':>11} {'max |d|':>9}")
    for T in (28, 40, MAX_KEYS, 2 * MAX_KEYS):
        q = torch.randn(B, H, T, D, generator=g)
        k = torch.randn(B, Hkv, T, D, generator=g)
        v = torch.randn(B, Hkv, T, D, generator=g)
        valid = torch.ones(B, T, dtype=torch.bool)
        valid[::3, :4] = False  # left padding
        padded = (torch.ones(T, T, dtype=torch.bool).tril()[None] & valid[:, None, :])[:, None]
        for name, mask in (("causal", None), ("padding", padded)):
            sdpa = lambda: sdpa_attention_forward(Layer(), q, k, v, mask, scaling=D ** -0.5)[0]  # noqa: E731
            short = lambda: short_attention(q, k, v, mask, D ** -0.5, causal=True)  # noqa: E731
            diff = float((sdpa().transpose(1, 2) - short()).abs().max())
            a, b = _median_ms(sdpa, repeats), _median_ms(short, repeats)
            print(f"{T:>4} {name:>8} {a:>9.2f} {b:>9.2f} {a / b:>10.2f}× {diff:>9.1e}"
                  + ("" if T <= MAX_KEYS else "   (past MAX_KEYS: the engine keeps sdpa)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
