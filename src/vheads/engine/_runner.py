"""Run probe plans on a loaded model: batched head-sets, several items per forward, prefix reuse.

A forward runs a :class:`RowBatch`: batch rows drawn from one or more prompts (items),
padded to one length. Each prompt is split at ``split`` into a prefix and a suffix and laid
out as ``[prefix, pad][pad, suffix]``: prefixes left-aligned in ``[0, P)``, suffixes
right-aligned in ``[P, P + S)``. So

- the last prompt token of every row sits at the last position ``T - 1``: one LM-head
  row (``logits_to_keep``) serves every item;
- with prefix reuse (split > 0) the prefixes — system prompt and image — run once per
  item (batch = number of items) and their KV cache is shared by that item's rows;
  without it (split 0) the layout is plain left padding;
- every row gets its own item's position ids (Qwen's M-RoPE ids from the adapter, plain
  ``0 … T_u − 1`` otherwise) at its own positions: padding changes no real token's rope
  phase, and padded keys are masked out for every real query row.

The vision tower runs once over the batch's distinct images; its output is repeated for
each item's rows. Plans are given in padded coordinates: :meth:`RowBatch.place` maps a
prompt's ``[T_u]`` vector there.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from vheads.engine._ablate import HeadAblation, OutputRecord
from vheads.engine._attention import active_plan, install
from vheads.engine import _fast_ops as fast_ops
from vheads.engine._batching import Batching, pack  # noqa: F401 - re-exported
from vheads.engine._last_layer_rows import read_rows_only
from vheads.engine._layers import decoder_layers, shared_layers
from vheads.engine._lm_head import fp32_logits
from vheads.engine._memory import device_free_memory, fitting_positions, keep_freed_memory
from vheads.engine._oom import RowLimit, split_on_oom
from vheads.engine._plan import Capture, Intervention, ProbePlan
from vheads.engine._prefix import SharedPrefixLayer, suffix_pass
from vheads.engine._prefix import share_layers as share_prefix
from vheads.engine._vision_cache import VisionCache, join, pixel_key, segments
from vheads.models import LoadedModel, Prompt



#: model inputs with one entry per token (sliced with the sequence for prefix reuse)
TOKEN_INPUTS = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids")


@dataclass
class ForwardResult:
    logits: torch.Tensor  # [B, T_out, V] (T_out: the positions computed in this forward)
    captures: dict[str, torch.Tensor]  # name -> [B, L, H, G]


@dataclass
class RowBatch:
    """Batch rows from several prompts: ``counts[u]`` consecutive rows read ``prompts[u]``,
    split at ``splits[u]`` (all 0: no prefix; else every split > 0)."""

    prompts: list[Prompt]
    counts: list[int]
    splits: list[int]

    def __post_init__(self) -> None:
        if not (len(self.prompts) == len(self.counts) == len(self.splits)) or not self.prompts:
            raise ValueError("a row batch needs one count and one split per prompt, and at least one prompt")
        if any(s > 0 for s in self.splits) and not all(0 < s < p.layout.n_tokens for s, p in zip(self.splits, self.prompts)):
            raise ValueError(f"prefix splits {self.splits} must all lie inside their prompts, or all be 0")
        self.prefix = max(self.splits)  # P
        self.length = self.prefix + max(p.layout.n_tokens - s for p, s in zip(self.prompts, self.splits))  # T = P + S

    @property
    def n_rows(self) -> int:
        return sum(self.counts)

    def index(self, u: int) -> torch.Tensor:
        """Padded position of each of prompt u's positions: [T_u] long."""
        T_u, s = self.prompts[u].layout.n_tokens, self.splits[u]
        j = torch.arange(T_u)
        return torch.where(j < s, j, self.length - T_u + j)

    def place(self, u: int, values: torch.Tensor, fill=0) -> torch.Tensor:
        """``values [..., T_u]`` of prompt u at their padded positions: [..., T] (``fill`` elsewhere)."""
        out = torch.full((*values.shape[:-1], self.length), fill, dtype=values.dtype)
        out[..., self.index(u)] = values
        return out

    def row_items(self) -> torch.Tensor:
        """The prompt index of each batch row: [B]."""
        return torch.repeat_interleave(torch.arange(len(self.counts)), torch.tensor(self.counts))

    @classmethod
    def build(cls, prompts: list[Prompt], counts: list[int], first_rows: list[int], prefix_reuse: bool = True) -> "RowBatch":
        """Split every prompt at the first row its plan acts on (``first_rows[u]``, prompt
        coordinates) when prefix reuse applies to all of them: some prompt has more than one
        row (else there is nothing to share, and the cache would only add to peak memory),
        and each split lies after the prompt's last image token (the suffix runs without
        pixel values) and before its end."""
        ok = prefix_reuse and max(counts) > 1 and all(can_split(p, f) for p, f in zip(prompts, first_rows))
        return cls(prompts, counts, list(first_rows) if ok else [0] * len(prompts))


