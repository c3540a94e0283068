"""Run probe plans on a loaded model: single forwards, batched head-sets, prefix reuse."""

from __future__ import annotations

from dataclasses import dataclass

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
        dev = self.lm.device
        inputs = {}
        for k, v in prompt.inputs.items():
            if k in ("pixel_values", "image_grid_thw"):
                inputs[k] = torch.cat([v] * batch) if batch > 1 else v
            else:
                inputs[k] = v.expand(batch, *v.shape[1:]) if batch > 1 else v
            inputs[k] = inputs[k].to(dev)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.lm.model.dtype)
        return inputs

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
        pos = self.lm.adapter.position_ids(model, {k: v.to(self.lm.device) for k, v in prompt.inputs.items()})
        # the prefix must hold every image token: the suffix runs without pixel values
        img_end = int(prompt.layout.image_positions.max()) + 1 if len(prompt.layout.image_positions) else 0
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
                out = model(**suf, cache=shared, use_cache=True)
            logits, computed = out.logits, list(range(p, T))
        else:
            inputs = self._inputs_for(prompt, batch)
            if pos is not None:
                inputs["position_ids"] = pos.expand(*pos.shape[:-2], batch, T) if pos.dim() == 3 else pos.expand(batch, T)
            with active_plan(plan) as results:
                out = model(**inputs, use_cache=False)
            logits, computed = out.logits, list(range(T))
        if logits_at is not None:
            where = [computed.index(i) for i in logits_at]
            logits = logits[:, where]
        return ForwardResult(logits=logits.float(), captures=dict(results))

    def letter_probs(self, logits_last: torch.Tensor) -> torch.Tensor:
        """P over the four option letters, renormalized over them: [B, 4]."""
        ids = self.lm.adapter.letter_token_ids(self.lm.processor)
        return torch.softmax(logits_last[:, ids].float(), dim=-1)

    def plan(self, batch: int, interventions: list[Intervention] = (), captures: list[Capture] = ()) -> ProbePlan:
        L, H = self.shape
        return ProbePlan(batch, L, H, list(interventions), list(captures))
