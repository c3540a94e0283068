"""Evaluation: 64 head-sets × N items, each head-set hidden from the image at a row group.

(a) *one forward per head-set* — the usual way, implemented faithfully: the language
    model runs an eager attention function (transformers' own recipe: full ``[H, T, T]``
    logits, additive causal mask, fp32 softmax) that sets the logits of the head-set's
    heads at the chosen rows to −∞ on the image keys; one full forward (vision tower
    included) per head-set per item, batch 1.
(b) *vheads batched* — :func:`vheads.evaluation.option_probs`, 64 head-sets as 64 batch
    rows, ``prefix_reuse=False``.
(c) *vheads batched + prefix reuse* — the same with ``prefix_reuse=True``: for question
    rows the system prompt and image run once and their KV cache serves all 64 rows.
    (For ``all`` rows there is no prefix to share, so (c) is (b).)

Forwards of (a) all cost the same, so (a) times ``sample`` of them and scales to 64;
on a slow CPU (b) may likewise run a sample of the head-sets and scale linearly (its
cost is linear in the batch). The JSON says how many were run. (a) and (b) must agree on
P(option) for the head-sets both ran; the largest difference is reported.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from benchmarks import _setup

BASELINE = "bench_eager_headmask"
_HIDE: dict = {}  # the head-set of the running baseline forward: {"heads": [L, H] bool, "cells": [T, T] bool}


def eager_headmask_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Eager attention that hides ``_HIDE["cells"]`` (query row × key) from the head-set's heads."""
    groups = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(groups, dim=1)  # [B, H, Tk, D]
    v = value.repeat_interleave(groups, dim=1)
    w = torch.matmul(query, k.transpose(2, 3)) * scaling  # [B, H, T, T]
    if attention_mask is not None:
        w = w + attention_mask
    heads = _HIDE["heads"][module.layer_idx]  # [H]
    if heads.any():
        hide = heads[None, :, None, None] & _HIDE["cells"][None, None]  # [1, H, T, T]
        w = w.masked_fill(hide, float("-inf"))
    w = torch.softmax(w, dim=-1, dtype=torch.float32).nan_to_num(0.0).to(query.dtype)
    out = torch.matmul(w, v)  # [B, H, T, D]
    return out.transpose(1, 2).contiguous(), None


def _baseline_forward(lm, prompt, heads: np.ndarray, cells: torch.Tensor) -> np.ndarray:
    """P over the option letters for one head-set, one full forward (batch 1)."""
    _HIDE["heads"] = torch.from_numpy(heads).to(lm.device)
    _HIDE["cells"] = cells
    inputs = {k: v.to(lm.device) for k, v in prompt.inputs.items()}
    inputs["pixel_values"] = inputs["pixel_values"].to(lm.model.dtype)
    with torch.no_grad():
        logits = lm.model(**inputs, logits_to_keep=1).logits[:, -1]
    ids = lm.adapter.letter_token_ids(lm.processor)
    return torch.softmax(logits[:, ids].float(), dim=-1).cpu().numpy()


def random_headsets(n_layers: int, n_heads: int, n: int = 64, seed: int = 0):
    """``n`` head-sets of the seed study's size (``default_k``), uniform over the model."""
    from vheads.evaluation import HeadSet, default_k

    rng = np.random.default_rng(seed)
    k = default_k(n_layers, n_heads)
    return [HeadSet.from_flat(rng.choice(n_layers * n_heads, k, replace=False), n_layers, n_heads) for _ in range(n)]