def can_split(prompt: Prompt, first_row: int) -> bool:
    """Whether ``prompt`` can be split into a shared prefix at ``first_row``: after its last
    image token (the suffix runs without pixel values), after position 0, before its end."""
    img_end = prompt.layout.vision_end  # the end of the image block: every slot the vision tower fills
    return max(img_end, 1) <= first_row < prompt.layout.n_tokens


class Engine:
    """Wraps a :class:`LoadedModel` whose language model runs the vheads attention."""

    def __init__(self, lm: LoadedModel, batching: Batching | None = None):
        self.lm = lm
        self.batching = batching or Batching()
        if self.batching.one_length is None:
            from vheads._device import padding_costs_more

            self.batching = dataclasses.replace(self.batching, one_length=padding_costs_more(str(lm.device)))
        install(lm.model)
        fast_ops.install(lm.model)  # the tiny model's norms and rotary in fewer passes, same bits (:mod:`._fast_ops`)
        #: the vision tower's outputs by images, reused across forwards (:mod:`._vision_cache`)
        self.vision_cache = VisionCache() if self.batching.vision_cache else None
        #: the most rows per forward that fit, learnt from out-of-memory splits (:func:`split_on_oom`)
        self.memory = RowLimit()
        free = device_free_memory(lm.device)
        if free is not None:  # the device says how much is free: start from a token budget that fits
            self.batching = dataclasses.replace(self.batching, token_budget=min(self.batching.token_budget,
                                                                                 fitting_positions(lm.model.config, lm.model.dtype, free)))
        else:  # a CPU: freed pages kept for the next forward (:mod:`._memory`)
            keep_freed_memory()

    @property
    def shape(self) -> tuple[int, int]:
        return self.lm.n_layers, self.lm.n_heads

    @property
    def cross_item(self) -> bool:
        """Whether rows of different items may share a forward (the switch, and the adapter's support)."""
        return self.batching.cross_item and self.lm.adapter.cross_item

    def _positions(self, prompt: Prompt) -> torch.Tensor:
        """The prompt's position ids: [..., 1, T_u] (M-RoPE: [3, 1, T_u]; else [1, T_u])."""
        if not prompt._positions_known:
            prompt.position_ids = self.lm.adapter.position_ids(self.lm.model, {k: v.to(self.lm.device) for k, v in prompt.inputs.items()})
            prompt._positions_known = True
        if prompt.position_ids is None:
            return torch.arange(prompt.layout.n_tokens)[None]
        return prompt.position_ids.cpu()

    def _inputs(self, batch: RowBatch, part: str) -> dict[str, torch.Tensor]:
        """Model inputs of ``batch``: ``part`` = ``full`` (every row, all positions),
        ``prefix`` (one row per prompt, positions [0, P), with pixel inputs) or ``suffix``
        (every row, positions [P, T), no pixel inputs; the attention mask covers all T)."""
        P, T = batch.prefix, batch.length
        counts = [1] * len(batch.prompts) if part == "prefix" else batch.counts
        pad = self.lm.adapter.tokenizer(self.lm.processor).pad_token_id or 0
        pixel_keys = self.lm.adapter.pixel_keys  # the family's image inputs (pixels, grids, tile maps)
        text: dict[str, list[torch.Tensor]] = {}
        for u, pr in enumerate(batch.prompts):
            per = {"input_ids": batch.place(u, pr.inputs["input_ids"][0], pad),
                   "attention_mask": batch.place(u, torch.ones(pr.layout.n_tokens, dtype=torch.long)),
                   "position_ids": batch.place(u, self._positions(pr)[..., 0, :])}
            for k, v in pr.inputs.items():  # token-aligned extras (Qwen's mm_token_type_ids)
                if k not in per and k not in pixel_keys and v.dim() == 2 and v.shape[1] == pr.layout.n_tokens:
                    per[k] = batch.place(u, v[0])
            for k, v in per.items():
                text.setdefault(k, []).append(v)
        inputs = {}
        for k, vs in text.items():
            rows = [v.unsqueeze(-2).expand(*v.shape[:-1], n, T) for v, n in zip(vs, counts)]  # [..., n_u, T] views
            inputs[k] = rows[0] if len(rows) == 1 else torch.cat(rows, -2)  # [..., B, T]
        if part == "prefix":
            inputs = {k: v[..., :P] for k, v in inputs.items()}
        elif part == "suffix":
            inputs = {k: (v if k == "attention_mask" else v[..., P:]) for k, v in inputs.items()}
        if part != "suffix" and any(k in batch.prompts[0].inputs for k in pixel_keys):
            inputs.update(self.lm.adapter.items_pixel_inputs([{k: p.inputs[k] for k in pixel_keys if k in p.inputs} for p in batch.prompts], counts))
        inputs = {k: v.to(self.lm.device) for k, v in inputs.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.lm.model.dtype)
        return inputs

    @contextlib.contextmanager
    def _shared_vision(self, batch: RowBatch, counts: list[int] | None = None):
        """Run the vision tower once over the batch's distinct images and repeat its output
        (every tensor of it, along dim 0) for each item's rows (``counts``, default the
        batch's; all 1 in the prefix pass): copies of one image encode alike. The output is
        kept (:mod:`._vision_cache`) and a later forward of the same images reads it instead
        of running the tower. A family whose tower packs a batch differently has no
        ``vision_module`` (None): the tower then runs on every row's copy."""
        counts = batch.counts if counts is None else counts
        cache = self.vision_cache if not torch.is_grad_enabled() else None
        single = all(n == 1 for n in counts)  # no copy to share: worth a wrapper only to keep the output
        module = None
        if not single or cache is not None:
            try:
                module = self.lm.adapter.vision_module(self.lm.model)
            except NotImplementedError:
                if not single:
                    raise
        if module is None:
            yield
            return
        original = module.forward
        own = module.__dict__.get("forward")  # an instance forward already there (accelerate's device hooks): put back after
        weights = [len(p.layout.image_positions) for p in batch.prompts]
        keys = None if cache is None else [pixel_key(p, self.lm.adapter.pixel_keys) for p in batch.prompts]

        def once(*args, **kwargs):
            segs = None if keys is None else cache.get_all(keys)
            if segs is None:
                a, k = self.lm.adapter.items_vision_call(args, kwargs, counts)
                segs = segments(original(*a, **k), weights)
                for key, seg in zip(keys or (), segs):
                    cache.put(key, seg)
            return join(segs, counts)

        module.forward = once
        try:
            yield
        finally:
            if own is not None:
                module.forward = own
            else:
                del module.forward  # back to the class's forward

    def _shared_layers(self, batch: RowBatch, plan: ProbePlan | None):
        """Layer-prefix sharing for a full forward of ``batch`` under ``plan``, when switched
        on, the plan only intervenes, the family's layers compute each row from that row alone
        (``adapter.rows_independent_layers``), and the model exposes its decoder layers."""
        use = self.batching.share_layers and self.lm.adapter.rows_independent_layers and plan is not None and not plan.reads_every_row
        layers = decoder_layers(self.lm.model) if use else None
        if layers is None:
            return contextlib.nullcontext()
        return shared_layers(layers, plan, batch.row_items(), self.lm.device)

    def _read_rows(self, keep, n_positions: int, plan: ProbePlan | None):
        """The last decoder layer on the read rows ``keep`` only (``Batching.last_layer_rows``),
        for a forward of ``n_positions`` positions whose plan captures nothing; ``keep`` is
        ``logits_to_keep`` (an int: every row is read)."""
        if not self.batching.last_layer_rows or not isinstance(keep, torch.Tensor) or (plan is not None and plan.reads_every_row):
            return contextlib.nullcontext()
        layers = decoder_layers(self.lm.model)
        if layers is None:
            return contextlib.nullcontext()
        return read_rows_only(layers[-1], keep, n_positions, self.lm.device)

    @contextlib.contextmanager
    def _hidden_norms(self, plan: ProbePlan | None, results: dict):
        """Record ``results["hidden_norm"] [B, T]``, the L2 norm of each row's hidden state at
        ``plan.hidden_norm_layer`` (:class:`ProbePlan`), by a hook on a decoder layer of the
        same forward: the input of layer 0 (ℓ = 0), else the output of layer ℓ − 1."""
        layer = None if plan is None else plan.hidden_norm_layer
        if layer is None:
            yield
            return
        layers = decoder_layers(self.lm.model)
        if layers is None:
            raise ValueError(f"{self.lm.model_id}: the language model does not expose its decoder layers "
                             "(get_decoder().layers): hidden-state norms cannot be recorded")

        def keep(h: torch.Tensor) -> None:
            results["hidden_norm"] = h.detach().float().norm(dim=-1)  # [B, T]

        if layer == 0:
            def pre(module, args, kwargs):
                keep(args[0] if args else kwargs["hidden_states"])
            handle = layers[0].register_forward_pre_hook(pre, with_kwargs=True)
        else:
            def post(module, args, output):
                keep(output[0] if isinstance(output, (tuple, list)) else output)
            handle = layers[layer - 1].register_forward_hook(post)
        try:
            yield
        finally:
            handle.remove()

    @torch.no_grad()
    def run(self, batch: RowBatch, plan: ProbePlan | None = None, logits_at: list[int] | None = None) -> ForwardResult:
        """One forward of ``batch`` under ``plan`` (padded coordinates, batch = ``batch.n_rows``).

        With a prefix (``batch.prefix > 0``) the prompts' prefixes run first, one row per
        prompt and no plan, and their KV cache serves the rows of each prompt; then the
        suffixes run under the plan. Without a prefix, each decoder layer runs on the distinct
        hidden states only (``Batching.share_layers``, :mod:`vheads.engine._layers`).
        ``logits_at`` limits the returned logits to those padded positions (all computed ones
        by default); the LM head runs on those rows only.
        """
        model = self.lm.model
        P, T, B = batch.prefix, batch.length, batch.n_rows
        if plan is not None and plan.batch_size != B:
            raise ValueError(f"plan of batch {plan.batch_size} for a row batch of {B} rows")
        if P > 0 and plan is not None and plan.hidden_norm_layer is not None:
            raise ValueError("hidden-state norms are recorded on full forwards only (a prefix pass runs without the plan)")
        if P > 0:
            # the prefix pass only fills the cache: of its last layer's rows, the one row its logits read
            with active_plan(None), self._read_rows(torch.tensor([P - 1]), P, None), self._shared_vision(batch, [1] * len(batch.prompts)):
                cache = _prefix_cache(model)
                model(**self._inputs(batch, "prefix"), cache=cache, use_cache=True, logits_to_keep=1)
            share_prefix(cache, batch.counts, batch.splits, model.config)
            shared = _share_cache(cache, batch.counts)
            keep = _keep(logits_at, P, T)
            # the plan's work in each layer, on the device, before the layers run (no sync in the layer loop)
            with (active_plan(plan, self.lm.device, q_off=P) as results, self._read_rows(keep, T - P, plan),
                  suffix_pass(P, batch.counts, batch.splits), fp32_logits(model)):
                out = model(**self._inputs(batch, "suffix"), cache=shared, use_cache=True, logits_to_keep=keep)
        else:
            keep = _keep(logits_at, 0, T)
            with (active_plan(plan, self.lm.device, q_off=0) as results, self._shared_vision(batch), self._shared_layers(batch, plan),
                  self._read_rows(keep, T, plan), fp32_logits(model), self._hidden_norms(plan, results)):
                out = model(**self._inputs(batch, "full"), use_cache=False, logits_to_keep=keep)
        logits = out.logits
        if logits_at is not None:
            logits = logits[:, : len(logits_at)]  # the LM head ran on exactly these rows
        # logits: fp32 from the final hidden state (:mod:`._lm_head`); captures and records, accumulated
        # on the device, copied to the host once per forward
        return ForwardResult(logits=logits.float(), captures={k: v.cpu() for k, v in results.items()})

    def forward(self, prompt: Prompt, plan: ProbePlan | None = None, prefix_reuse: bool = True, logits_at: list[int] | None = None) -> ForwardResult:
        """One forward of ``prompt`` repeated ``plan.batch_size`` times under ``plan``
        (prompt coordinates: one prompt needs no padding).

        With ``prefix_reuse`` and a plan whose actions all start at row p > 0, the prefix
        [0, p) — system prompt and image — runs once (only when p lies after the last image
        token) and its KV cache is shared by every batch row. A plan of batch 1 runs in one
        plain pass: there is nothing to share. ``logits_at`` limits the returned logits to
        those absolute positions (all of the computed ones by default).
        """
        batch = plan.batch_size if plan is not None else 1
        first = plan.first_row() if plan is not None else 0
        return self.run(RowBatch.build([prompt], [batch], [first], prefix_reuse), plan, logits_at)

    def letter_probs(self, logits_last: torch.Tensor) -> torch.Tensor:
        """P over the four option letters, renormalized over them: [B, 4]."""
        ids = self.lm.adapter.letter_token_ids(self.lm.processor)
        return torch.softmax(logits_last[:, ids].float(), dim=-1)

    def letter_scores(self, logits_last: torch.Tensor) -> torch.Tensor:
        """The four option letters' logits and the log-sum-exp over the full vocabulary:
        [B, 5] (float32). Every metric of an outcome follows from these five numbers
        (:func:`vheads.evaluation.outcome_metrics`): P renormalised over the letters is the
        softmax of the first four, log P(x) over the vocabulary is ``logit(x) − lse``."""
        ids = self.lm.adapter.letter_token_ids(self.lm.processor)
        full = logits_last.float()  # [B, V]
        return torch.cat([full[:, ids], torch.logsumexp(full, dim=-1, keepdim=True)], dim=-1)

    def plan(self, batch: int, interventions: list[Intervention] = (), captures: list[Capture] = (),
             ablations: list[HeadAblation] = (), records: list[OutputRecord] = ()) -> ProbePlan:
        L, H = self.shape
        return ProbePlan(batch, L, H, list(interventions), list(captures), self.lm.attention_layers, list(ablations), list(records))


    def capture_many(self, requests: list[tuple[Prompt, dict[str, torch.Tensor], torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        """Region mass of many prompts: ``requests[i] = (prompt, {name: rows [T_i] bool},
        groups [G, T_i] bool)``, the same names and G for every request. Returns, per
        request, ``{name: [L, H, G]}`` (see :class:`Capture`). Prompts share forwards
        (one row each, left-padded) within the batching limits; no logits are computed."""
        return self.capture_prompts([(pr, [Capture(r, groups, name) for name, r in rows.items()]) for pr, rows, groups in requests])

    def capture_prompts(self, requests: list[tuple[Prompt, list[Capture]]], hidden_norm_layer: int | None = None) -> list[dict[str, torch.Tensor]]:
        """:meth:`capture_many` with any :class:`Capture` (``norm``, ``stat``): ``requests[i] =
        (prompt, captures)``, each capture's tensors in prompt coordinates without the batch
        dimension (rows [T_i], groups [G, T_i], norm [T_i]); the same names in every request,
        G may differ (padded with empty groups, cut back in the result). Returns, per request,
        ``{name: [L, H, G_i]}``; with ``hidden_norm_layer`` (see :class:`ProbePlan`) also
        ``"hidden_norm": [T_i]``, the L2 norm of each position's hidden state there, read in
        the same forward."""
        out: list[dict[str, torch.Tensor]] = []
        for group in pack([(pr, 1, 0) for pr, _ in requests], self.batching if self.cross_item else dataclasses.replace(self.batching, max_rows=1)):
            # a forward out of device memory is split in half and retried (rows do not depend on their batch)
            out += split_on_oom(lambda g: self._capture_group(requests, g, hidden_norm_layer), group, len, lambda g, k: (g[:k], g[k:]),
                                lambda a, b: a + b, self.lm.model_id, self.memory)
        return out

    def _capture_group(self, requests: list[tuple[Prompt, list[Capture]]], group: list[int],
                       hidden_norm_layer: int | None = None) -> list[dict[str, torch.Tensor]]:
        """One capture forward of ``requests[i]`` for ``i`` in ``group`` (one row each): per request,
        ``{name: [L, H, G_i]}`` (and ``"hidden_norm": [T_i]`` with ``hidden_norm_layer``)."""
        prompts = [requests[i][0] for i in group]
        batch = RowBatch(prompts, [1] * len(group), [0] * len(group))
        caps, sizes = [], {}
        for j, first in enumerate(requests[group[0]][1]):
            each = [requests[i][1][j] for i in group]
            sizes[first.name] = [c.groups.shape[0] for c in each]
            G = max(sizes[first.name])
            rows = torch.stack([batch.place(u, c.rows.bool(), False) for u, c in enumerate(each)])  # [B, T]
            groups = torch.stack([batch.place(u, torch.cat([c.groups.bool(), c.groups.new_zeros(G - c.groups.shape[0], c.groups.shape[1]).bool()]), False)
                                  for u, c in enumerate(each)])  # [B, G, T]
            norm = None if first.norm is None else torch.stack([batch.place(u, c.norm.bool(), False) for u, c in enumerate(each)])  # [B, T]
            caps.append(Capture(rows, groups, first.name, norm, first.stat))
        plan = dataclasses.replace(self.plan(len(group), captures=caps), hidden_norm_layer=hidden_norm_layer)
        res = self.run(batch, plan, logits_at=[])
        out = [{name: res.captures[name][u][..., : sizes[name][u]] for name in sizes} for u in range(len(group))]
        if hidden_norm_layer is not None:
            for u, d in enumerate(out):
                d["hidden_norm"] = res.captures["hidden_norm"][u][batch.index(u)]  # [T_u]
        return out


def _rows(x: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Prefix-cache rows [U, ...] repeated ``counts[u]`` times: [B, ...] (a view for one prompt)."""
    if len(counts) == 1:
        return x.expand(counts[0], *x.shape[1:])
    return torch.repeat_interleave(x, torch.tensor(counts, device=x.device), dim=0)


def _keep(logits_at: list[int] | None, start: int, end: int):
    """``logits_to_keep`` for a forward computing positions [start, end): the LM head runs
    only on the requested rows (a [B, T, vocab] tensor is gigabytes on a real model)."""
    if logits_at is None:
        return 0  # all rows
    if not logits_at:
        # the last row, as an index: an integer lets Gemma 4 run its KV-shared layers on the
        # kept rows only, and a plan acts on (and captures) the other rows too
        return torch.tensor([end - start - 1])
    for i in logits_at:
        if not start <= i < end:
            raise ValueError(f"logits requested at position {i}, outside the computed positions {start}..{end - 1}")
    return torch.tensor([i - start for i in logits_at])


def _prefix_cache(model) -> DynamicCache:
    """An empty cache for the prefix pass: the model's own kind of layer (KV, or a
    linear-attention layer's conv / recurrent state), except that sliding-window layers keep
    every key (a full layer): the engine indexes keys by absolute position, and the window
    is in the model's mask anyway."""
    cache = DynamicCache(config=model.config)
    cache.layers = [DynamicLayer() if getattr(layer, "is_sliding", False) else layer for layer in cache.layers]
    return cache


def _share_cache(cache: DynamicCache, counts: list[int]) -> DynamicCache:
    """The prefix ``cache`` (one row per prompt) for the batch's rows, prompt u repeated
    ``counts[u]`` times: keys and values as views where one prompt allows (:func:`_rows`);
    a linear-attention layer's conv / recurrent state (small, updated in place) as copies."""
    for layer in cache.layers:
        if isinstance(layer, SharedPrefixLayer):  # read by every row as it is
            continue
        if getattr(layer, "keys", None) is not None:
            layer.keys, layer.values = _rows(layer.keys, counts), _rows(layer.values, counts)
        for states in (getattr(layer, "conv_states", {}), getattr(layer, "recurrent_states", {})):
            for i, st in states.items():
                if st is not None:
                    states[i] = torch.repeat_interleave(st, torch.tensor(counts, device=st.device), dim=0)
    return cache
