"""A prefix KV cache read once by every batch row: the suffix pass of prefix reuse, without copies.

With prefix reuse (:mod:`vheads.engine._runner`) the prefixes — system prompt and image,
one row per item — run once, and then the suffixes of all B batch rows run against their
item's cached keys. transformers' cache returns one ``[B, Hkv, P + S, D]`` tensor per layer:
the item's prefix keys copied for each of its rows, then (on a CPU with a mask) each KV head
copied again for every query head of its group. On a 64-row suffix of 29 tokens after a
1,028-token prefix those copies cost more than the attention itself.

A :class:`SharedPrefixLayer` keeps the prefix as it is (``[U, Hkv, P, D]``) and hands the
layer only the suffix keys ``[B, Hkv, S, D]``; the attention function finds the prefix it
belongs to (:func:`owner`) and computes, per item, the softmax over prefix ∪ suffix keys in
two parts merged by their log-sum-exps (:func:`SharedPrefixLayer.attend`):

- prefix keys: every query head of a KV group and every row of the item read the same
  keys, so all of them are one query block of one fused attention call (no key copy, no
  mask: a suffix row sees exactly the item's own prefix positions ``[0, split_u)``);
- suffix keys: each row its own, under the model's mask over them (causal, padding), one
  fused call with that mask over S keys (a row that sees none: output 0, log-sum-exp −∞).

``out = o_p · e^(lse_p − lse) + o_s · e^(lse_s − lse)``, ``lse = logaddexp(lse_p, lse_s)``:
the same softmax, summed in another order (tests/engine/test_prefix.py). Each part runs
on the fused CPU kernel, which gives its log-sum-exp, where the query's device dispatches
it and the query is fp32; elsewhere (CUDA, bf16) on a chunked fp32 matmul that reads the
KV heads as they are (:func:`lse_kernel`): no device ever holds a per-row copy of the
prefix. When the model's mask over the prefix is not "each item's own prefix" (a sliding
window), and for layers a plan captures from (they read the weights by absolute position),
the full keys are built (:meth:`SharedPrefixLayer.full`) and the usual path runs; a layer
a plan intervenes in reads the full keys of its touched (row, head) pairs only
(:meth:`SharedPrefixLayer.pair_keys`).
"""

from __future__ import annotations

import contextlib

import torch
from transformers.cache_utils import DynamicLayer

#: suffix key tensor (by id) -> the layer that returned it, while a suffix pass runs
_OWNERS: dict[int, tuple[torch.Tensor, "SharedPrefixLayer"]] = {}
#: the model's mask (by id) -> its parts for the fused calls (:meth:`SharedPrefixLayer._mask_parts`), while a suffix pass runs
_MASKS: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]] = {}

#: the running suffix pass's layout: [P, counts, splits] (empty: none)
_LAYOUT: list = []

#: at most this many prefix logits per fused call (its [queries, keys] working set)
CHUNK_ELEMENTS = 1 << 25


#: which kernel computes the two parts: "auto" (:func:`lse_kernel`) or "matmul" (always the chunked matmul)
KERNEL = "auto"
FLASH_CPU = "aten::_scaled_dot_product_flash_attention_for_cpu"
#: torch's dispatch key of each device type
_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "hpu": "HPU", "meta": "Meta"}


def _flash_cpu():
    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


