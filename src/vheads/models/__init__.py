"""Model loading, family adapters and token layouts."""

from vheads.models import internvl as _internvl  # noqa: F401  (registers the adapter)
from vheads.models import llava as _llava  # noqa: F401
from vheads.models import llava_next as _llava_next  # noqa: F401
from vheads.models import mistral3 as _mistral3  # noqa: F401
from vheads.models import ovis2 as _ovis2  # noqa: F401
from vheads.models import smolvlm as _smolvlm  # noqa: F401
from vheads.models import qwen_vl as _qwen_vl  # noqa: F401
from vheads.models import qwen3_5 as _qwen3_5  # noqa: F401
from vheads.models import gemma3 as _gemma3  # noqa: F401
from vheads.models import gemma4 as _gemma4  # noqa: F401
from vheads.models import glm4v as _glm4v  # noqa: F401
from vheads._layers import check_attention_layers
from vheads.models._adapter import (ADAPTER_REGISTRY, ADAPTERS, Adapter, ModelFamily, adapter_for, check_prompt_setup, describe_adapters,
                                    format_options, prompt_examples, read_chat_template, register_adapter, render_chat)
from vheads.models._layout import ImageBlock, Prompt, RegionTokens, TokenLayout
from vheads.models._loading import check_device, check_load_options, check_model_folder, check_processor_files, DEVICE_MAP_STRATEGIES, QUANTIZATIONS, TINY_WEIGHTS, LoadedModel, ProcessorBundle, load_model, load_processor, preflight_prompts, resolve_model_path, tiny_model_path, weights_fingerprint

__all__ = [
    "check_attention_layers",
    "check_device",
    "check_load_options",
    "check_model_folder",
    "check_processor_files",
    "DEVICE_MAP_STRATEGIES",
    "QUANTIZATIONS",
    "ADAPTER_REGISTRY",
    "ADAPTERS",
    "Adapter",
    "ModelFamily",
    "ImageBlock",
    "LoadedModel",
    "ProcessorBundle",
    "Prompt",
    "RegionTokens",
    "TokenLayout",
    "adapter_for",
    "describe_adapters",
    "check_prompt_setup",
    "load_processor",
    "preflight_prompts",
    "prompt_examples",
    "read_chat_template",
    "render_chat",
    "format_options",
    "load_model",
    "register_adapter",
    "resolve_model_path", "weights_fingerprint",
    "TINY_WEIGHTS",
    "tiny_model_path",
]
