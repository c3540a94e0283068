"""Tiny random-initialised models of every supported family, built locally (no downloads).

Used by the tests and benchmarks, and as the starting point of the built-in tiny model.
Each builder saves a complete model folder (weights, config, tokenizer, image processor)
that :func:`vheads.models.load_model` loads like any checkpoint.

Chat templates: a family whose released checkpoints ship a chat template that could be
had here gets a faithful copy of it (Qwen2-VL / Qwen2.5-VL: :data:`QWEN2_VL_CHAT_TEMPLATE`,
with its default system turn; Gemma 3: :data:`GEMMA3_CHAT_TEMPLATE`), so the template path of :meth:`vheads.models.Adapter.build`
runs on it; the other families' tokenizers carry none, so they exercise the adapters'
hand-written fallback.

The builders are :mod:`vheads.models._tiny_builders`, the shared tokenizers and templates
:mod:`vheads.models._tiny_text`; every name is re-exported here.
"""

from __future__ import annotations

from pathlib import Path

import torch

from vheads.models._tiny_builders import (  # noqa: F401 - re-exported
    GEMMA4_TOKENS, GEMMA_TOKENS, GLM_TOKENS, PINPOINTS, build_gemma3, build_gemma4, build_glm4v, build_idefics3, build_internvl,
    build_llava, build_llava_anyres, build_mistral3, build_ovis2, build_qwen_vl, qwen_image_processor,
)
from vheads.models._tiny_text import (  # noqa: F401 - re-exported
    BASE_WORDS, GEMMA3_CHAT_TEMPLATE, QWEN2_VL_CHAT_TEMPLATE, SPECIAL_TOKENS, _text_kwargs, build_qwen35_tokenizer,
    build_word_tokenizer,
)


def save_model_folder(out: str | Path, model, tokenizer, image_processor) -> Path:
    """Write a loadable model folder (``save_pretrained`` of each part)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    image_processor.save_pretrained(out)
    return out


FAMILY_BUILDERS = {
    "qwen2_vl": lambda **kw: build_qwen_vl("qwen2_vl", **kw),
    "qwen2_5_vl": lambda **kw: build_qwen_vl("qwen2_5_vl", **kw),
    "qwen3_vl": lambda **kw: build_qwen_vl("qwen3_vl", **kw),
    "qwen3_vl_moe": lambda **kw: build_qwen_vl("qwen3_vl_moe", **kw),
    "qwen3_5": lambda **kw: build_qwen_vl("qwen3_5", **{"layers": 4, **kw}),
    "qwen3_5_moe": lambda **kw: build_qwen_vl("qwen3_5_moe", **{"layers": 4, **kw}),
    "llava": build_llava,
    "gemma3": build_gemma3,
    "gemma4": build_gemma4,
    "glm4v": build_glm4v,
    "internvl": build_internvl,
    "llava_next": lambda **kw: build_llava_anyres("llava_next", **kw),
    "llava_onevision": lambda **kw: build_llava_anyres("llava_onevision", **kw),
    "idefics3": lambda **kw: build_idefics3("idefics3", **kw),
    "smolvlm": lambda **kw: build_idefics3("smolvlm", **kw),
    "mistral3": build_mistral3,
    "ovis2": build_ovis2,
}


def randomize_constant_weights(model, seed: int = 0) -> list[str]:
    """Give every weight matrix that a family initialises to one constant a random init
    (normal, the config's ``initializer_range``); returns the names changed.

    A trained checkpoint never has them, but ``from_config`` does: Gemma 3's
    ``multi_modal_projector.mm_input_projection_weight`` starts at zero (every image then
    embeds identically, so a region or pixel test passes whatever the layout does);
    InternVL's ``cls_token`` / ``position_embeddings`` start at zero and Gemma 4's
    ``position_embedding_table`` at one (no token knows where it sits). Vectors (biases,
    norm scales) are left alone."""
    std = getattr(model.config, "initializer_range", None) or getattr(getattr(model.config, "text_config", None), "initializer_range", 0.02)
    gen = torch.Generator().manual_seed(seed + 7919)
    changed = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.detach().flatten()
            if p.ndim >= 2 and flat.numel() > 1 and bool((flat == flat[0]).all()):
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype) * std)
                changed.append(name)
    return changed


def build_tiny_random(model_type: str, out: str | Path, **kwargs) -> Path:
    """Build and save a tiny random model of ``model_type`` (no weight matrix left constant:
    :func:`randomize_constant_weights`); returns its folder."""
    if model_type not in FAMILY_BUILDERS:
        raise ValueError(f"no tiny builder for {model_type!r}; have {', '.join(FAMILY_BUILDERS)}")
    model, tokenizer, image_processor = FAMILY_BUILDERS[model_type](**kwargs)
    randomize_constant_weights(model, kwargs.get("seed", 0))
    return save_model_folder(out, model, tokenizer, image_processor)
