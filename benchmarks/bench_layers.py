"""Layer-prefix sharing on / off, measured side by side (``benchmarks/run.py --only layers``).

The workload is an evaluation shard in miniature: ``items`` prompts × (S + ``controls``
layer-matched + ``controls`` any-layer draws), each hiding the image at all rows (mask@all:
a full forward, no shareable token prefix). S is the seed study's size with its heads in
the layers from ``L // 4`` on, as discovered head-sets often are; its layer-matched
controls then share S's lower layers, the any-layer ones share less. The same probes run
through :func:`vheads.evaluation._probe.run_probes` with ``Batching.share_layers`` on and
off (interleaved repeats, medians); the row also gives the fraction of decoder-layer rows
(rows × positions) computed with sharing on, and the largest |ΔP(option)| between the two.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from benchmarks import _setup


def workload(lm, n_items: int, image_tokens: int, controls: int):
    """(prompts, head-sets): S in layers [L // 4, L) plus layer-matched and any-layer draws."""
    from vheads.evaluation import HeadSet, default_k, draw_controls

    L, H = lm.n_layers, lm.n_heads
    rng = np.random.default_rng(0)
    low = L // 4
    k = min(default_k(L, H), (L - low) * H)
    S = HeadSet.from_flat(low * H + rng.choice((L - low) * H, k, replace=False), L, H)
    headsets = [S, *draw_controls("layer-matched", S, controls, 1), *draw_controls("any-layer", S, controls, 2)]
    prompts = [_setup.prompt_of_length(lm, image_tokens, seed=i) for i in range(n_items)]
    return prompts, headsets


def _layer_rows(lm):
    """Hooks counting the (rows × positions) each decoder layer computes: (counts, remove)."""
    from vheads.engine._layers import decoder_layers

    counts = {"computed": 0, "full": 0}

    def before(m, args, kwargs):
        counts["full"] += args[0].shape[0] * args[0].shape[1]

    def after(m, args, out):
        out = out[0] if isinstance(out, tuple) else out
        counts["computed"] += out.shape[0] * out.shape[1]

    hooks = []
    for layer in decoder_layers(lm.model):
        hooks.append(layer.register_forward_pre_hook(before, with_kwargs=True, prepend=True))  # before the sharing cuts rows
        hooks.append(layer.register_forward_hook(after, prepend=True))  # before the output is gathered back
    return counts, lambda: [h.remove() for h in hooks]


def run(lm, eng, n_items: int, image_tokens: int, controls: int, repeats: int, device: str, log) -> dict:
    """{"on_s", "off_s", "layer_rows_fraction", "max_abs_dP", ...}."""
    from vheads.evaluation._probe import Action, Probe, run_probes

    prompts, headsets = workload(lm, n_items, image_tokens, controls)
    probes = [Probe(p, Action("mask", rows="all"), headsets) for p in prompts]
    base = eng.batching
    runs = {}
    for share in (True, False):
        eng.batching = dataclasses.replace(base, share_layers=share)
        counts, remove = _layer_rows(lm)
        runs[share] = (run_probes(eng, probes), counts)  # warm-up, values and layer rows
        remove()
    t = {"on": [], "off": []}
    for _ in range(repeats):  # interleaved: machine load hits both alike
        for share, key in ((True, "on"), (False, "off")):
            eng.batching = dataclasses.replace(base, share_layers=share)
            t[key].append(_setup.timed(lambda: run_probes(eng, probes), device))
    eng.batching = base
    on_counts = runs[True][1]
    r = {"items": n_items, "head_sets": len(headsets), "tokens": prompts[0].layout.n_tokens,
         "on_s": _setup.median(t["on"]), "off_s": _setup.median(t["off"]), "times": t,
         "layer_rows_fraction": on_counts["computed"] / on_counts["full"],
         "max_abs_dP": float(max(np.abs(a - b).max() for a, b in zip(runs[True][0], runs[False][0])))}
    log(f"  layer sharing: on {r['on_s']:.2f}s, off {r['off_s']:.2f}s, layer rows computed {r['layer_rows_fraction']:.2f}, "
        f"max|ΔP| {r['max_abs_dP']:.1e}")
    return r
