"""Attention over short fp32 prompts on a CPU as two batched matmuls and a softmax.

On a CPU, for head sizes and prompt lengths like the built-in tiny model's (head_dim 8,
28 tokens, 16 query heads on 4 KV heads), sdpa's flash kernel is about 2× slower than
``softmax(q kᵀ · scale + bias) v`` done in chunks of batch rows that stay in cache, with the
query heads of a KV group folded into the rows (no copy of a KV head per query head):
``benchmarks/bench_engine_attention.py``. Past :data:`MAX_KEYS` keys the logits leave the
cache and the flash kernel wins again, so longer prompts (every real checkpoint) keep
sdpa. The sum is sdpa's to float rounding (tests compare them and a hand softmax); a
query row that sees no key attends nowhere (output 0), as sdpa's CPU kernels return.
"""

from __future__ import annotations

import torch

#: the most keys a row may have for this path (above it sdpa's flash kernel is faster)
MAX_KEYS = 48
#: logits per chunk of batch rows: about 2 MB of fp32, in a core's cache
CHUNK_LOGITS = 1 << 19
_HIDDEN = -1e30  # a hidden key's additive bias: finite, so a row with every key hidden stays finite (then zeroed)


def applies(query: torch.Tensor, key: torch.Tensor, attention_mask, dropout: float) -> bool:
    """Whether :func:`short_attention` runs this call: fp32 on a CPU, no dropout, at most
    :data:`MAX_KEYS` keys, more than one query row, and a boolean ``[B | 1, 1, Tq, Tk]`` mask or
    none."""
    if query.device.type != "cpu" or query.dtype != torch.float32 or key.dtype != torch.float32 or dropout:
        return False
    if key.shape[2] > MAX_KEYS or query.shape[2] < 2 or query.shape[1] % key.shape[1]:
        return False
    if attention_mask is None:
        return True
    return (attention_mask.dtype == torch.bool and attention_mask.dim() == 4 and attention_mask.shape[1] == 1
            and attention_mask.shape[0] in (1, query.shape[0]) and tuple(attention_mask.shape[2:]) == (query.shape[2], key.shape[2]))


def short_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                    scaling: float, causal: bool) -> torch.Tensor:
    """query ``[B, H, Tq, D]``, key/value ``[B, Hkv, Tk, D]`` (query head h reads KV head
    ``h // (H / Hkv)``); ``attention_mask`` boolean (True: attend) or None, then ``causal``
    (only with Tq == Tk: query row i sees keys ≤ i) or every key. Returns ``[B, H, Tq, D]``."""
    B, H, T, D = query.shape
    Hkv, Tk = key.shape[1], key.shape[2]
    g = H // Hkv
    if attention_mask is None:
        if causal and T != Tk:
            raise ValueError("a causal attention without a mask needs as many query rows as keys")
        keep = torch.ones(T, Tk, dtype=torch.bool, device=query.device).tril() if causal else None
        bias = None if keep is None else torch.zeros(T, Tk, device=query.device).masked_fill_(~keep, _HIDDEN)
        seen = None
    else:
        bias = torch.zeros(attention_mask.shape, device=query.device).masked_fill_(~attention_mask, _HIDDEN)[:, :, None]  # [B|1, 1, 1, T, Tk]
        seen = attention_mask.any(-1)[:, :, None, :, None]  # [B|1, 1, 1, T, 1]: rows that see some key
    out = query.new_empty(B, Hkv, g, T, D)
    rows = max(1, CHUNK_LOGITS // (H * T * Tk))
    for a in range(0, B, rows):
        b = min(B, a + rows)
        m = b - a
        logits = torch.matmul(query[a:b].reshape(m, Hkv, g * T, D), key[a:b].transpose(-1, -2)).view(m, Hkv, g, T, Tk)
        logits.mul_(scaling)
        if bias is not None:
            logits.add_(bias if bias.dim() == 2 or bias.shape[0] == 1 else bias[a:b])
        probs = torch.softmax(logits, dim=-1)
        torch.matmul(probs.view(m, Hkv, g * T, Tk), value[a:b], out=out[a:b].view(m, Hkv, g * T, D))
    if seen is not None:
        out.mul_(seen)
    return out.view(B, H, T, D)


def short_pairs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_bias: torch.Tensor, scaling: float) -> torch.Tensor:
    """Causal attention of ``P`` (batch row, head) pairs, each its own rows, keys and values
    ``[P, e, D]`` (fp32), under an additive key bias ``[P, e]``: ``[P, e, D]``, each row
    ``softmax(q kᵀ · scale + bias + causal) v`` in chunks of pairs whose logits fit
    :data:`CHUNK_LOGITS`. (A row whose every key is hidden comes out as some average of its
    values; the caller zeroes it.)"""
    P, e, D = q.shape
    causal = torch.zeros(e, e, device=q.device).masked_fill_(~torch.ones(e, e, dtype=torch.bool, device=q.device).tril(), _HIDDEN)
    out = q.new_empty(P, e, D)
    per = max(1, CHUNK_LOGITS // (e * e))
    for a in range(0, P, per):
        b = min(P, a + per)
        logits = torch.baddbmm(causal + key_bias[a:b, None, :], q[a:b], k[a:b].transpose(-1, -2), alpha=scaling)
        torch.bmm(torch.softmax(logits, dim=-1), v[a:b], out=out[a:b])
    return out
