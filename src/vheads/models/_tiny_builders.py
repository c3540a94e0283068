"""One builder per family of tiny random model: ``build_<family>(words=..., hidden=..., layers=...,
...)`` returns ``(model, tokenizer, image_processor)``, the model random-initialised from
``seed`` and in eval mode. Their registry and the saved folder: :mod:`vheads.models.tiny_random`.
"""

from __future__ import annotations

import torch

from vheads.models._tiny_text import (
    GEMMA3_CHAT_TEMPLATE, QWEN2_VL_CHAT_TEMPLATE, _text_kwargs, build_qwen35_tokenizer, build_word_tokenizer,
)


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
    intermediate: int | None = None,
    vision_heads: int = 2,
    vision_intermediate: int | None = None,
    deepstack: tuple[int, ...] = (),
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    full_attention_interval: int = 2,
):
    """A random Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Qwen3-VL-MoE / Qwen3.5 (dense, MoE) with a
    word-level tokenizer. Returns (model, tokenizer, image_processor).

    MLP widths default to 2×hidden (``intermediate``, ``vision_intermediate``);
    ``deepstack`` lists the Qwen3-VL vision blocks whose features are added to the first
    language-model layers; ``dtype`` and ``device`` say where the weights are initialised.
    Qwen3.5 stacks are hybrid: layer i is softmax attention when ``(i + 1) %
    full_attention_interval == 0``, Gated DeltaNet linear attention otherwise."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    tok = build_qwen35_tokenizer(list(words)) if model_type.startswith("qwen3_5") else build_word_tokenizer(list(words))
    if model_type in ("qwen2_vl", "qwen2_5_vl"):
        tok.chat_template = QWEN2_VL_CHAT_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")}
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, rope_theta)
    if intermediate:
        text["intermediate_size"] = intermediate
    v_inter = vision_intermediate or vision_hidden * 2
    if model_type in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
        half = head_dim // 2
        section = [half - 2 * (half // 3), half // 3, half // 3]
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta, "mrope_section": section, "mrope_interleaved": True}
        vision = dict(depth=vision_depth, hidden_size=vision_hidden, intermediate_size=v_inter, num_heads=vision_heads,
                      patch_size=patch, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=hidden,
                      num_position_embeddings=256)
        if model_type.startswith("qwen3_vl"):
            vision["deepstack_visual_indexes"] = list(deepstack)
        if model_type.endswith("_moe"):  # 4 small experts, 2 per token (a shared expert too on Qwen3.5-MoE)
            text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=hidden, decoder_sparse_step=1)
            if model_type == "qwen3_5_moe":
                text["shared_expert_intermediate_size"] = hidden
        if model_type.startswith("qwen3_5"):
            # hybrid stack: Gated DeltaNet (linear attention, no attention map) layers and every
            # `full_attention_interval`-th layer softmax attention, as in the released models
            text.update(layer_types=[("full_attention" if (i + 1) % full_attention_interval == 0 else "linear_attention") for i in range(layers)],
                        linear_conv_kernel_dim=4, linear_key_head_dim=head_dim, linear_value_head_dim=head_dim,
                        linear_num_key_heads=2, linear_num_value_heads=4)
            text["rope_parameters"]["partial_rotary_factor"] = 1.0
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
        video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
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


GEMMA_TOKENS = ("<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>")


def build_gemma3(words: list[str] = (), hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                 head_dim: int = 16, image_size: int = 128, patch: int = 8, tokens_per_side: int = 8,
                 sliding_window: int = 12, seed: int = 0):
    """A random Gemma 3 (SigLIP tower, pooled to ``tokens_per_side``² image tokens) with a
    word-level tokenizer.

    Layer types alternate sliding / full attention, and the sliding window (12 tokens) is
    shorter than the 64-token image block, so the tiny model exercises every part of
    Gemma's mask: causal text, bidirectional attention inside the image block, and the
    window cutting both."""
    from transformers import AutoModelForImageTextToText, Gemma3Config
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    tok = build_word_tokenizer(list(words), GEMMA_TOKENS)
    tok.bos_token = "<bos>"  # the template writes it
    tok.chat_template = GEMMA3_CHAT_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in GEMMA_TOKENS}
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, 10000.0)
    text.update(model_type="gemma3_text", query_pre_attn_scalar=head_dim, sliding_window=sliding_window,
                layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
                bos_token_id=ids["<bos>"], eos_token_id=ids["<end_of_turn>"])
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, image_size=image_size, patch_size=patch)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=tokens_per_side ** 2,
                          boi_token_index=ids["<start_of_image>"], eoi_token_index=ids["<end_of_image>"],
                          image_token_index=ids["<image_soft_token>"], tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    ip = Gemma3ImageProcessorPil(size={"height": image_size, "width": image_size}, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                 do_pan_and_scan=False)
    return model.eval(), tok, ip


GEMMA4_TOKENS = ("<bos>", "<|turn>", "<turn|>", "<|image>", "<image|>", "<|image|>", "<|audio>", "<audio|>", "<|audio|>",
                 "<|channel>", "<channel|>")


def build_gemma4(words: list[str] = (), hidden: int = 64, layers: int = 6, heads: int = 4, kv_heads: int = 2,
                 head_dim: int = 16, global_head_dim: int = 32, patch: int = 4, sliding_window: int = 12,
                 kv_shared_layers: int = 2, per_layer_dim: int = 8, seed: int = 0):
    """A random Gemma 4 with every layer mechanism of the released models, small.

    - layer types ``s s f s s f`` (the last layer is full attention);
    - full layers with their own head size (``global_head_dim``), one KV head whose values
      are its keys (``attention_k_eq_v``), proportional RoPE;
    - the last ``kv_shared_layers`` layers reuse the keys and values of the last earlier
      layer of their type (KV sharing: no k/v projections of their own);
    - per-layer embeddings (``hidden_size_per_layer_input``), attention scale 1 (q/k norms),
      final logit soft-capping;
    - ``use_bidirectional_attention = "vision"``: image tokens see each other only in
      sliding layers, whose 12-token window is shorter than the image block;
    - a variable-resolution vision tower (aspect-preserving resize, 3 x 3 pooling, at most
      70 soft tokens)."""
    from transformers import AutoModelForImageTextToText
    from transformers.models.gemma4.configuration_gemma4 import Gemma4Config
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    tok = build_word_tokenizer([*words, "model", "thought"], GEMMA4_TOKENS)  # role word of <|turn>model, channel of <|channel>thought
    ids = {t: tok.convert_tokens_to_ids(t) for t in GEMMA4_TOKENS}
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, 10000.0)
    text.pop("max_position_embeddings")
    text.update(model_type="gemma4_text", sliding_window=sliding_window, global_head_dim=global_head_dim,
                layer_types=["full_attention" if (i + 1) % 3 == 0 else "sliding_attention" for i in range(layers)],
                num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=kv_shared_layers,
                hidden_size_per_layer_input=per_layer_dim, vocab_size_per_layer_input=len(tok),
                final_logit_softcapping=30.0, use_bidirectional_attention="vision",
                bos_token_id=ids["<bos>"], eos_token_id=ids["<turn|>"])
    vision = dict(model_type="gemma4_vision", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=16, patch_size=patch, pooling_kernel_size=3, position_embedding_size=256)
    config = Gemma4Config(text_config=text, vision_config=vision, audio_config=None, boi_token_id=ids["<|image>"],
                          eoi_token_id=ids["<image|>"], image_token_id=ids["<|image|>"], video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
                          # audio tokens of their own, never <unk> (the model would fill an <unk> with audio embeddings)
                          audio_token_id=ids["<|audio|>"], boa_token_id=ids["<|audio>"], eoa_token_index=ids["<audio|>"], tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    ip = Gemma4ImageProcessorPil(patch_size=patch, max_soft_tokens=70, pooling_kernel_size=3)
    return model.eval(), tok, ip


GLM_TOKENS = ("[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<|begin_of_image|>", "<|end_of_image|>", "<|image|>",
              "<|begin_of_video|>", "<|end_of_video|>", "<|video|>")


def build_glm4v(words: list[str] = (), hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                head_dim: int = 16, vision_hidden: int = 32, patch: int = 14, seed: int = 0, max_pixels: int = 448 * 448):
    """A random GLM-4V (its own vision tower, 3D M-RoPE on half of each head's dims) with a
    word-level tokenizer and GLM's image processor (resize to multiples of patch · merge)."""
    from transformers import AutoConfig, AutoModelForImageTextToText
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

    tok = build_word_tokenizer(list(words), GLM_TOKENS)
    ids = {t: tok.convert_tokens_to_ids(t) for t in GLM_TOKENS}
    text = _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, 10000.0)
    text.pop("head_dim")
    rot = head_dim // 2  # partial rotary: half of each head's dims, in 3 M-RoPE sections
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                               "mrope_section": [rot // 2 - 2 * (rot // 6), rot // 6, rot // 6]}
    vision = dict(depth=1, hidden_size=vision_hidden, intermediate_size=vision_hidden * 2, num_heads=2, image_size=patch * 8,
                  patch_size=patch, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=hidden)
    config = AutoConfig.for_model("glm4v", text_config=text, vision_config=vision, image_token_id=ids["<|image|>"],
                                  video_token_id=ids["<|video|>"], image_start_token_id=ids["<|begin_of_image|>"],
                                  image_end_token_id=ids["<|end_of_image|>"], video_start_token_id=ids["<|begin_of_video|>"],
                                  video_end_token_id=ids["<|end_of_video|>"], tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    ip = Glm4vImageProcessorPil(patch_size=patch, merge_size=2, temporal_patch_size=2,
                                size={"shortest_edge": 28 * 28, "longest_edge": max_pixels},
                                image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return model.eval(), tok, ip


def build_internvl(words: list[str] = (), hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                   head_dim: int = 16, tile: int = 64, patch: int = 8, max_tiles: int = 4, seed: int = 0):
    """A random InternVL (InternViT + Qwen2) tiling into up to ``max_tiles`` tiles of
    ``tile`` pixels plus a thumbnail, (tile / patch / 2)² tokens per view."""
    from transformers import AutoModelForImageTextToText, InternVLConfig
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    tok = build_word_tokenizer(list(words), extra_special=["<img>", "</img>", "<IMG_CONTEXT>"])
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
    tok = build_word_tokenizer(list(words), extra_special=markers)
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

    tok = build_word_tokenizer(list(words), extra_special=["[IMG]", "[IMG_BREAK]", "[IMG_END]", "[INST]", "[/INST]"])
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

    tok = build_word_tokenizer(list(words), extra_special=["<IMG_ATOM>", *INDICATORS])
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
