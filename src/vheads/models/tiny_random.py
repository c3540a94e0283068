"""Tiny random-initialised models of every supported family, built locally (no downloads).

Used by the tests and benchmarks, and as the starting point of the built-in tiny model.
Each builder saves a complete model folder (weights, config, tokenizer, image processor)
that :func:`vheads.models.load_model` loads like any checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import torch

SPECIAL_TOKENS = [
    "<pad>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<image>",
]
BASE_WORDS = (
    "user assistant system USER ASSISTANT what is in panel which shows the a an of cell "
    "? . , : A B C D 0 1 2 3 4 5 6 7 8 9 answer with option letter"
).split()


def build_word_tokenizer(words: list[str], special: list[str] = ()):
    """A word-level fast tokenizer: whitespace and punctuation split, one id per word.

    ``special`` adds a family's own special tokens (image / tile markers) after every
    other entry, so the ids of the shared vocabulary do not move.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for t in SPECIAL_TOKENS + BASE_WORDS + list(words) + list(special):
        vocab.setdefault(t, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="<|im_end|>",
        extra_special_tokens=SPECIAL_TOKENS[2:] + list(special),
    )
    return fast


def qwen_image_processor(patch: int = 16, merge: int = 2, min_pixels: int = 32 * 32, max_pixels: int = 512 * 512):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=2,
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )


def _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, rope_theta):
    return dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=8192,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        tie_word_embeddings=True,
    )