def run(lm, eng, n_items: int, image_tokens: int, baseline_sample: int, batched_sample: int, batch_size: int, device: str, log,
        limit_repeats: int = 3) -> dict:
    """{row group: {"baseline_s", "batched_s", "reuse_s", ...}} summed over items (64 head-sets each)."""
    from vheads.engine import install, positions_mask, row_mask
    from vheads.evaluation._probe import Action, option_probs

    AttentionInterface.register(BASELINE, eager_headmask_attention)
    AttentionMaskInterface.register(BASELINE, eager_mask)
    headsets = random_headsets(lm.n_layers, lm.n_heads)
    H = len(headsets)
    out = {}
    for rows in ("question", "all"):
        r = {"head_sets": H, "items": n_items, "baseline_forwards_timed": baseline_sample, "batched_head_sets_run": batched_sample,
             "batch_size": batch_size, "baseline_s": 0.0, "batched_s": 0.0, "reuse_s": 0.0, "baseline_per_forward_s": [], "max_abs_dP": 0.0}
        for i in range(n_items):
            prompt = _setup.prompt_of_length(lm, image_tokens, seed=i)
            lay = prompt.layout
            T = lay.n_tokens
            r["prompt_tokens"], r["image_tokens"] = T, len(lay.image_positions)
            action = Action(kind="mask", rows=rows, keys="image")
            cells = row_mask(lay, rows)[:, None] & positions_mask(T, lay.image_positions)[None, :]  # [T, T]
            # (a) one forward per head-set, eager attention with the head mask
            lm.model.set_attn_implementation({"text_config": BASELINE, "vision_config": "sdpa"})
            try:
                _baseline_forward(lm, prompt, headsets[0].as_mask(), cells.to(lm.device))  # warm-up
                per, p_base = [], []
                for hs in headsets[:baseline_sample]:
                    holder = {}
                    per.append(_setup.timed(lambda: holder.setdefault("p", _baseline_forward(lm, prompt, hs.as_mask(), cells.to(lm.device))), device))
                    p_base.append(holder["p"][0])
            finally:
                install(lm.model)
            r["baseline_per_forward_s"] += per
            r["baseline_s"] += _setup.median(per) * H
            # (b) vheads batched, no prefix reuse (a sample of head-sets, scaled linearly)
            holder = {}
            t = _setup.timed(lambda: holder.setdefault("p", option_probs(eng, prompt, headsets[:batched_sample], action, batch_size, prefix_reuse=False)), device)
            r["batched_s"] += t * H / batched_sample
            p_b = holder["p"]
            r["max_abs_dP"] = max(r["max_abs_dP"], float(np.abs(p_b[: len(p_base)] - np.stack(p_base)).max()))
            # (c) vheads batched + prefix reuse (all head-sets)
            if rows == "all":
                r["reuse_s"] += t * H / batched_sample  # no prefix to share: (c) is (b)
            else:
                holder = {}
                r["reuse_s"] += _setup.timed(lambda: holder.setdefault("p", option_probs(eng, prompt, headsets, action, batch_size, prefix_reuse=True)), device)
                r["max_abs_dP"] = max(r["max_abs_dP"], float(np.abs(holder["p"][:batched_sample] - p_b).max()))
        # the limit: the rows batched above (all 64 head-sets at question rows, prefix reused; the
        # timed sample at all rows) with no plan, against the same rows with the plan, alternated
        # after a warm-up (item 0's prompt; scaled to 64 head-sets and every item)
        from vheads.evaluation._probe import Probe, probe_batch

        prompt = _setup.prompt_of_length(lm, image_tokens)
        n = H if rows != "all" else batched_sample
        reuse = rows != "all"
        batch, _ = probe_batch(eng, [Probe(prompt, action, headsets[:n])], [(0, 0, n)], prefix_reuse=reuse)
        planned_s, plain_s = _setup.against_limit(lambda: option_probs(eng, prompt, headsets[:n], action, batch_size, prefix_reuse=reuse),
                                                  lambda: eng.run(batch, None, logits_at=[batch.length - 1]), limit_repeats, device)
        r.update(limit_s=n_items * plain_s * H / n, limit_batched_s=n_items * planned_s * H / n, limit_head_sets=n, limit_repeats=limit_repeats)
        log(f"  evaluation rows={rows}: one-per-head-set {r['baseline_s']:.1f}s, batched {r['batched_s']:.1f}s, "
            f"batched+reuse {r['reuse_s']:.1f}s (T={r['prompt_tokens']}, {r['image_tokens']} image tokens, max |ΔP| {r['max_abs_dP']:.1e})")
        out[rows] = r
    return out
