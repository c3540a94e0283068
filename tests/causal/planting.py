"""A tiny model with a planted redundant pair of heads (either enough alone) and its parts.

:func:`plant_redundant_pair` makes head ``b`` a copy of head ``a`` of the same layer and KV
group (its query rows copied, so its attention and output equal a's) and replaces the
layer's output projection by :class:`SaturatedPair`: the pair enters ``o_proj`` through
one saturating unit ``R(o_a + o_b)``, ``R(y) = ν · y / sqrt(|y|² + ε²)`` per token, in
a's columns (b's columns are zero). With both heads present, or either one zeroed, R sees
``2o`` or ``o``: the same direction at (nearly) the same norm ν — hiding one head changes
almost nothing, and R's derivative along ``o`` is ``ν ε² / |y|³`` ≈ 0, so a linear
estimate (AtP) sees nothing either. Hiding both (their outputs zeroed) removes the pair's
contribution. This is a head-output (``zero``) mechanism: a head hidden from the image
instead keeps a text-only output, which moves R's direction.
"""

from __future__ import annotations

import copy

import torch


class SaturatedPair(torch.nn.Module):
    """``o_proj`` with heads a and b entering through ``R(o_a + o_b)`` in a's slice."""

    def __init__(self, linear: torch.nn.Linear, a: int, b: int, head_dim: int, nu: float, eps: float):
        super().__init__()
        self.linear, self.a, self.b, self.hd, self.nu, self.eps = linear, a, b, head_dim, nu, eps
        self.weight = linear.weight  # read by code that inspects o_proj's weight

    def forward(self, x):  # x [B, T, H·hd]
        hd = self.hd
        sa, sb = slice(self.a * hd, (self.a + 1) * hd), slice(self.b * hd, (self.b + 1) * hd)
        y = x[..., sa] + x[..., sb]
        r = self.nu * y / torch.sqrt((y * y).sum(-1, keepdim=True) + self.eps ** 2)
        x = torch.cat([x[..., :min(sa.start, sb.start)], *self._middle(x, r, sa, sb), x[..., max(sa.stop, sb.stop):]], dim=-1)
        return self.linear(x)

    def _middle(self, x, r, sa, sb):
        """The slices from the first of a, b to the last: r in a's, zeros in b's."""
        lo, hi = sorted([(sa, r), (sb, torch.zeros_like(r))], key=lambda p: p[0].start)
        return [lo[1], x[..., lo[0].stop:hi[0].start], hi[1]]


@torch.no_grad()
def plant_redundant_pair(lm, layer: int, a: int, b: int, nu: float = 1.0, eps: float = 0.02):
    """A copy of ``lm`` whose heads ``(layer, a)`` and ``(layer, b)`` (one KV group) are a
    redundant pair (module docstring). ``nu``: the norm the pair's unit writes, relative to
    head a's median output norm on a probe prompt."""
    group = lm.n_heads // lm.n_kv_heads
    assert a // group == b // group, "the pair must share a KV head (its keys and values)"
    lm2 = copy.copy(lm)
    lm2.model = copy.deepcopy(lm.model)
    attn = lm2.model.model.language_model.layers[layer].self_attn
    hd = lm.head_dim
    qw = attn.q_proj.weight
    qw[b * hd:(b + 1) * hd] = qw[a * hd:(a + 1) * hd]
    if getattr(attn.q_proj, "bias", None) is not None:
        attn.q_proj.bias[b * hd:(b + 1) * hd] = attn.q_proj.bias[a * hd:(a + 1) * hd]
    seen = []
    hook = attn.o_proj.register_forward_pre_hook(lambda m, args: seen.append(args[0][..., a * hd:(a + 1) * hd].norm(dim=-1)))
    from vheads.data.synthetic import kind_items

    pr = lm2.adapter.build(kind_items("class-matched", 1, 0)[0], lm2.processor)
    lm2.model(**pr.inputs)
    hook.remove()
    scale = float(torch.cat([s.flatten() for s in seen]).median())
    attn.o_proj = SaturatedPair(attn.o_proj, a, b, hd, nu * scale, eps * scale)
    return lm2


#: the planted validation model's heads: a redundant pair (head 6 a copy of head 7 of layer 0) and one single route
PAIR = ((0, 7), (0, 6))
SINGLE = (0, 0)


@torch.no_grad()
def plant_pair_and_single(lm):
    """The tiny model with :data:`PAIR` planted redundant (:func:`plant_redundant_pair`) and
    every head outside ``PAIR`` and :data:`SINGLE` writing nothing (its output-projection
    columns zeroed): the pair and the single head are the only routes between positions, so
    hiding any other head, with any others, changes nothing."""
    (layer, a), (_, b) = PAIR
    lm2 = plant_redundant_pair(lm, layer, a, b)
    keep = {*PAIR, SINGLE}
    hd = lm.head_dim
    for l, dec in enumerate(lm2.model.model.language_model.layers):
        W = dec.self_attn.o_proj.weight  # [hidden, H · hd]
        for h in range(lm.n_heads):
            if (l, h) not in keep:
                W[:, h * hd:(h + 1) * hd] = 0
    return lm2
