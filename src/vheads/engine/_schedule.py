"""The plan on the device, once per forward: what each touched layer computes, worked out before the layers run.

A layer the plan touches needs the (batch row, head) pairs it recomputes, the query rows it
recomputes them at (in chunks within a byte budget), whether each intervention acts on a
pair at every one of those rows (one key bias per pair) or at some (a per-row mask), whether
the folded path applies, and the plan's tensors — heads, rows, key biases, captured key
groups, ablation values — on the model's device. Each of these is a decision on the host
or an index tensor for the device. Worked out inside the layer, every one was a blocking
host–device transfer (about ten per touched layer: ``.cpu()``, ``.to(device)``, ``int(…)``,
``bool(…)`` on a device tensor), and the GPU idled at each. :func:`prepare` works them all
out on the host once per forward (:func:`vheads.engine._attention.prepare`: the runner calls it
before the forward; a direct caller of
:func:`vheads.engine.active_plan` gets it at the first touched layer) and moves the plan to
the device in one go; the layer loop then only queues device work
(``tests/engine/test_syncs.py`` counts the transfers while the layers run: none).

The model's mask is checked once per forward too, when transformers builds it
(:func:`vheads.engine._attention.note_mask`), not in every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vheads.engine._plan import ProbePlan, first_biased_key

#: at most this many query rows per explicit-softmax chunk (a capture's chunks)
ROW_CHUNK = 512
#: the byte budget of one chunk of a touched layer's fp32 working set: the logits of a chunk
#: of rows (pairs · rows · keys), the keys and values of a chunk of pairs (pairs · keys · head
#: size), the folded path's extended queries, keys and values. 128 MB; lower it in a test to
#: force many chunks
CHUNK_BYTES = 1 << 27
_F32 = 4
#: the gathered path (:class:`Gathered`) runs when each touched pair sees at most this share of
#: the keys (a mask hiding the image: the text keys around it) …
GATHER_SHARE = 0.5
#: … or this share where the folded path applies instead (it reads each row's causal keys only)
GATHER_SHARE_FOLDED = 0.25


@dataclass
class Chunk:
    """A chunk of a layer's query rows: ``rows`` [Qs] long (absolute positions, on the
    device), ``local`` the same rows in the forward's coordinates (a slice when consecutive,
    else [Qs] long on the device), ``start``/``stop`` its place among the layer's rows, and
    per capture whether the capture reads one of its rows."""

    rows: torch.Tensor
    local: slice | torch.Tensor
    start: int
    stop: int
    captured: tuple[bool, ...]


@dataclass
class Acting:
    """One intervention acting in one layer, over the layer's pairs: ``heads`` [P] bool (it
    acts on the pair somewhere), ``key_bias`` [B, T] (the plan's, on the device), and either
    ``on_pair`` [P] bool (each pair is acted on at all of the layer's rows or at none) or
    ``on_rows`` [P, Qs] bool (per row)."""

    heads: torch.Tensor
    key_bias: torch.Tensor
    on_pair: torch.Tensor | None
    on_rows: torch.Tensor | None


@dataclass
class Gathered:
    """The keys each touched pair may see when the interventions acting in the layer act on the
    pair at the same rows and leave it few keys with a finite bias (a mask
    hiding the image): ``idx`` [P, n] long, their positions (ascending; a pair that sees fewer
    is padded with hidden ones), and ``bias`` [P, n] fp32, the summed key bias there (−inf at a
    padded slot). The pair's attention is then recomputed over those n keys alone
    (:func:`vheads.engine._attention._gathered_rows`). ``write`` [P, Qs] bool: the rows each
    pair is acted on at, where some pair is not acted on at every row of the layer (items of
    different lengths in one forward: each its own question rows; sdpa's output stands at the
    others); None where every pair is acted on at every row."""

    idx: torch.Tensor
    bias: torch.Tensor
    write: torch.Tensor | None = None


@dataclass
class LayerWork:
    """What one touched layer recomputes (module docstring): pairs ``(bi, hi)`` [P] long on
    the device; its rows in ``chunks``; the interventions acting in it; ``folded_e`` the rows
    [0, e) of the folded path when the plan allows it (the model's mask is checked once per
    forward, :func:`vheads.engine._attention.note_mask`), else None; ``gathered`` the keys
    each pair may see when they are few (:class:`Gathered`; it then runs instead of either
    other path), else None."""

    bi: torch.Tensor
    hi: torch.Tensor
    chunks: list[Chunk]
    acting: list[Acting]
    folded_e: int | None
    gathered: Gathered | None = None


@dataclass
class AblationWork:
    """A head-output ablation over the forward's rows ``[q_off, q_off + tq)``: ``on`` [B, Tq]
    bool and ``role`` [B, Tq] long (None for zero) on the device, ``values`` [L, H, R, D] on
    the device (None for zero), ``heads`` [B, L, H] on the device, ``layers`` the layers it
    changes some row of."""

    heads: torch.Tensor
    on: torch.Tensor
    role: torch.Tensor | None
    values: torch.Tensor | None
    layers: frozenset[int]


@dataclass
class RecordWork:
    """An output record over the forward's rows: ``flat`` [n] long, the recorded rows as
    ``b · Tq + j``, and ``slot`` [n] long, each one's ``b · R + role`` (on the device)."""

    flat: torch.Tensor
    slot: torch.Tensor
    n_roles: int
    name: str


@dataclass
class CaptureWork:
    """A capture on the device: ``rows`` [B, T] (1 at a captured row), ``groups`` [B, G, T]
    (1 in the group), ``norm`` [B, T] (1 at a key renormalised over) or None, ``n_rows`` [B];
    all fp32."""

    rows: torch.Tensor
    groups: torch.Tensor
    norm: torch.Tensor | None
    n_rows: torch.Tensor
    name: str
    stat: str


class Schedule:
    """A plan's work in one forward whose query row 0 sits at absolute position ``q_off``,
    on ``device``: :meth:`layer` per touched layer (None: the plain path), the ablations,
    records and captures on the device."""

    def __init__(self, plan: ProbePlan, q_off: int, device, layers=None, moved: dict | None = None):
        self.plan, self.q_off, self.device = plan, q_off, torch.device(device)
        self.T = _length(plan)
        self._moved = {} if moved is None else moved
        dev = self.device
        self.interventions = [(iv, iv.key_bias.to(dev)) for iv in plan.interventions]
        # fp32 0/1 on the device once, as the chunks read them (no conversion per chunk)
        self.captures = [CaptureWork(c.rows.float().to(dev), c.groups.float().to(dev), None if c.norm is None else c.norm.float().to(dev),
                                     c.rows.sum(1).float().to(dev), c.name, c.stat) for c in plan.captures]
        window = slice(q_off, self.T)
        self.ablations = []
        for ab in plan.ablations:
            on = ab.rows[:, window]
            layers = frozenset((ab.heads.any(2) & on.any(1)[:, None]).any(0).nonzero().flatten().tolist())
            if not layers:
                continue
            self.ablations.append(AblationWork(ab.heads.to(dev), on.to(dev), None if ab.role is None else ab.role[:, window].clamp(min=0).to(dev),
                                               None if ab.values is None else self._move(ab.values), layers))
        self.records = []
        for rec in plan.records:
            role = rec.role[:, window]  # [B, Tq]
            b, j = (role >= 0).nonzero(as_tuple=True)
            tq = role.shape[1]
            self.records.append(RecordWork((b * tq + j).to(dev), (b * rec.n_roles + role[b, j]).to(dev), rec.n_roles, rec.name))
        #: which interventions act on a pair (their indices) -> each batch row's keys with a finite summed bias (:meth:`_row_keys`)
        self._keys: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self._layers: dict[int, LayerWork | None] = {}
        for layer in range(plan.n_layers) if layers is None else layers:
            self.layer(layer)

    @property
    def folds(self) -> bool:
        """Whether a layer worked out so far may take the folded path."""
        return any(w is not None and w.folded_e is not None for w in self._layers.values())

    def _move(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` on the device, moved once for every plan cut from this one (layer sharing
        keeps an ablation's values tensor as it is)."""
        hit = self._moved.get(id(x))
        if hit is None or hit[0] is not x:
            hit = self._moved[id(x)] = (x, x.to(self.device))
        return hit[1]

    def layer(self, layer: int) -> LayerWork | None:
        """The work of ``layer`` (worked out on first use; :func:`prepare` does it before the forward)."""
        if layer not in self._layers:
            self._layers[layer] = self._layer(layer)
        return self._layers[layer]

    def _layer(self, layer: int) -> LayerWork | None:
        plan, q_off, T, dev = self.plan, self.q_off, self.T, self.device
        B, H = plan.batch_size, plan.n_heads
        ivs = [(i, iv, kb) for i, (iv, kb) in enumerate(self.interventions) if iv.heads[:, layer].any()]
        if not plan.captures and not ivs:
            return None
        # the rows: where an intervention acts on some head of the layer, or a capture reads
        local = torch.zeros(T, dtype=torch.bool)
        for _, iv, _ in ivs:
            local |= (iv.rows & iv.heads[:, layer].any(1)[:, None]).any(0)
        for c in plan.captures:
            local |= c.rows.any(0)
        local[:q_off] = False
        rows = local.nonzero().flatten()  # [Qs]
        # the pairs: every pair when the plan captures (a capture reads all heads), else the heads acted on
        if plan.captures:
            touched = torch.ones(B, H, dtype=torch.bool)
        else:
            touched = torch.zeros(B, H, dtype=torch.bool)
            for _, iv, _ in ivs:
                touched |= iv.heads[:, layer]
        bi, hi = touched.nonzero(as_tuple=True)
        if len(rows) == 0 or len(bi) == 0:
            return None
        P, tk = len(bi), T
        acting, ons = [], []
        for _, iv, kb in ivs:
            heads = iv.heads[:, layer][bi, hi]  # [P]
            on = heads[:, None] & iv.rows[:, rows][bi]  # [P, Qs]
            uniform = bool((on.all(1) | ~on.any(1)).all())
            acting.append(Acting(heads.to(dev), kb, on[:, 0].to(dev) if uniform else None, None if uniform else on.to(dev)))
            ons.append(on)
        folded_e = None
        if ivs and not plan.captures and q_off == 0:
            e = int(rows[-1]) + 1
            q = torch.arange(e)
            if all(bool((iv.rows[:, :e] | (q[None] < first_biased_key(iv.key_bias[:, :e])[:, None]) | ~iv.heads[:, layer].any(1)[:, None]).all())
                   for _, iv, _ in ivs):
                folded_e = e
        gathered = None
        if ivs and not plan.captures:
            gathered = self._gathered([i for i, _, _ in ivs], ons, bi, GATHER_SHARE_FOLDED if folded_e is not None else GATHER_SHARE)
        # rows per chunk: the logits of every pair (a capture: of every batch row's heads) within the budget
        per_row = (B * H if not ivs else P) * tk * _F32
        n = max(1, CHUNK_BYTES // per_row)
        if plan.captures:
            n = min(n, ROW_CHUNK)
        chunks = []
        for a in range(0, len(rows), n):
            r = rows[a : a + n]
            span = _span(r - q_off)
            captured = tuple(bool(c.rows[:, r].any()) for c in plan.captures)
            chunks.append(Chunk(r.to(dev), span if span is not None else (r - q_off).to(dev), a, a + len(r), captured))
        return LayerWork(bi.to(dev), hi.to(dev), chunks, acting, folded_e, gathered)

    def _row_keys(self, which: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each batch row's keys with a finite bias when the interventions ``which`` act
        together: (how many [B], their positions [B, n] ascending, their summed bias [B, n],
        −inf past a row's count), ``n`` the most of any row. On the host, once per forward."""
        hit = self._keys.get(which)
        if hit is None:
            bias = sum(self.plan.interventions[i].key_bias[:, : self.T].float() for i in which)
            seen = torch.isfinite(bias)
            count = seen.sum(1)
            idx = torch.argsort((~seen).to(torch.uint8), dim=1, stable=True)[:, : int(count.max())]  # the seen positions first
            hit = self._keys[which] = (count, idx, bias.gather(1, idx).masked_fill(~seen.gather(1, idx), float("-inf")))
        return hit

    def _gathered(self, which: list[int], ons: list[torch.Tensor], bi: torch.Tensor, share: float) -> Gathered | None:
        """The :class:`Gathered` keys of a layer's pairs (batch rows ``bi`` [P]) when the
        interventions ``which`` acting in it (``ons``: each one's [P, Qs] bool, where it acts on
        a pair among the layer's rows) act on each pair at the same rows, every pair is acted
        on at some row, and no pair sees more than ``share`` of the keys with a finite bias;
        else None. On the host."""
        if len(ons) > 62:
            return None
        acted = torch.zeros_like(ons[0])
        for on in ons:
            acted |= on
        some = [on.any(1) for on in ons]  # [P] each: the intervention acts on the pair somewhere
        if not bool(acted.any(1).all()) or not all(bool(((on == acted) | ~s[:, None]).all()) for on, s in zip(ons, some)):
            return None
        code = sum(s.long() << j for j, s in enumerate(some))  # [P]: which interventions act on each pair
        groups = []
        for c in code.unique().tolist():
            pairs = (code == c).nonzero().flatten()
            count, idx, bias = self._row_keys(tuple(i for j, i in enumerate(which) if c >> j & 1))
            rows = bi[pairs]
            n = int(count[rows].max())
            if n == 0 or n > share * self.T:
                return None
            groups.append((pairs, idx[rows, :n], bias[rows, :n]))
        if len(groups) == 1:
            idx, bias = groups[0][1], groups[0][2]
        else:
            n = max(g[1].shape[1] for g in groups)
            idx = torch.zeros(len(bi), n, dtype=torch.long)
            bias = torch.full((len(bi), n), float("-inf"))
            for pairs, i, b in groups:
                idx[pairs, : i.shape[1]], bias[pairs, : b.shape[1]] = i, b
        write = None if bool(acted.all()) else acted.to(self.device)
        return Gathered(idx.to(self.device), bias.to(self.device), write)



def on_device(x: torch.Tensor, device) -> torch.Tensor:
    """``x`` where it already is when that is ``device`` (moved before the layers ran), else
    a copy there (a layer of a device map on another device): the layer loop calls ``.to``
    only when a transfer is due."""
    return x if x.device == device else x.to(device)


def pair_chunks(P: int, per_pair_bytes: int, multiple: int = 1) -> list[slice]:
    """Pairs [0, P) in chunks whose fp32 working set, ``per_pair_bytes`` each, fits
    :data:`CHUNK_BYTES` (at least one chunk of ``multiple`` pairs; a chunk's size a multiple of it)."""
    n = max(multiple, CHUNK_BYTES // max(1, per_pair_bytes) // multiple * multiple)
    return [slice(a, min(P, a + n)) for a in range(0, P, n)]


def _span(rows: torch.Tensor) -> slice | None:
    """``rows`` [Qs] (host, ascending) as a slice when they are consecutive, else None."""
    if len(rows) and int(rows[-1] - rows[0]) == len(rows) - 1:
        return slice(int(rows[0]), int(rows[0]) + len(rows))
    return None


def _length(plan: ProbePlan) -> int:
    """The number of positions a plan's tensors span."""
    for x in [*plan.interventions, *plan.captures, *plan.ablations]:
        return x.rows.shape[1]
    for r in plan.records:
        return r.role.shape[1]
    return 0