def build_qwen_vl(
    model_type: str = "qwen3_vl",
    words: list[str] = (),
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 16,
    rope_theta: float = 100.0,
    vision_hidden: int = 32,
    vision_depth: int = 1,
    patch: int = 16,
    seed: int = 0,
    max_pixels: int = 512 * 512,
):
    """A random Qwen2-VL / Qwen2.5-VL / Qwen3-VL with a word-level tokenizer. Returns (model, tokenizer, image_processor)."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    tok = build_word_tokenizer(list(words))
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")}
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, rope_theta)
    if model_type == "qwen3_vl":
        half = head_dim // 2
        section = [half - 2 * (half // 3), half // 3, half // 3]
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta, "mrope_section": section, "mrope_interleaved": True}
        vision = dict(depth=vision_depth, hidden_size=vision_hidden, intermediate_size=vision_hidden * 2, num_heads=2,
                      patch_size=patch, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=hidden,
                      num_position_embeddings=256, deepstack_visual_indexes=[])
    elif model_type == "qwen2_5_vl":
        half = head_dim // 2
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta, "mrope_section": [half - 2 * (half // 3), half // 3, half // 3]}
        vision = dict(depth=vision_depth, hidden_size=vision_hidden, intermediate_size=vision_hidden * 2, num_heads=2,
                      patch_size=patch, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=hidden,
                      window_size=patch * 4, fullatt_block_indexes=[0])
    elif model_type == "qwen2_vl":
        half = head_dim // 2
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta, "mrope_section": [half - 2 * (half // 3), half // 3, half // 3]}
        vision = dict(depth=vision_depth, embed_dim=vision_hidden, hidden_size=hidden, num_heads=2, mlp_ratio=2,
                      patch_size=patch, spatial_merge_size=2, temporal_patch_size=2)
    else:
        raise ValueError(f"not a Qwen-VL model type: {model_type!r}")
    config = AutoConfig.for_model(
        model_type,
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    return model.eval(), tok, qwen_image_processor(patch=patch, max_pixels=max_pixels)


def build_llava(words: list[str] = (), hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                head_dim: int = 16, image_size: int = 56, patch: int = 14, seed: int = 0):
    """A random LLaVA (CLIP vision tower + Llama) with a word-level tokenizer."""
    from transformers import AutoModelForImageTextToText, LlavaConfig
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil as CLIPImageProcessor

    tok = build_word_tokenizer(list(words))
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, 10000.0)
    text["model_type"] = "llama"
    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=image_size, patch_size=patch, projection_dim=32)
    n_tokens = (image_size // patch) ** 2
    config = LlavaConfig(text_config=text, vision_config=vision, image_token_id=tok.convert_tokens_to_ids("<image>"),
                         image_seq_length=n_tokens, vision_feature_layer=-1, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    ip = CLIPImageProcessor(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size},
                            do_center_crop=True, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return model.eval(), tok, ip


def build_internvl(words: list[str] = (), hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                   head_dim: int = 16, tile: int = 64, patch: int = 8, max_tiles: int = 4, seed: int = 0):
    """A random InternVL (InternViT + Qwen2) tiling into up to ``max_tiles`` tiles of
    ``tile`` pixels plus a thumbnail, (tile / patch / 2)² tokens per view."""
    from transformers import AutoModelForImageTextToText, InternVLConfig
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    tok = build_word_tokenizer(list(words), special=["<img>", "</img>", "<IMG_CONTEXT>"])
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, 10000.0)
    text["model_type"] = "qwen2"
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  image_size=[tile, tile], patch_size=[patch, patch])
    config = InternVLConfig(text_config=text, vision_config=vision, image_token_id=tok.convert_tokens_to_ids("<IMG_CONTEXT>"),
                            image_seq_length=(tile // patch // 2) ** 2, downsample_ratio=0.5, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    ip = GotOcr2ImageProcessorPil(size={"height": tile, "width": tile}, crop_to_patches=True, min_patches=1,
                                  max_patches=max_tiles, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return model.eval(), tok, ip


PINPOINTS = [[56, 112], [112, 56], [112, 112], [56, 168], [168, 56]]


def build_llava_anyres(model_type: str = "llava_next", words: list[str] = (), hidden: int = 64, layers: int = 2, heads: int = 4,
                       kv_heads: int = 2, head_dim: int = 16, image_size: int = 56, patch: int = 14,
                       vision_aspect_ratio: str = "anyres_max_9", seed: int = 0):
    """A random LLaVA-NeXT (CLIP + Llama) or LLaVA-OneVision (SigLIP + Qwen2) tiling over
    ``PINPOINTS`` (up to 3 tiles of ``image_size`` pixels) plus the base image. OneVision
    shrinks a joined tile grid above ``anyres_max_N`` tiles' worth of tokens."""
    from transformers import AutoModelForImageTextToText, LlavaNextConfig, LlavaOnevisionConfig

    tok = build_word_tokenizer(list(words))
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, 10000.0)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  image_size=image_size, patch_size=patch)
    common = dict(text_config=text, image_token_id=tok.convert_tokens_to_ids("<image>"), image_grid_pinpoints=PINPOINTS,
                  vision_feature_layer=-1, tie_word_embeddings=True)
    if model_type == "llava_next":
        from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

        text["model_type"] = "llama"
        config = LlavaNextConfig(vision_config={**vision, "model_type": "clip_vision_model", "projection_dim": 32},
                                 vision_feature_select_strategy="default", **common)
        ip = LlavaNextImageProcessorPil(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size},
                                        image_grid_pinpoints=PINPOINTS, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    elif model_type == "llava_onevision":
        from transformers.models.llava_onevision.image_processing_pil_llava_onevision import LlavaOnevisionImageProcessorPil

        text["model_type"] = "qwen2"
        config = LlavaOnevisionConfig(vision_config={**vision, "model_type": "siglip_vision_model", "vision_use_head": False},
                                      vision_feature_select_strategy="full", vision_aspect_ratio=vision_aspect_ratio, **common)
        ip = LlavaOnevisionImageProcessorPil(size={"height": image_size, "width": image_size}, image_grid_pinpoints=PINPOINTS,
                                             image_mean=[0.5] * 3, image_std=[0.5] * 3)
    else:
        raise ValueError(f"not an any-resolution LLaVA model type: {model_type!r}")
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    return model.eval(), tok, ip


