"""Head-output ablation (``zero``): 64 head-sets × N items, each head-set's outputs zeroed at a row group.

(a) *one forward per head-set* — the usual way: the plain model (sdpa) with a forward
    pre-hook on each ``o_proj`` that zeroes the head-set's slices at the chosen rows; one
    full forward (vision tower included) per head-set per item, batch 1.
(c) *vheads batched + prefix reuse* — :func:`vheads.evaluation._probe.run_probes` with an
    ``ablate`` action: 64 head-sets as 64 batch rows; at question rows the system prompt and
    image run once (at all rows there is no prefix to share, layer-prefix sharing applies).

*The limit*: the same 64 rows batched with no plan (item 0; at all rows the first
``limit_rows`` of them, scaled to 64): the ratio (a) / that is what an ablation of no cost
would reach on this device (on a CPU a batch costs about its rows' arithmetic).

*Against the limit* (issue 32's CPU target): each batched ablation row — ``zero``, ``mean``
(the reference set: the benchmark's items) and ``resample`` (each item's donor: the other
item, or the next prompt of the same length when there is one item) at question and all
rows — as a fraction of its limit row, ``limit time / batched time`` per item (each pair
run once untimed, then alternated ``repeats`` times; medians): ≥ 0.95 on a CPU, where a
batch of 64 rows costs about 64 rows of work (the ≥ 30× / ≥ 6× targets stand for the GPU run).

*Overhead*: the same batch (``rows`` copies of one prompt) under the ablation plan vs with
no plan (sdpa everywhere), medians of interleaved repeats. (a) times ``sample`` forwards
and scales to 64; (a) and (c) must agree on P(option) (``max_abs_dP``).
"""

from __future__ import annotations

import numpy as np
import torch

from benchmarks import _setup

QUESTION_ROWS_TARGET = 30.0  # the masking rows' targets (benchmarks/run.py), from 1,000 image tokens
ALL_ROWS_TARGET = 6.0
OVERHEAD_TARGET = 1.15
TARGET_IMAGE_TOKENS = 1000
LIMIT_FRACTION_TARGET = 0.95  # CPU: each batched row ≥ 0.95× its limit row (issue 32)
#: the ablations run against their limit (``zero`` also against one forward per head-set)
LIMIT_ABLATIONS = ("zero", "mean", "resample")


def _hooked_forward(lm, prompt, heads: np.ndarray, rows: torch.Tensor) -> np.ndarray:
    """P over the option letters with ``heads`` [L, H]' outputs zeroed at ``rows`` [T] (o_proj pre-hooks)."""
    layers = lm.model.get_decoder().layers
    D = lm.head_dim
    hooks = []
    for l in np.nonzero(heads.any(1))[0]:
        cols = torch.cat([torch.arange(h * D, (h + 1) * D) for h in np.nonzero(heads[l])[0]]).to(lm.device)

        def pre(module, args, cols=cols):
            x = args[0].clone()
            x[:, rows.to(x.device)[:, None], cols[None, :]] = 0.0
            return (x, *args[1:])

        hooks.append(layers[int(l)].self_attn.o_proj.register_forward_pre_hook(pre))
    inputs = {k: v.to(lm.device) for k, v in prompt.inputs.items()}
    inputs["pixel_values"] = inputs["pixel_values"].to(lm.model.dtype)
    try:
        with torch.no_grad():
            logits = lm.model(**inputs, logits_to_keep=1).logits[:, -1]
    finally:
        for h in hooks:
            h.remove()
    ids = lm.adapter.letter_token_ids(lm.processor)
    return torch.softmax(logits[:, ids].float(), dim=-1).cpu().numpy()


