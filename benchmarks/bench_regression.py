"""Head attribution by regression against the exact causal map and AtP: its cost, as ratios.

Counted (always; no clock): the decoder-layer rows each method computes per item, the way
the engine runs them. A head-set whose heads sit at layers ≥ l shares layers 0 … l − 1 with
the item's baseline (layer-prefix sharing, :mod:`vheads.causal._map`), so one head-set costs
``L − l_min`` layer rows, the baseline ``L``:

- exact: every head alone and every whole layer (``--no-layers``: heads only) + the baseline;
- regression: the design's subsets (default 256, q = 1/2, the drawn design itself; on the 2B
  layout's 448 heads, 2 subsets per head where ``--subsets`` is fewer) + the baseline;
- AtP: one forward and one backward per prompt, counted as 3 forwards of L layers (a
  backward ≈ two forwards; checkpointing adds one more: ``--checkpoint``).

Rows: the tiny model with ``vheads causal-map``'s default items (16 per NCS arm), and the
2B layout (28 × 16 heads); each line prints regression / exact and AtP / exact.

Timed (``--time``, for whoever measures on a quiet machine): the tiny model's exact map and
the regression on the same items in one run, and their ratio.

    python -m benchmarks.bench_regression [--subsets 256] [--q 0.5] [--time]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

TINY = (4, 16)  # layers × heads of the built-in tiny model (16 heads a layer since issue 41)
LAYOUT_2B = (28, 16)
ITEMS = 16  # vheads causal-map's default --n (per NCS arm)


def layer_rows(min_layers: np.ndarray, n_layers: int) -> int:
    """Layer rows of head-sets whose lowest layers are ``min_layers``, and the baseline."""
    return int((n_layers - min_layers).sum()) + n_layers


def counts(n_layers: int, n_heads: int, subsets: int, q: float, layers: bool = True, checkpoint: bool = False) -> dict:
    """Per item: the layer rows of the exact map, the regression design and AtP."""
    from vheads.causal import draw_design

    head_min = np.repeat(np.arange(n_layers), n_heads)
    exact = layer_rows(np.concatenate([head_min, np.arange(n_layers)]) if layers else head_min, n_layers)
    d = draw_design(n_layers, n_heads, subsets, q=q)
    lowest = np.array([min((l for (l, _), x in zip(d.heads, row) if x), default=n_layers) for row in d.X])
    regression = layer_rows(lowest, n_layers)
    atp = (4 if checkpoint else 3) * n_layers
    return {"exact": exact, "regression": regression, "atp": atp}


def timed_tiny(subsets: int, q: float) -> tuple[float, float]:
    """Seconds of the tiny model's exact NCS map and of the regression, same items, one run."""
    from vheads.causal import causal_item_sets, draw_design, exact_causal_map, head_attribution
    from vheads.engine import Engine
    from vheads.models import load_model

    eng = Engine(load_model("tiny"))
    sets = causal_item_sets(["ncs"], ITEMS, lambda kind: 0)
    t = time.perf_counter()
    exact_causal_map(eng, sets, ["ncs"])
    exact_s = time.perf_counter() - t
    t = time.perf_counter()
    head_attribution(eng, sets, ["ncs"], draw_design(*TINY, subsets, q=q))
    return exact_s, time.perf_counter() - t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subsets", type=int, default=256)
    ap.add_argument("--q", type=float, default=0.5)
    ap.add_argument("--checkpoint", action="store_true", help="AtP with checkpointed layers (one more forward)")
    ap.add_argument("--time", action="store_true", help="also time the tiny model's exact map and regression")
    a = ap.parse_args(argv)
    print(f"layer rows per item (NCS, one arm; {a.subsets} subsets, q = {a.q}); ratios against the exact map")
    for name, (L, H) in (("tiny", TINY), ("2B layout", LAYOUT_2B)):
        n = max(a.subsets, 2 * L * H)  # a design needs more subsets than heads: 2 per head where --subsets is fewer
        c = counts(L, H, n, a.q, checkpoint=a.checkpoint)
        print(f"  {name} ({L} × {H}, {n} subsets): exact {c['exact']:,}, regression {c['regression']:,} "
              f"({c['regression'] / c['exact']:.2f}× exact), AtP {c['atp']:,} ({c['atp'] / c['exact']:.3f}× exact); "
              f"× {2 * ITEMS} prompts on the default items")
    if a.time:
        exact_s, reg_s = timed_tiny(a.subsets, a.q)
        print(f"  tiny, timed: regression / exact = {reg_s / exact_s:.2f}")


if __name__ == "__main__":
    main()
