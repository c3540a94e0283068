"""An independent eager reference for DESIGN.md's capture, mask and steer definitions.

The doctor checks the engine against this, never against the engine itself: every layer's
full attention is computed with a hand-written softmax (float64) and the interventions are
applied from plain Python descriptions (sets of heads, rows, keys). It shares no code with
:mod:`vheads.engine` and is registered under its own attention name for one forward.

Which keys a query may see is written here by hand from the modeling code of each family
(:func:`model_mask`), not read from the mask transformers passes: causal, plus — where the
family has them — bidirectional image blocks (Gemma 3: ``token_type_ids``) and sliding
windows (``k > q − sliding_window`` on ``sliding_attention`` layers).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

REF = "vheads_doctor_reference"
#: families whose image tokens attend to each other bidirectionally (read in their modeling code):
#: Gemma 3 on every layer, Gemma 4 (``use_bidirectional_attention = "vision"``) on sliding layers only
BIDIRECTIONAL_IMAGE = {"gemma3": ("sliding_attention", "full_attention"), "gemma4": ("sliding_attention",)}
#: text model types whose attention logits are ``q · k`` unscaled (Gemma 4 RMS-norms q and k instead)
UNIT_SCALE = {"gemma4_text"}


@dataclass
class Action:
    """One intervention of one batch row, in plain terms.

    ``kind`` ``"mask"``: logit −∞ for every (row, key) of ``rows`` × ``keys`` of each head of
    ``heads``; ``"steer"``: +β on ``target`` keys and −β on the other keys of ``image``."""

    kind: str
    heads: list[tuple[int, int]]
    rows: list[int]
    keys: list[int] = ()
    image: list[int] = ()
    target: frozenset[int] = frozenset()
    beta: float = 0.0


_SPEC: dict = {}


def model_mask(model, image_positions: list[int], T: int) -> dict[int, torch.Tensor]:
    """Allowed keys per layer, ``{layer: bool [T, T]}`` (query row, key), by hand."""
    tc = model.config.text_config
    q = torch.arange(T)[:, None]
    k = torch.arange(T)[None, :]
    causal = k <= q
    block = torch.zeros(T, T, dtype=torch.bool)
    bidirectional = BIDIRECTIONAL_IMAGE.get(model.config.model_type, ())
    if model.config.model_type == "gemma4" and tc.use_bidirectional_attention != "vision":
        bidirectional = ()
    if bidirectional and image_positions:
        img = torch.zeros(T, dtype=torch.bool)
        img[image_positions] = True
        block = img[:, None] & img[None, :]  # one image = one block: all of its tokens see each other
    types = getattr(tc, "layer_types", None) or ["full_attention"] * tc.num_hidden_layers
    out = {}
    for layer, kind in enumerate(types):
        allowed = causal | block if kind in bidirectional else causal
        out[layer] = allowed & (k > q - tc.sliding_window) if kind == "sliding_attention" else allowed
    return out


def logit_scale(text_config, head_dim: int) -> float:
    """The factor on ``q · k``, read by hand from the families' modeling code: 1 for Gemma 4
    (q and k RMS-normed), ``query_pre_attn_scalar ** -0.5`` where the config has one (Gemma 2 / 3:
    Gemma-3-27B uses 168 with head_dim 128), else ``1 / sqrt(head_dim)``."""
    if text_config.model_type in UNIT_SCALE:
        return 1.0
    scalar = getattr(text_config, "query_pre_attn_scalar", None)
    return 1 / math.sqrt(scalar if scalar else head_dim)


def reference_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Eager attention in float64 with the actions of :data:`_SPEC` applied by hand."""
    B, H, T, D = query.shape
    rep = H // key.shape[1]
    k = torch.cat([key[:, i // rep : i // rep + 1] for i in range(H)], dim=1)  # [B, H, T, D]: GQA by hand
    v = torch.cat([value[:, i // rep : i // rep + 1] for i in range(H)], dim=1)
    scale = logit_scale(module.config, D)
    logits = (query.double() @ k.double().transpose(-1, -2)) * scale  # [B, H, T, T]
    layer = module.layer_idx
    dev = logits.device
    allowed = _SPEC["allowed"][layer].to(dev)
    logits = logits.masked_fill(~allowed, -math.inf)
    for b, actions in enumerate(_SPEC["per_row"]):
        for act in actions:
            rows = torch.tensor(act.rows, dtype=torch.long, device=dev)[:, None]  # [Q, 1]
            for (l, h) in act.heads:
                if l != layer:
                    continue
                if act.kind == "mask":
                    logits[b, h, rows, torch.tensor(list(act.keys), dtype=torch.long, device=dev)[None, :]] = -math.inf
                else:
                    sign = torch.tensor([act.beta if t in act.target else -act.beta for t in act.image], dtype=logits.dtype, device=dev)
                    keys = torch.tensor(list(act.image), dtype=torch.long, device=dev)[None, :]
                    logits[b, h, rows, keys] = logits[b, h, rows, keys] + sign
    m = logits.max(-1, keepdim=True).values
    p = torch.exp(logits - m)
    p = p / p.sum(-1, keepdim=True)
    p = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(p), p)  # a row with every key hidden attends nowhere
    out = (p @ v.double()).to(query.dtype)
    return out.transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def reference_mode(model, per_row: list[list[Action]], allowed: dict[int, torch.Tensor]):
    """Inside the block the language model runs :func:`reference_attention` (batch row b
    applies ``per_row[b]``); the caller re-installs its own attention afterwards."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(REF, reference_attention)
    AttentionMaskInterface.register(REF, sdpa_mask)
    _SPEC.update(per_row=per_row, allowed=allowed)
    model.set_attn_implementation({name: (REF if name == "text_config" else "sdpa") for name in model.config.sub_configs})
    try:
        yield
    finally:
        _SPEC.clear()


def eager_attentions(model, inputs: dict) -> list[torch.Tensor]:
    """transformers' own eager attention maps (``output_attentions``): softmax layers x [H, T, T]."""
    model.set_attn_implementation({name: "eager" for name in model.config.sub_configs})
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    return [a[0].double().cpu() for a in out.attentions]


def plain_logits(model, inputs: dict) -> torch.Tensor:
    """The model as transformers runs it (sdpa everywhere, no vheads attention): [B, T, V]."""
    model.set_attn_implementation({name: "sdpa" for name in model.config.sub_configs})
    with torch.no_grad():
        return model(**inputs).logits