class SharedPrefixLayer(DynamicLayer):
    """One decoder layer's cache for a suffix pass: the prefix keys and values of U items
    (``[U, Hkv, P, D]``, item u's real positions ``[0, splits[u])``), read by ``counts[u]``
    consecutive batch rows each; :meth:`update` keeps the suffix keys and returns them alone."""

    def __init__(self, prefix: DynamicLayer, counts: list[int], splits: list[int]):
        super().__init__()
        self.prefix_keys, self.prefix_values = prefix.keys, prefix.values
        self.counts, self.splits = list(counts), list(splits)
        self.device = prefix.keys.device
        #: each batch row's item: [B]
        self.row_items = torch.repeat_interleave(torch.arange(len(counts), device=self.device), torch.tensor(counts, device=self.device))
        self.keys, self.values = prefix.keys, prefix.values  # the un-repeated prefix (U rows), for code that only reads shapes
        self.is_initialized = True
        self.suffix_keys = self.suffix_values = None

    @property
    def prefix_length(self) -> int:
        return self.prefix_keys.shape[-2]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        if self.suffix_keys is not None:
            raise RuntimeError("a shared-prefix cache layer serves one suffix pass")
        self.suffix_keys, self.suffix_values = key_states, value_states
        _OWNERS[id(key_states)] = (key_states, self)
        return key_states, value_states

    def get_seq_length(self) -> int:
        return self.prefix_length + (0 if self.suffix_keys is None else self.suffix_keys.shape[-2])

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.prefix_length + query_length, 0

    def full(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values transformers' cache would return: ``[B, Hkv, P + S, D]``."""
        k = torch.cat([self.prefix_keys[self.row_items], self.suffix_keys], dim=-2)
        v = torch.cat([self.prefix_values[self.row_items], self.suffix_values], dim=-2)
        return k, v

    def pair_keys(self, rows: torch.Tensor, kv_heads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The full keys and values of (batch row, KV head) pairs: ``[n, P + S, D]`` each."""
        items = self.row_items[rows]
        k = torch.cat([self.prefix_keys[items, kv_heads], self.suffix_keys[rows, kv_heads]], dim=-2)
        v = torch.cat([self.prefix_values[items, kv_heads], self.suffix_values[rows, kv_heads]], dim=-2)
        return k, v

    def gather_keys(self, rows: torch.Tensor, kv_heads: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of (batch row, KV head) pairs at absolute positions ``idx``
        [n, m] (each pair its own): ``[n, m, D]`` each, read from the prefix or the suffix."""
        P = self.prefix_length
        items = self.row_items[rows][:, None]
        in_prefix = (idx < P)[..., None]
        at_p, at_s = idx.clamp(max=P - 1), (idx - P).clamp(min=0)
        kh = kv_heads[:, None]
        k = torch.where(in_prefix, self.prefix_keys[items, kh, at_p], self.suffix_keys[rows[:, None], kh, at_s])
        v = torch.where(in_prefix, self.prefix_values[items, kh, at_p], self.suffix_values[rows[:, None], kh, at_s])
        return k, v

    def _mask_parts(self, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """:func:`mask_parts` of this layer's prefix."""
        return mask_parts(attention_mask, self.prefix_length, self.counts, self.splits)

    def attend(self, query: torch.Tensor, attention_mask, scaling: float) -> torch.Tensor | None:
        """The attention of every batch row and head over prefix ∪ suffix keys, merged by
        log-sum-exp (module docstring): ``[B, S, H, D]`` in the query's dtype; None where
        this path does not apply (then :meth:`full`). Each part runs on the fused kernel
        where the query's device dispatches it and the query is fp32 (:func:`lse_kernel`),
        else as a chunked fp32 matmul (CUDA, bf16): the same two parts either way."""
        if (attention_mask is None or attention_mask.dtype != torch.bool or attention_mask.dim() != 4 or attention_mask.shape[1] != 1
                or attention_mask.shape[0] != query.shape[0] or attention_mask.shape[-1] != self.get_seq_length()):
            return None
        parts = self._mask_parts(attention_mask)
        if parts is None:
            return None
        suffix_mask, seen = parts
        fused = lse_kernel(query)
        B, H, S, D = query.shape
        hkv = self.suffix_keys.shape[1]
        g = H // hkv
        # prefix keys: one call per item (and chunk of its rows), the query heads of a KV group folded into the rows
        o_p = query.new_empty(B, hkv, g, S, D, dtype=torch.float32)  # head h = (h // g, h % g)
        lse_p = query.new_empty(B, hkv, g, S, dtype=torch.float32)
        start = 0
        for u, (n, split) in enumerate(zip(self.counts, self.splits)):
            k = self.prefix_keys[u : u + 1, :, :split]
            v = self.prefix_values[u : u + 1, :, :split]
            per = max(1, CHUNK_ELEMENTS // max(1, g * S * split * hkv))
            for a in range(start, start + n, per):
                b = min(start + n, a + per)
                m = b - a
                q = query[a:b].view(m, hkv, g, S, D).permute(1, 2, 0, 3, 4).reshape(1, hkv, g * m * S, D)
                if fused is not None:
                    o, lse = fused(q, k, v, 0.0, False, scale=scaling)[:2]
                else:
                    o, lse = _matmul_lse(q[:, :, None], k, v, scaling)
                o_p[a:b] = o.view(hkv, g, m, S, D).permute(2, 0, 1, 3, 4)
                lse_p[a:b] = lse.view(hkv, g, m, S).permute(2, 0, 1, 3)
            start += n
        # suffix keys: each row its own, under the model's mask over them (a row that sees none: output 0, lse -inf)
        o_p, lse_p = o_p.view(B, H, S, D), lse_p.view(B, H, S)
        if fused is not None:
            ks = self.suffix_keys.repeat_interleave(g, 1)  # [B, H, S, D]: S keys, a small copy
            vs = self.suffix_values.repeat_interleave(g, 1)
            o_s, lse_s = fused(query, ks, vs, 0.0, False, attn_mask=suffix_mask, scale=scaling)[:2]
        else:  # the KV heads read as they are: [B, Hkv, g, S, ·]
            o_s, lse_s = _matmul_lse(query.view(B, hkv, g, S, D), self.suffix_keys, self.suffix_values, scaling, suffix_mask)
            o_s, lse_s = o_s.view(B, H, S, D), lse_s.view(B, H, S)
        lse_s = lse_s.masked_fill(~seen, float("-inf"))
        lse = torch.logaddexp(lse_p, lse_s)
        out = o_p * torch.exp(lse_p - lse)[..., None] + o_s * torch.exp(lse_s - lse)[..., None]
        return out.to(query.dtype).transpose(1, 2).contiguous()


def lse_kernel(query: torch.Tensor):
    """The fused attention kernel that returns its log-sum-exp, for ``query``: the CPU flash
    kernel where the query's device dispatches it (a capability of torch's dispatcher, not a
    device name) and the query is fp32; None (the chunked matmul, :func:`_matmul_lse`) otherwise,
    or whenever :data:`KERNEL` is ``"matmul"`` (the path a GPU takes, forced on a CPU in the tests)."""
    flash = _flash_cpu()
    key = _DISPATCH_KEYS.get(query.device.type)
    if KERNEL == "matmul" or flash is None or key is None or query.dtype != torch.float32:
        return None
    return flash if torch._C._dispatch_has_kernel_for_dispatch_key(FLASH_CPU, key) else None


def _matmul_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float, mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention and its log-sum-exp in fp32, on any device: ``q [N, Hkv, g, R, D]``
    (the g query heads of a KV head), ``k``/``v [N, Hkv, Tk, D]`` (read as they are, no copy
    per query head), ``mask`` additive ``[N, 1, R, Tk]`` or None. Returns ``o [N, Hkv, g, R, D]``
    and ``lse [N, Hkv, g, R]`` (a row that sees no key: 0 and −∞), in chunks of rows of at most
    :data:`CHUNK_ELEMENTS` logits."""
    N, hkv, g, R, D = q.shape
    tk = k.shape[-2]
    kt, vf = k.float().transpose(-1, -2)[:, :, None], v.float()[:, :, None]  # [N, Hkv, 1, D, Tk], [N, Hkv, 1, Tk, D]
    o = q.new_empty(N, hkv, g, R, D, dtype=torch.float32)
    lse = q.new_empty(N, hkv, g, R, dtype=torch.float32)
    per = max(1, CHUNK_ELEMENTS // max(1, N * hkv * g * tk))
    for a in range(0, R, per):
        b = min(R, a + per)
        logits = torch.matmul(q[:, :, :, a:b].float(), kt) * scaling  # [N, Hkv, g, r, Tk]
        if mask is not None:
            logits = logits + mask[:, :, None, a:b]
        lse[..., a:b] = torch.logsumexp(logits, -1)
        probs = torch.exp(logits - lse[..., a:b, None]).nan_to_num_(0.0)  # -inf - -inf: a row that sees no key
        o[..., a:b, :] = torch.matmul(probs, vf)
    return o, lse


def mask_parts(attention_mask: torch.Tensor, P: int, counts: list[int], splits: list[int]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The model's mask ``attention_mask`` [B, 1, S, P + S] (bool) over the suffix keys,
    as the fused call takes it (additive, [B, 1, S, S]) with which rows see any suffix key
    ([B, 1, S]), when every real query row of item u sees exactly the prefix keys
    ``[0, splits[u])`` (``counts[u]`` rows each; no sliding window, no other item's
    positions); else None. Real rows: those that see a suffix key (at least themselves); a
    padded row's output is read by no real row (its key is hidden from them). Worked out
    once per mask and suffix pass — when transformers builds the mask (:func:`note_mask`),
    before the layers run: its comparison is a host–device sync."""
    hit = _MASKS.get(id(attention_mask))
    if hit is not None and hit[0] is attention_mask:
        return hit[1]
    suffix = attention_mask[:, :, :, P:]
    seen = suffix.any(-1)  # [B, 1, S]
    want = torch.arange(P, device=attention_mask.device)
    ok, start = [], 0
    for n, split in zip(counts, splits):
        rows = slice(start, start + n)
        ok.append(((attention_mask[rows, 0, :, :P] == (want < split)[None, None, :]) | ~seen[rows, 0, :, None]).all())
        start += n
    ok = bool(torch.stack(ok).all())  # one sync for every item
    parts = (torch.zeros(suffix.shape, device=suffix.device).masked_fill_(~suffix, float("-inf")), seen) if ok else None
    _MASKS[id(attention_mask)] = (attention_mask, parts)
    return parts


def note_mask(attention_mask: torch.Tensor) -> None:
    """Work out :func:`mask_parts` of a mask transformers just built, when a suffix pass
    runs and the mask is over its keys (``[B, 1, S, P + S]``, the pass's prefix P)."""
    if _LAYOUT and attention_mask.dim() == 4 and attention_mask.shape[-1] - attention_mask.shape[-2] == _LAYOUT[0]:
        mask_parts(attention_mask, *_LAYOUT)


def owner(key: torch.Tensor) -> SharedPrefixLayer | None:
    """The shared-prefix cache layer that returned ``key`` in the running suffix pass, or None."""
    hit = _OWNERS.get(id(key))
    return hit[1] if hit is not None and hit[0] is key else None


@contextlib.contextmanager
def suffix_pass(prefix: int | None = None, counts: list[int] = (), splits: list[int] = ()):
    """The scope of one suffix pass: the layers' suffix keys are forgotten when it ends.
    With its layout (``prefix`` P, each item's ``counts`` and ``splits``) the model's mask is
    checked when it is built (:func:`note_mask`), not in the first layer."""
    if prefix is not None:
        _LAYOUT[:] = [prefix, list(counts), list(splits)]
    try:
        yield
    finally:
        _OWNERS.clear()
        _MASKS.clear()
        _LAYOUT.clear()


def share_layers(cache, counts: list[int], splits: list[int], model_config) -> bool:
    """Replace each plain KV layer of the prefix ``cache`` by a :class:`SharedPrefixLayer`
    for ``counts`` rows per item, when the model reads its keys only through the attention
    function (no layer attends with another layer's keys: Gemma 4's KV-shared layers).
    True when it did."""
    text = getattr(model_config, "text_config", model_config)
    if getattr(text, "num_kv_shared_layers", 0):
        return False
    layers = cache.layers
    if not any(type(layer) is DynamicLayer and layer.keys is not None for layer in layers):
        return False
    for i, layer in enumerate(layers):
        if type(layer) is DynamicLayer and getattr(layer, "keys", None) is not None:
            layers[i] = SharedPrefixLayer(layer, counts, splits)
    return True
