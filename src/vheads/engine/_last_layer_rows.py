"""The last decoder layer computes only the rows whose output is read.

A forward reads the logits at a few positions (``logits_to_keep``: the last prompt row
of every probe). No later layer reads the last decoder layer's output, so at any other
position that output is dead. In that layer only the keys and values need every position:
the query projection, the attention output projection and the MLP run on the read rows
only, and their other rows are zeros. Every other position of the layer's output then
holds its input (the residual stream), which nothing reads. The final norm and the LM head
run on the read rows anyway.

Exact: each of these modules maps a row to a row (a linear layer; an MLP or a mixture of
experts of one token), so cutting the rows changes no computed number
(``tests/engine/test_last_layer_rows.py``). Not used when the forward captures attention
weights: a capture reads the queries of its rows in every layer. A module that receives
something other than ``[batch, positions, features]`` over the forward's positions (a
family that already cut its rows, for instance) runs as it is.
"""

from __future__ import annotations

import torch

from vheads.engine._layers import forward_hooks
from vheads.engine._schedule import on_device

#: the row-wise modules of a decoder layer cut to the read rows, by attribute path
ROW_MODULES = ("self_attn.q_proj", "self_attn.o_proj", "mlp")


def _module(layer, path: str):
    for name in path.split("."):
        layer = getattr(layer, name, None)
        if layer is None:
            return None
    return layer


def read_rows_only(layer, rows: torch.Tensor, n_positions: int, device=None):
    """While the returned context runs, ``layer``'s row-wise modules (:data:`ROW_MODULES`)
    compute positions ``rows`` [R] (long, in the forward's coordinates) only, of inputs
    over ``n_positions`` positions; their other rows are zeros. ``rows`` is moved to
    ``device`` (the model's) now, not in the layer."""
    if device is not None:
        rows = rows.to(device)
    entries = []
    for path in ROW_MODULES:
        module = _module(layer, path)
        if not isinstance(module, torch.nn.Module):
            continue
        cut = []  # per call: the input's batch and positions when it was cut, else None

        def before(module, args, kwargs, cut=cut):
            x = args[0] if args else kwargs.get("hidden_states", kwargs.get("x"))
            if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[1] != n_positions:
                cut.append(None)
                return None
            cut.append(x.shape[:2])
            sub = x.index_select(1, on_device(rows, x.device))
            if args:
                return (sub, *args[1:]), kwargs
            key = "hidden_states" if "hidden_states" in kwargs else "x"
            return args, {**kwargs, key: sub}

        def after(module, args, kwargs, out, cut=cut):
            shape = cut.pop()
            if shape is None:
                return None
            y = out[0] if isinstance(out, tuple) else out
            full = y.new_zeros(*shape, *y.shape[2:])
            full[:, on_device(rows, y.device)] = y
            return (full, *out[1:]) if isinstance(out, tuple) else full

        entries.append((module, before, after))
    return forward_hooks(entries)
