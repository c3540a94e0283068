"""Layer-prefix sharing: a decoder layer runs once per distinct hidden state, not once per batch row.

Batch rows of one item (prompt) differ only by their plan. The hidden state a row leaves
decoder layer l with depends on its item, and on its plan only through the heads the plan
acts on in layers 0 … l and what it does to them (the acted rows and the key bias). So two
rows of one item whose interventions act on the same heads up to layer l, with the same
rows and key bias — or on no head at all up to l — leave layer l with the same state, and
layer l runs on one representative row of each such group; its output is gathered back to
every batch row. Layer-matched controls act in exactly S's layers, so when S has no head in
layer 0 its R controls share the layers below S's first one; and controls that agree on
S's lower layers (a layer-matched draw differs from another in each layer's few free heads)
share every layer up to the first one where they differ. The plan is cut to the
representatives while the layer runs.

Exact up to float rounding: every operation of a decoder layer is independent across batch
rows, so only the BLAS blocking of a smaller batch can change the last bits
(tests/engine/test_layer_sharing.py: logits equal to ≤ 1e-5). It applies to full forwards
only — with a prefix KV cache (prefix reuse) the cache holds one entry per batch row — and
not to plans that capture (a capture reads every layer of every row).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from vheads.engine._attention import note_rows_of, prepare, swap_plan
from vheads.engine._plan import ProbePlan
from vheads.engine._schedule import on_device


def row_ids(x: torch.Tensor) -> torch.Tensor:
    """An id per row of ``x`` [B, C], equal for equal rows, 0 … G − 1 over the G distinct
    ones: ``torch.unique(x, dim=0, return_inverse=True)[1]``, by numpy over each row's bytes
    (torch's sorts column by column, about 10× slower at a few hundred rows)."""
    a = np.ascontiguousarray(x.detach().cpu().numpy())
    if a.size == 0:  # no rows, or rows with nothing in them (all alike)
        return torch.zeros(a.shape[0], dtype=torch.long, device=x.device)
    rows = a.reshape(a.shape[0], -1).view(np.dtype((np.void, a.dtype.itemsize * a[0].size))).ravel()
    return torch.from_numpy(np.unique(rows, return_inverse=True)[1].reshape(-1).astype(np.int64)).to(x.device)


def action_ids(plan: ProbePlan) -> torch.Tensor:
    """For each batch row and action (intervention or ablation), an id shared by the rows
    whose action acts alike (the same query rows, key bias or replacement): [B, n_actions] long."""
    ids = [row_ids(a.action_key()) for a in plan.actions]
    return torch.stack(ids, 1) if ids else torch.zeros(plan.batch_size, 0, dtype=torch.long)


def distinct_rows(plan: ProbePlan, items: torch.Tensor, layer: int, actions: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The batch rows decoder layer ``layer`` must compute, and where each row reads its output.

    ``items`` [B]: each row's item; ``actions``: :func:`action_ids` of ``plan`` (computed
    here when not given). Rows of one item share a group when each intervention acts on the
    same heads in layers 0 … ``layer`` and, if it acts on any, with the same action id.
    Returns ``(keep [B'], src [B])``, ``keep`` ascending (the first row of each group): the
    layer runs on rows ``keep`` and row b's output is the computed row ``src[b]``; None when
    every row must be computed.
    """
    B = plan.batch_size
    if actions is None:
        actions = action_ids(plan)
    parts = [items[:, None].long()]
    for i, iv in enumerate(plan.actions):
        heads = iv.heads[:, : layer + 1].reshape(B, -1)  # [B, (layer + 1) · H]
        acted = heads.any(1)
        parts += [torch.where(acted, actions[:, i], -1)[:, None], heads.long()]
    group = row_ids(torch.cat(parts, 1))  # [B]
    first = torch.full((int(group.max()) + 1,), B, dtype=torch.long).scatter_reduce(0, group, torch.arange(B), "amin")
    if len(first) == B:
        return None
    keep, order = torch.sort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    return keep, rank[group]


def _rows_of(x, keep: torch.Tensor, B: int):
    """``x`` (a tensor, or tuple / list of them) cut to batch rows ``keep`` wherever it is
    batch-first (dim ≥ 2 and ``shape[0] == B``: hidden states, masks, rope tables)."""
    if isinstance(x, torch.Tensor):
        return x.index_select(0, on_device(keep, x.device)) if x.dim() >= 2 and x.shape[0] == B else x
    if isinstance(x, (tuple, list)):
        return type(x)(_rows_of(v, keep, B) for v in x)
    return x


@contextlib.contextmanager
def forward_hooks(entries):
    """Register ``(module, before, after)`` as forward pre-hook and forward hook (both with
    kwargs) on each module while the block runs; removed afterwards, whatever happens."""
    hooks = []
    try:
        for module, before, after in entries:
            hooks.append(module.register_forward_pre_hook(before, with_kwargs=True))
            hooks.append(module.register_forward_hook(after, with_kwargs=True))
        yield
    finally:
        for h in hooks:
            h.remove()


def shared_layers(layers, plan: ProbePlan, items: torch.Tensor, device=None):
    """Run each decoder layer of ``layers`` (the language model's, in order) on the distinct
    rows of ``plan``'s batch only (module docstring); ``items`` [B]: each row's item. The
    rows, and each layer's cut plan, are worked out and moved to ``device`` (the model's)
    now, before the layers run. A context manager, inside :func:`active_plan`."""
    B = plan.batch_size
    actions = action_ids(plan)
    entries = []
    for layer_idx, layer in enumerate(layers):
        cut = distinct_rows(plan, items, layer_idx, actions)
        if cut is None:
            continue
        keep, src = cut
        sub = plan.select(keep)
        if device is not None:
            keep, src = keep.to(device), src.to(device)
            prepare(sub, 0, device, layers=[layer_idx])
        saved: list = []

        def enter(module, args, kwargs, keep=keep, sub=sub, saved=saved):
            saved.append(swap_plan(sub))
            cut = {k: _rows_of(v, keep, B) for k, v in kwargs.items()}
            mask = kwargs.get("attention_mask")
            if isinstance(mask, torch.Tensor):  # the cut mask keeps the check made once per forward
                note_rows_of(cut["attention_mask"], mask, on_device(keep, mask.device))
            return _rows_of(args, keep, B), cut

        def leave(module, args, kwargs, out, src=src, saved=saved):
            swap_plan(saved.pop())
            src_dev = on_device(src, (out[0] if isinstance(out, (tuple, list)) else out).device)
            if isinstance(out, torch.Tensor):
                return out.index_select(0, src_dev)  # [B', T, D] -> [B, T, D]
            return type(out)(o.index_select(0, src_dev) if isinstance(o, torch.Tensor) and o.dim() >= 2 else o for o in out)

        entries.append((layer, enter, leave))
    return forward_hooks(entries)


def decoder_layers(model):
    """The language model's decoder layers (a ModuleList of ``num_hidden_layers``), or None
    when the model does not expose them as ``get_decoder().layers``."""
    try:
        layers = getattr(model.get_decoder(), "layers", None)
    except (AttributeError, NotImplementedError):
        return None
    n = getattr(model.config.get_text_config(), "num_hidden_layers", None)
    return layers if layers is not None and len(layers) == n else None