def build_idefics3(model_type: str = "idefics3", words: list[str] = (), hidden: int = 64, layers: int = 2, heads: int = 4,
                   kv_heads: int = 2, head_dim: int = 16, view: int = 64, patch: int = 8, seed: int = 0):
    """A random Idefics3 or SmolVLM (SigLIP-style encoder + Llama) splitting images into
    sub-images of ``view`` pixels plus a global image, (view / patch / 2)² tokens per view."""
    from transformers import AutoModelForImageTextToText, Idefics3Config, SmolVLMConfig

    markers = ["<fake_token_around_image>", "<global-img>", "<end_of_utterance>"]
    markers += [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    tok = build_word_tokenizer(list(words), special=markers)
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, 10000.0)
    text["model_type"] = "llama"
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=view, patch_size=patch)
    cls = {"idefics3": Idefics3Config, "smolvlm": SmolVLMConfig}.get(model_type)
    if cls is None:
        raise ValueError(f"not an Idefics3 / SmolVLM model type: {model_type!r}")
    config = cls(text_config=text, vision_config=vision, image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=2,
                 tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    if model_type == "idefics3":
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil as Processor
    else:
        from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil as Processor
    ip = Processor(size={"longest_edge": 2 * view}, max_image_size={"longest_edge": view}, do_image_splitting=True,
                   image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return model.eval(), tok, ip


def build_mistral3(words: list[str] = (), hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                   head_dim: int = 16, patch: int = 8, longest_edge: int = 96, seed: int = 0):
    """A random Mistral 3 (Pixtral encoder + Mistral), image tokens of 2 x 2 patches."""
    from transformers import AutoModelForImageTextToText, Mistral3Config
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    tok = build_word_tokenizer(list(words), special=["[IMG]", "[IMG_BREAK]", "[IMG_END]", "[INST]", "[/INST]"])
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, 10000.0)
    text.update(model_type="mistral", sliding_window=None)
    vision = dict(model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  head_dim=16, image_size=longest_edge, patch_size=patch)
    config = Mistral3Config(text_config=text, vision_config=vision, image_token_index=tok.convert_tokens_to_ids("[IMG]"),
                            spatial_merge_size=2, vision_feature_layer=-1, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    ip = PixtralImageProcessorPil(size={"longest_edge": longest_edge}, patch_size={"height": patch, "width": patch},
                                  image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return model.eval(), tok, ip


def build_ovis2(words: list[str] = (), hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                head_dim: int = 16, tile: int = 64, patch: int = 8, max_tiles: int = 4, seed: int = 0):
    """A random Ovis2 (visual tokenizer over a 64-entry visual vocabulary + Qwen2) tiling into
    up to ``max_tiles`` tiles of ``tile`` pixels after a thumbnail, (tile / patch / 2)² tokens per view."""
    from transformers import AutoModelForImageTextToText, Ovis2Config
    from transformers.models.ovis2.image_processing_pil_ovis2 import Ovis2ImageProcessorPil

    from vheads.models.ovis2 import INDICATORS

    tok = build_word_tokenizer(list(words), special=["<IMG_ATOM>", *INDICATORS])
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, 10000.0)
    text["model_type"] = "qwen2"
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=tile,
                  patch_size=patch, vocab_size=64, hidden_stride=2, num_visual_indicator_tokens=len(INDICATORS))
    config = Ovis2Config(text_config=text, vision_config=vision, image_token_id=tok.convert_tokens_to_ids("<IMG_ATOM>"),
                         visual_indicator_token_ids=[tok.convert_tokens_to_ids(t) for t in INDICATORS],
                         vocab_size=len(tok), hidden_size=hidden, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    ip = Ovis2ImageProcessorPil(size={"height": tile, "width": tile}, crop_to_patches=True, min_patches=1, max_patches=max_tiles,
                                image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return model.eval(), tok, ip


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
    "llava": build_llava,
    "internvl": build_internvl,
    "llava_next": lambda **kw: build_llava_anyres("llava_next", **kw),
    "llava_onevision": lambda **kw: build_llava_anyres("llava_onevision", **kw),
    "idefics3": lambda **kw: build_idefics3("idefics3", **kw),
    "smolvlm": lambda **kw: build_idefics3("smolvlm", **kw),
    "mistral3": build_mistral3,
    "ovis2": build_ovis2,
}


def build_tiny_random(model_type: str, out: str | Path, **kwargs) -> Path:
    """Build and save a tiny random model of ``model_type``; returns its folder."""
    if model_type not in FAMILY_BUILDERS:
        raise ValueError(f"no tiny builder for {model_type!r}; have {', '.join(FAMILY_BUILDERS)}")
    return save_model_folder(out, *FAMILY_BUILDERS[model_type](**kwargs))
