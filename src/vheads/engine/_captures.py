"""What a plan's captures read from a layer's attention weights (:class:`vheads.engine.Capture`):
the region mass of each query row, summed over the rows a capture reads, and the layer pass for
a layer where the plan only captures. The attention function (:mod:`vheads.engine._attention`)
calls these where it has the weights."""

from __future__ import annotations

import torch

from vheads.engine._schedule import Chunk, Schedule, on_device


def model_mask(attention_mask, idx_abs, q_off: int, tk: int) -> torch.Tensor:
    """The model's own mask at query rows ``idx_abs`` [Qs], additive fp32 [B|1, Qs, Tk]
    (causal when the model passes none)."""
    device = idx_abs.device
    if attention_mask is None:
        k = torch.arange(tk, device=device)
        return torch.zeros(1, len(idx_abs), tk, device=device).masked_fill_(k[None, None, :] > idx_abs[None, :, None], float("-inf"))
    am = attention_mask[:, 0, idx_abs - q_off, :tk]  # [B|1, Qs, Tk]
    return torch.zeros(am.shape, device=device).masked_fill_(~am, float("-inf")) if am.dtype == torch.bool else am.float()


def capture_layer_rows(query, key_f32, attention_mask, scaling, chunk: Chunk, q_off: int, layer: int, sched: Schedule,
                       results: dict) -> None:
    """A layer no intervention acts in, under a plan that captures: the attention weights of
    every (batch row, head) at the chunk's query rows, added to the plan's captures (``results``: name -> its accumulator); sdpa's
    output stands as it is. ``key_f32`` [B, Hkv, Tk, D] is the layer's keys cast once; the
    query heads of one KV head are read as one block (no copy of the keys)."""
    B, H, _, D = query.shape
    hkv, tk = key_f32.shape[1], key_f32.shape[2]
    n = chunk.stop - chunk.start
    q = query[:, :, chunk.local].float().reshape(B, hkv, -1, D)  # [B, Hkv, g·Qs, D] (GQA: head h reads KV head h // g)
    logits = torch.matmul(q, key_f32.transpose(-1, -2)).view(B, H, n, tk) * scaling
    probs = torch.softmax(logits + model_mask(attention_mask, chunk.rows, q_off, tk)[:, None], dim=-1)
    add_captures(torch.nan_to_num(probs, nan=0.0), chunk, layer, sched, slice(0, B), results)


def capture_rows(probs: torch.Tensor, groups: torch.Tensor, norm: torch.Tensor | None = None, stat: str = "mass") -> torch.Tensor:
    """What each query row contributes to a :class:`Capture`: ``probs [B, H, Qs, Tk]``
    (post-softmax attention), ``groups [B, G, Tk]`` bool (or 0/1 in probs' dtype: no copy),
    ``norm [B, Tk]`` bool (likewise) or None →
    ``[B, H, Qs, G]`` = ``Σ_{t ∈ group} A'[q,t]`` with ``A'`` as :class:`Capture` defines it
    (renormalized over ``norm``; one-hot on the first maximal key for ``stat="hit"``)."""
    if norm is not None:
        probs = probs * norm[:, None, None, :].to(probs.dtype)
        total = probs.sum(-1, keepdim=True)
        probs = torch.where(total > 0, probs / total.clamp_min(torch.finfo(probs.dtype).tiny), 0.0)
    if stat == "hit":
        probs = torch.nn.functional.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)  # ties: first max
    return torch.einsum("bhqt,bgt->bhqg", probs, groups.to(probs.dtype))


def add_captures(probs: torch.Tensor, chunk: Chunk, layer: int, sched: Schedule, rows: slice, results: dict) -> None:
    """Add the region mass of ``probs`` [b, H, Qs, Tk] (batch rows ``rows``, the chunk's
    query rows) to every capture of the active plan (its tensors on the device already), whose
    accumulators ``results`` holds by name."""
    tk = probs.shape[-1]
    for c, captured in zip(sched.captures, chunk.captured):
        if not captured:
            continue
        w = c.rows[rows][:, chunk.rows]  # [b, Qs]
        norm = None if c.norm is None else c.norm[rows, :tk]
        per_row = capture_rows(probs, c.groups[rows, :, :tk], norm, c.stat)  # [b, H, Qs, G]
        mass = torch.einsum("bhqg,bq->bhg", per_row, w) / c.n_rows[rows, None, None]
        acc = results[c.name]
        acc[rows, layer] += on_device(mass.float(), acc.device)