def run(lm, eng, n_items: int, image_tokens: int, baseline_sample: int, overhead_rows: int, repeats: int, device: str, log,
        limit_ablations: tuple[str, ...] = ("zero",), limit_rows: int | None = None) -> dict:
    """{row group: {"baseline_s", "reuse_s", "ablated_s", "plain_s", "ablations_s", ...}}; ``limit_ablations``: the
    ablations timed against the limit (:data:`LIMIT_ABLATIONS` in ``benchmarks/run.py``)."""
    from benchmarks.bench_evaluation import random_headsets
    from vheads.engine import install, row_mask
    from vheads.evaluation._probe import Action, Probe, probe_batch, run_probes

    headsets = random_headsets(lm.n_layers, lm.n_heads)
    H = len(headsets)
    out = {}
    for group in ("question", "all"):
        r = {"head_sets": H, "items": n_items, "baseline_forwards_timed": baseline_sample, "baseline_s": 0.0, "reuse_s": 0.0,
             "max_abs_dP": 0.0}
        action = Action("ablate", rows=group, ablation="zero")
        for i in range(n_items):
            prompt = _setup.prompt_of_length(lm, image_tokens, seed=i)
            r["prompt_tokens"], r["image_tokens"] = prompt.layout.n_tokens, len(prompt.layout.image_positions)
            rows = row_mask(prompt.layout, group).nonzero().flatten()
            lm.model.set_attn_implementation({"text_config": "sdpa", "vision_config": "sdpa"})
            try:
                _hooked_forward(lm, prompt, headsets[0].as_mask(), rows)  # warm-up
                per, p_base = [], []
                for hs in headsets[:baseline_sample]:
                    holder = {}
                    per.append(_setup.timed(lambda: holder.setdefault("p", _hooked_forward(lm, prompt, hs.as_mask(), rows)), device))
                    p_base.append(holder["p"][0])
            finally:
                install(lm.model)
            r["baseline_s"] += _setup.median(per) * H
            holder = {}
            r["reuse_s"] += _setup.timed(lambda: holder.setdefault("p", run_probes(eng, [Probe(prompt, action, headsets)], prefix_reuse=True)[0]), device)
            r["max_abs_dP"] = max(r["max_abs_dP"], float(np.abs(holder["p"][: len(p_base)] - np.stack(p_base)).max()))
        # the limit: the same rows (item 0's prompt; all 64 at question rows, the first ``limit_rows``
        # at all rows, scaled to 64) batched with no plan, as a free ablation would run, against each
        # ablation's batched rows: alternated after a warm-up, medians (mean and resample read the
        # benchmark items' mean outputs and a donor prompt)
        prompt = _setup.prompt_of_length(lm, image_tokens)
        n = H if group == "question" or limit_rows is None else min(H, limit_rows)
        batch, _ = probe_batch(eng, [Probe(prompt, action, headsets[:n])], [(0, 0, n)])
        plain_batched = lambda: eng.run(batch, None, logits_at=[batch.length - 1])  # noqa: E731
        r["ablations_s"], r["limits_s"] = {}, {}
        for kind in limit_ablations:
            refs = [None] if kind == "zero" else _references(eng, kind, n_items, image_tokens)
            act = action if kind == "zero" else Action("ablate", rows=group, ablation=kind)
            t_kind, t_limit = _setup.against_limit(lambda: run_probes(eng, [Probe(prompt, act, headsets[:n], refs[0])], prefix_reuse=True),
                                                   plain_batched, repeats, device)
            r["ablations_s"][kind], r["limits_s"][kind] = t_kind * H / n, t_limit * H / n
        r["plain_batched_s"] = _setup.median(list(r["limits_s"].values()))
        r["limit_head_sets"] = n
        r["limit_repeats"] = repeats
        # overhead: the same batch with and without the ablation plan
        probes = [Probe(prompt, action, random_headsets(lm.n_layers, lm.n_heads, n=overhead_rows))]
        batch, plan = probe_batch(eng, probes, [(0, 0, overhead_rows)])
        last = [batch.length - 1]
        ablated = lambda: eng.run(batch, plan, logits_at=last)  # noqa: E731
        plain = lambda: eng.run(batch, None, logits_at=last)  # noqa: E731
        t = _setup.interleaved({"ablated": ablated, "plain": plain}, repeats, device)
        r.update(ablated_s=_setup.median(t["ablated"]), plain_s=_setup.median(t["plain"]), overhead_rows=overhead_rows, prefix=batch.prefix)
        log(f"  ablation zero@{group}: one-per-head-set {r['baseline_s']:.1f}s, batched+reuse {r['reuse_s']:.1f}s, "
            f"plain batched {r['plain_batched_s']:.2f}s an item; "
            f"ablated {r['ablated_s']:.2f}s vs plain {r['plain_s']:.2f}s ({overhead_rows} rows, prefix {batch.prefix}; max |ΔP| {r['max_abs_dP']:.1e})")
        out[group] = r
    return out


def _references(eng, kind: str, n_items: int, image_tokens: int) -> list:
    """Item 0's replacement outputs under ``kind``: the mean over the benchmark's items, or
    a donor's own outputs (another prompt of the same layout)."""
    from vheads.evaluation._ablation import item_references, reference_means

    prompts = [_setup.prompt_of_length(eng.lm, image_tokens, seed=i) for i in range(max(2, n_items))]
    if kind == "mean":
        return [reference_means(eng, [_setup.item_of_length(eng.lm, image_tokens, seed=i) for i in range(max(1, n_items))])]
    return item_references(eng, kind, prompts)


def entries(res: dict, model: str, cmd: str, entry, device: str = "cpu") -> list[dict]:
    """The benchmark rows (``entry`` from benchmarks/run.py); targets from 1,000 image tokens."""
    rows = []
    for group, target in (("question", QUESTION_ROWS_TARGET), ("all", ALL_ROWS_TARGET)):
        r = res[group]
        applies = r["image_tokens"] >= TARGET_IMAGE_TOKENS
        why = "" if applies else f"; targets apply from {TARGET_IMAGE_TOKENS:,} image tokens"
        n = f"64 head-sets × {r['items']} item(s), {r['image_tokens']} image tokens, prompt {r['prompt_tokens']} tokens"
        rows.append(entry(f"{model} ablate zero@{group}: per-head-set / batched+reuse", r["baseline_s"] / r["reuse_s"],
                          target if applies else None, "higher", r, cmd, n + why))
        limit = r["baseline_s"] / r["items"] / r["plain_batched_s"]
        rows.append(entry(f"{model} ablate zero@{group}: per-head-set / plain batched (the limit)", limit, None, "higher", r, cmd,
                          "the ratio an ablation of no cost would reach: the same 64 rows batched (prefix reused at question rows) "
                          "with no plan; context"))
        for kind, t in r["ablations_s"].items():
            rows.append(entry(f"{model} ablate {kind}@{group}: batched / its limit", r["limits_s"][kind] / t,
                              LIMIT_FRACTION_TARGET if device == "cpu" else None, "higher", r, cmd,
                              f"limit time / batched time per item (the same {r['limit_head_sets']} rows with no plan), medians of {r['limit_repeats']} "
                              "alternated runs after a warm-up; target on a CPU only"))
        rows.append(entry(f"{model} ablated forward / plain forward, zero@{group}", r["ablated_s"] / r["plain_s"],
                          OVERHEAD_TARGET if applies else None, "lower", r, cmd,
                          f"{r['overhead_rows']} rows, prefix {r['prefix']}" + why))
    return rows
