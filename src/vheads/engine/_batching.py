"""How a study's requests are packed into forwards: :class:`Batching` (the knobs) and
:func:`pack` (request indices grouped into forwards under the row and position budgets).
The runner (:mod:`vheads.engine._runner`) runs each group as one :class:`RowBatch`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from vheads.models import Prompt


@dataclass
class Batching:
    """How work is packed into forwards.

    ``cross_item``: rows of different items share a forward (off: one item per forward,
    one request per forward — the behaviour before cross-item batching; the environment
    variable ``VHEADS_CROSS_ITEM=0`` sets the default to off). ``max_rows``: at most this
    many batch rows per forward. ``token_budget``: at most this many ``rows × padded
    length`` positions per forward (it bounds the hidden states and KV cache held at once).
    ``share_layers``: layer-prefix sharing (:mod:`vheads.engine._layers`): in a forward
    without a prefix cache, each decoder layer runs once per distinct hidden state — the
    rows of an item that act alike up to that layer (same heads, same action, or none yet)
    share one (environment variable
    ``VHEADS_SHARE_LAYERS=0`` sets the default to off). ``last_layer_rows``: in a forward
    that reads logits at some rows only and captures nothing, the last decoder layer's
    query and output projections and MLP run on those rows only (:mod:`vheads.engine._last_layer_rows`;
    ``VHEADS_LAST_LAYER_ROWS=0`` sets the default to off). ``one_length``: a forward holds
    only requests of one shape (the same prefix and suffix lengths), so no row is padded and
    the attention needs no padding mask; requests are ordered by shape first. ``None`` (the
    default) decides by the device's capability (:func:`vheads._device.padding_costs_more`:
    on where fused attention kernels cannot take a mask, i.e. CUDA; off on a CPU, where
    packing saves forwards); ``VHEADS_ONE_LENGTH=1`` / ``0`` forces it. ``vision_cache``: the
    vision tower's output for a forward's images is kept and reused by later forwards of the
    same images (:mod:`vheads.engine._vision_cache`; ``VHEADS_VISION_CACHE=0`` sets the default
    to off).
    """

    cross_item: bool = field(default_factory=lambda: os.environ.get("VHEADS_CROSS_ITEM", "1") != "0")
    max_rows: int = 256
    token_budget: int = 1 << 19
    share_layers: bool = field(default_factory=lambda: os.environ.get("VHEADS_SHARE_LAYERS", "1") != "0")
    last_layer_rows: bool = field(default_factory=lambda: os.environ.get("VHEADS_LAST_LAYER_ROWS", "1") != "0")
    one_length: bool | None = field(default_factory=lambda: {"1": True, "0": False}.get(os.environ.get("VHEADS_ONE_LENGTH", "")))
    vision_cache: bool = field(default_factory=lambda: os.environ.get("VHEADS_VISION_CACHE", "1") != "0")



def pack(requests: list[tuple[Prompt, int, int]], batching: Batching) -> list[list[int]]:
    """Group request indices into forwards, in order: ``requests[i] = (prompt, rows, split)``
    (``split``: where the prompt's shared prefix would end, 0 for none).

    A forward holds at most ``max_rows`` rows and at most ``token_budget`` positions,
    counted as rows × the padded length a :class:`RowBatch` of these prompts can have
    (longest prefix + longest suffix); a request larger than either gets a forward of its
    own (the caller cuts its rows to fit). Consecutive requests of one prompt stay together.
    With ``batching.one_length`` a forward holds requests of one (prefix, suffix) shape only.
    """
    groups: list[list[int]] = []
    rows = pre = suf = 0
    for i, (pr, n, split) in enumerate(requests):
        T = pr.layout.n_tokens
        p2, s2 = max(pre, split), max(suf, T - split)
        same = not batching.one_length or (split, T - split) == (pre, suf)
        if groups and same and rows + n <= batching.max_rows and (rows + n) * (p2 + s2) <= batching.token_budget:
            groups[-1].append(i)
            rows, pre, suf = rows + n, p2, s2
        else:
            groups.append([i])
            rows, pre, suf = n, split, T - split
    return groups
