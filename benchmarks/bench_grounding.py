"""Grounding: the test of a head-set S against R random controls vs one capture forward per item.

(a) *capture* — :func:`vheads.evaluation.capture_maps`: one forward per item reading every
    head's map from the last prompt row onto every image token (``[L, H, |I|]``).
(b) *grounding test* — the same capture, then S and R controls (``any-layer``, drawn with
    :func:`vheads.evaluation.draw_controls`) aggregated, drawn on the image through the token
    borders, pointed and boxed (:func:`vheads.evaluation.grounding`): the controls are
    other subsets of the captured maps, so no forward is added.

The ratio (b) / (a) is what the controls cost on top of the forward (target ≤ 1.1 with
R = 1,000, issue 45). Times are medians of interleaved repeats.

    python benchmarks/bench_grounding.py [--quick] [--model random|tiny] [--controls R]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "src"))

from benchmarks import _setup  # noqa: E402

TARGET = 1.1
CONTROLS = 1000


def run(lm, eng, n_items: int, image_tokens: int, R: int, repeats: int, device: str, log) -> dict:
    from vheads.evaluation import GroundingRule, HeadSet, capture_maps, default_k, draw_controls, grounding

    L, H = eng.shape
    items = [_setup.item_of_length(lm, image_tokens, seed=i) for i in range(n_items)]
    k = min(default_k(L, H), len(lm.attention_layers) * H // 2)
    S = HeadSet([(lm.attention_layers[i % len(lm.attention_layers)], (i // len(lm.attention_layers)) % H) for i in range(k)],
                L, H, lm.attention_layers)
    controls = list(draw_controls("any-layer", S, R, seed=0))
    rule = GroundingRule()

    def capture():
        return capture_maps(eng, items, rule)

    def test():
        return grounding(eng, items, [S, *controls], rule, captured=capture_maps(eng, items, rule))

    t = _setup.interleaved({"capture": capture, "test": test}, repeats, device)
    a, b = _setup.median(t["capture"]), _setup.median(t["test"])
    n_tokens = len(lm.adapter.build(items[0], lm.processor).layout.image_positions)
    log(f"  grounding: {n_items} items x {n_tokens} image tokens, S of {len(S)} heads + {len(controls)} controls: "
        f"capture {a:.3f} s, test {b:.3f} s, ratio {b / a:.3f}")
    return {"capture_s": a, "test_s": b, "ratio": b / a, "items": n_items, "image_tokens": n_tokens, "k": len(S),
            "controls": len(controls), "R_asked": R}


def entries(res: dict, name: str, command: str, entry) -> list[dict]:
    return [entry(f"{name}: grounding test, S + {res['controls']} controls / one capture per item "
                  f"({res['items']} items, {res['image_tokens']} image tokens)", res["ratio"], TARGET, "lower", res, command)]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one item, 256 image tokens, one repeat (a smoke run)")
    ap.add_argument("--model", choices=["random", "tiny"], default="random")
    ap.add_argument("--controls", type=int, default=CONTROLS)
    args = ap.parse_args(argv)
    device, dtype = _setup.device_and_dtype()
    t0 = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t0:6.0f}s] {msg}", flush=True)

    items, tokens, repeats = (1, 256, 1) if args.quick else (4, 1024, 5)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "tiny":
            lm = _setup.load("tiny", device, dtype)
        else:
            spec = _setup.model_spec(device, args.quick)
            lm = _setup.load(_setup.build(spec, f"{tmp}/random"), device, dtype)
            log(f"[random-2B-layout] {spec.describe()}")
        from vheads.engine import Engine

        res = run(lm, Engine(lm), items, tokens, args.controls, repeats, device, log)
    met = "yes" if res["ratio"] <= TARGET else "NO"
    print(f"grounding test with {res['controls']} controls / one capture per item: {res['ratio']:.3f}x (target <= {TARGET}x: {met})")
    return res


if __name__ == "__main__":
    main()
