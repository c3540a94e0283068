"""Layer-prefix sharing: a decoder layer runs once per distinct hidden state, not once per batch row.

Batch rows of one item (prompt) differ only by their plan. Below the first layer a row's
plan acts in, ``first[b]``, row b's hidden states equal those of every other row of its
item that is still unacted on there (the same tokens, positions, image and weights). So
decoder layer l runs on

    rows(l) = {b : first[b] ≤ l}  ∪  {one representative row per item among b : first[b] > l}

and its output is gathered back to every batch row (row b reads its own output if it is
acted on by layer l, else its item's representative's). Layer-matched controls act in
exactly S's layers, so when S has no head in layer 0 its R controls share the layers below
S's first one. The plan is cut to ``rows(l)`` while the layer runs.

Exact up to float rounding: every operation of a decoder layer is independent across batch
rows, so only the BLAS blocking of a smaller batch can change the last bits
(tests/engine/test_layer_sharing.py: logits equal to ≤ 1e-5). It applies to full forwards
only — with a prefix KV cache (prefix reuse) the cache holds one entry per batch row — and
not to plans that capture (a capture reads every layer of every row).
"""

from __future__ import annotations

import contextlib

import torch

from vheads.engine._attention import swap_plan
from vheads.engine._plan import ProbePlan


def distinct_rows(first: torch.Tensor, items: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The batch rows decoder layer ``layer`` must compute, and where each row reads its output.

    ``first`` [B]: the first layer each row is acted on at; ``items`` [B]: each row's item.
    Returns ``(keep [B'], src [B])``, ``keep`` ascending: the layer runs on rows ``keep`` and
    row b's output is the computed row ``src[b]``; None when every row must be computed.
    """
    B = len(first)
    order = torch.arange(B)
    own = first <= layer  # [B] rows acted on at this layer or below: their own states
    idle = torch.where(own, B, order)  # [B] an unacted row's own index, B otherwise
    rep = torch.full((int(items.max()) + 1,), B, dtype=torch.long).scatter_reduce(0, items, idle, "amin")  # [U]
    reads = torch.where(own, order, rep[items])  # [B] the row whose state row b takes
    keep = torch.unique(reads)  # [B'] sorted
    if len(keep) == B:
        return None
    return keep, torch.searchsorted(keep, reads)


def _rows_of(x, keep: torch.Tensor, B: int):
    """``x`` (a tensor, or tuple / list of them) cut to batch rows ``keep`` wherever it is
    batch-first (dim ≥ 2 and ``shape[0] == B``: hidden states, masks, rope tables)."""
    if isinstance(x, torch.Tensor):
        return x.index_select(0, keep.to(x.device)) if x.dim() >= 2 and x.shape[0] == B else x
    if isinstance(x, (tuple, list)):
        return type(x)(_rows_of(v, keep, B) for v in x)
    return x


@contextlib.contextmanager
def shared_layers(layers, plan: ProbePlan, items: torch.Tensor):
    """Run each decoder layer of ``layers`` (the language model's, in order) on the distinct
    rows of ``plan``'s batch only (module docstring); ``items`` [B]: each row's item."""
    B = plan.batch_size
    first = plan.first_layers()  # [B]
    hooks = []
    try:
        for layer_idx, layer in enumerate(layers):
            cut = distinct_rows(first, items, layer_idx)
            if cut is None:
                continue
            keep, src = cut
            sub = plan.select(keep)
            saved: list = []

            def enter(module, args, kwargs, keep=keep, sub=sub, saved=saved):
                saved.append(swap_plan(sub))
                return _rows_of(args, keep, B), {k: _rows_of(v, keep, B) for k, v in kwargs.items()}

            def leave(module, args, kwargs, out, src=src, saved=saved):
                swap_plan(saved.pop())
                src_dev = src.to((out[0] if isinstance(out, (tuple, list)) else out).device)
                if isinstance(out, torch.Tensor):
                    return out.index_select(0, src_dev)  # [B', T, D] -> [B, T, D]
                return type(out)(o.index_select(0, src_dev) if isinstance(o, torch.Tensor) and o.dim() >= 2 else o for o in out)

            hooks.append(layer.register_forward_pre_hook(enter, with_kwargs=True))
            hooks.append(layer.register_forward_hook(leave, with_kwargs=True))
        yield
    finally:
        for h in hooks:
            h.remove()


def decoder_layers(model):
    """The language model's decoder layers (a ModuleList of ``num_hidden_layers``), or None
    when the model does not expose them as ``get_decoder().layers``."""
    try:
        layers = getattr(model.get_decoder(), "layers", None)
    except (AttributeError, NotImplementedError):
        return None
    n = getattr(model.config.get_text_config(), "num_hidden_layers", None)
    return layers if layers is not None and len(layers) == n else None
