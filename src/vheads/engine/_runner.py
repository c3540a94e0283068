"""Run probe plans on a loaded model: single forwards, batched head-sets, prefix reuse."""

from __future__ import annotations

from dataclasses import dataclass

import contextlib
import dataclasses

import torch
from transformers import DynamicCache

from vheads.engine._attention import active_plan, install
from vheads.engine._plan import Capture, Intervention, ProbePlan
from vheads.models import LoadedModel, Prompt


@dataclass
class ForwardResult:
    logits: torch.Tensor  # [B, T_out, V] (T_out: the positions computed in this forward)
    captures: dict[str, torch.Tensor]  # name -> [B, L, H, G]


class Engine:
    """Wraps a :class:`LoadedModel` whose language model runs the vheads attention."""

    def __init__(self, lm: LoadedModel):
        self.lm = lm
        install(lm.model)

    @property
    def shape(self) -> tuple[int, int]:
        return self.lm.n_layers, self.lm.n_heads

    def _inputs_for(self, prompt: Prompt, batch: int) -> dict[str, torch.Tensor]:
        """Model inputs for ``batch`` copies of ``prompt``; pixel inputs are laid out for a
        single vision pass (see :meth:`_shared_vision`)."""
        dev = self.lm.device
        pixel_keys = self.lm.adapter.pixel_keys
        inputs = {k: v.expand(batch, *v.shape[1:]) if batch > 1 else v
                  for k, v in prompt.inputs.items() if k not in pixel_keys}
        pixel = {k: v for k, v in prompt.inputs.items() if k in pixel_keys}
        if pixel and batch > 1:
            pixel = self.lm.adapter.batch_pixel_inputs(pixel, batch)
        inputs.update(pixel)
        inputs = {k: v.to(dev) for k, v in inputs.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.lm.model.dtype)
        return inputs

    @contextlib.contextmanager
    def _shared_vision(self, batch: int):
        """Run the vision tower once for ``batch`` copies of one image and repeat its output
        (every tensor of it along dim 0): the copies are identical, so is their encoding."""
        module = self.lm.adapter.vision_module(self.lm.model) if batch > 1 else None
        if module is None:  # batch 1, or a family whose tower packs a batch differently (its adapter says)
            yield
            return
        original = module.forward

        def once(*args, **kwargs):
            a, k = self.lm.adapter.single_vision_call(args, kwargs, batch)
            return _repeat_batch(original(*a, **k), batch)

        module.forward = once
        try:
            yield
        finally:
            del module.forward  # back to the class's forward

    @torch.no_grad()
    def forward(self, prompt: Prompt, plan: ProbePlan | None = None, prefix_reuse: bool = True, logits_at: list[int] | None = None) -> ForwardResult:
        """One forward of ``prompt`` repeated ``plan.batch_size`` times under ``plan``.

        With ``prefix_reuse`` and a plan whose actions all start at row p > 0, the prefix
        [0, p) — system prompt and image — runs once
        (only when p lies after the last image token) with batch 1 and its KV cache is
        shared by every batch row. A plan of batch 1 runs in one plain pass: there is
        nothing to share, and the cache would only add to peak memory. ``logits_at`` limits the returned logits to those
        absolute positions (all of the computed ones by default).
        """
        batch = plan.batch_size if plan is not None else 1
        T = prompt.layout.n_tokens
        p = plan.first_row() if plan is not None else 0
        model = self.lm.model
        if not prompt._positions_known:
            prompt.position_ids = self.lm.adapter.position_ids(model, {k: v.to(self.lm.device) for k, v in prompt.inputs.items()})
            prompt._positions_known = True
        pos = prompt.position_ids
        # the prefix must hold every slot the vision tower fills: the suffix runs without pixel values
        img_end = prompt.layout.vision_end
        # batch 1 shares nothing: a prefix pass would only add a KV cache to peak memory
        if prefix_reuse and batch > 1 and max(img_end, 1) <= p < T:
            with active_plan(None):
                pre = self._inputs_for(prompt, 1)
                pre_in = {k: (v[:, :p] if k in ("input_ids", "attention_mask", "mm_token_type_ids") else v) for k, v in pre.items()}
                if pos is not None:
                    pre_in["position_ids"] = pos[..., :p]
                cache = DynamicCache()
                model(**pre_in, cache=cache, use_cache=True, logits_to_keep=1)
            shared = DynamicCache()
            for li, layer in enumerate(cache.layers):
                shared.update(layer.keys.expand(batch, -1, -1, -1), layer.values.expand(batch, -1, -1, -1), li)
            full = self._inputs_for(prompt, batch)
            suf = {"input_ids": full["input_ids"][:, p:], "attention_mask": full["attention_mask"]}
            if pos is not None:
                suf["position_ids"] = pos[..., p:].expand(*pos.shape[:-2], batch, T - p) if pos.dim() == 3 else pos[..., p:].expand(batch, T - p)
            if "mm_token_type_ids" in full:
                suf["mm_token_type_ids"] = full["mm_token_type_ids"][:, p:]
            with active_plan(plan) as results:
                out = model(**suf, cache=shared, use_cache=True, logits_to_keep=_keep(logits_at, p, T))
            logits, computed = out.logits, list(range(p, T))
        else:
            inputs = self._inputs_for(prompt, batch)
            if pos is not None:
                inputs["position_ids"] = pos.expand(*pos.shape[:-2], batch, T) if pos.dim() == 3 else pos.expand(batch, T)
            with active_plan(plan) as results, self._shared_vision(batch if "pixel_values" in inputs else 1):
                out = model(**inputs, use_cache=False, logits_to_keep=_keep(logits_at, 0, T))
            logits, computed = out.logits, list(range(T))
        if logits_at is not None:
            logits = logits[:, : len(logits_at)]  # the LM head ran on exactly these rows
        return ForwardResult(logits=logits.float(), captures=dict(results))

    def letter_probs(self, logits_last: torch.Tensor) -> torch.Tensor:
        """P over the four option letters, renormalized over them: [B, 4]."""
        ids = self.lm.adapter.letter_token_ids(self.lm.processor)
        return torch.softmax(logits_last[:, ids].float(), dim=-1)

    def plan(self, batch: int, interventions: list[Intervention] = (), captures: list[Capture] = ()) -> ProbePlan:
        L, H = self.shape
        return ProbePlan(batch, L, H, list(interventions), list(captures))


def _keep(logits_at: list[int] | None, start: int, end: int):
    """``logits_to_keep`` for a forward computing positions [start, end): the LM head runs
    only on the requested rows (a [B, T, vocab] tensor is gigabytes on a real model)."""
    if logits_at is None:
        return 0  # all rows
    if not logits_at:
        return 1
    for i in logits_at:
        if not start <= i < end:
            raise ValueError(f"logits requested at position {i}, outside the computed positions {start}..{end - 1}")
    return torch.tensor([i - start for i in logits_at])


def _repeat_batch(out, batch: int):
    """Every tensor in ``out`` (a tensor, tuple, list, dict or ModelOutput) repeated ``batch``
    times along dim 0."""
    if isinstance(out, torch.Tensor):
        return out.repeat(batch, *([1] * (out.dim() - 1)))
    if isinstance(out, (list, tuple)) and not hasattr(out, "keys"):
        return type(out)(_repeat_batch(x, batch) for x in out)
    if dataclasses.is_dataclass(out) and hasattr(out, "keys"):  # transformers ModelOutput
        return type(out)(**{k: _repeat_batch(v, batch) for k, v in out.items()})
    if isinstance(out, dict):
        return {k: _repeat_batch(v, batch) for k, v in out.items()}
    return out
