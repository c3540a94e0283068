"""Load any supported VLM by hub id or local path, with its processor and adapter."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vheads._errors import VheadsError
from vheads.models._adapter import Adapter, adapter_for

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


@dataclass
class ProcessorBundle:
    """What the adapters need of a processor: the image processor, the tokenizer, the patch
    size, and the model config (tiled families read their token geometry from it)."""

    image_processor: Any
    tokenizer: Any
    patch_size: int
    #: the model's config, for what a family's layout needs of it (Gemma: mm_tokens_per_image)
    config: Any = None


@dataclass
class LoadedModel:
    model: Any
    processor: ProcessorBundle
    adapter: Adapter
    model_id: str
    revision: str | None
    fingerprint: str  # "hub:<id>@<revision>" or "sha256:<hash of the weight files>"
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    #: the softmax-attention layers, the only ones with heads (all layers but the linear-
    #: attention ones of a hybrid stack; see :meth:`Adapter.attention_layers`)
    attention_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.attention_layers:
            self.attention_layers = tuple(range(self.n_layers))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def n_total_heads(self) -> int:
        return len(self.attention_layers) * self.n_heads


#: where the built-in tiny model's files lie inside the installed package (they ship in the
#: wheel as package data; ``vheads.tiny`` holds the code that trains them)
TINY_WEIGHTS = Path(__file__).resolve().parent.parent / "tiny" / "weights"


def tiny_model_path() -> Path:
    """Folder of the shipped tiny model's files (loaded like any local checkpoint)."""
    if not (TINY_WEIGHTS / "config.json").exists():
        raise FileNotFoundError(
            f"the built-in tiny model's files are missing from {TINY_WEIGHTS}; rebuild them with "
            "`vheads tiny train --out <dir>` and copy the folder there"
        )
    return TINY_WEIGHTS


def resolve_model_path(model: str) -> str:
    """``tiny`` is the built-in model; anything else is a local path or a hub id."""
    if model == "tiny":
        return str(tiny_model_path())
    return model


def weights_fingerprint(path: Path) -> str:
    """SHA-256 over the names, sizes and first MiB of each weight file of a local model."""
    h = hashlib.sha256()
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        h.update(f.name.encode())
        h.update(str(f.stat().st_size).encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
    return "sha256:" + h.hexdigest()[:16]


def load_processor(path: str, revision: str | None, config) -> ProcessorBundle:
    """AutoProcessor when it loads; otherwise image processor + tokenizer alone.

    Qwen-VL processors type-check a video processor that needs torchvision; vheads only
    needs images, so a missing torchvision must not stop loading.
    """
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    image_processor = tokenizer = None
    try:
        proc = AutoProcessor.from_pretrained(path, revision=revision)
        image_processor = getattr(proc, "image_processor", None)
        tokenizer = getattr(proc, "tokenizer", None)
    except Exception:  # noqa: BLE001 - fall back to the two parts we need
        pass
    if image_processor is None:
        image_processor = AutoImageProcessor.from_pretrained(path, revision=revision)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
    patch = getattr(config.vision_config, "patch_size", 14)
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch  # InternVL: (p, p)
    return ProcessorBundle(image_processor, tokenizer, int(patch), config)


def check_device(device: str) -> str:
    """``device`` if torch can use it here; otherwise :class:`VheadsError` naming it
    (``cuda`` without CUDA, ``cuda:3`` on a 1-GPU machine, ``mps`` off Apple, a typo)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise VheadsError(f"device {device!r} is not a torch device; use cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise VheadsError(f"device {device!r}: CUDA is not available on this machine (torch {torch.__version__}); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise VheadsError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise VheadsError(f"device {device!r}: MPS is not available on this machine; use --device cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise VheadsError(f"device {device!r} is not supported; use cpu, cuda, cuda:N or mps")
    return device


def load_model(model: str = "tiny", revision: str | None = None, dtype: str = "float32", device: str = "cpu") -> LoadedModel:
    """Load a VLM (``AutoModelForImageTextToText``) and its processor, pick its adapter.

    ``model`` is ``tiny`` (built-in), a local folder saved with ``save_pretrained`` or a hub
    id. The language model's attention starts on sdpa; :func:`vheads.engine.install`
    switches it to the vheads attention function.
    """
    from transformers import AutoConfig, AutoModelForImageTextToText

    if dtype not in DTYPES:
        raise VheadsError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    check_device(device)
    path = resolve_model_path(model)
    local = os.path.isdir(path)
    if not local and (model.startswith((".", "/")) or os.sep in model and os.path.exists(os.path.dirname(model))):
        raise FileNotFoundError(f"model folder {model!r} does not exist")
    config = AutoConfig.from_pretrained(path, revision=revision)
    if getattr(config, "vision_config", None) is None:
        raise ValueError(
            f"{model!r} (model type {config.model_type!r}) has no vision config: it is not a vision-language model"
        )
    adapter = adapter_for(config.model_type)
    net = AutoModelForImageTextToText.from_pretrained(
        path, revision=revision, dtype=DTYPES[dtype], attn_implementation="sdpa"
    )
    net.to(device).eval()
    processor = load_processor(path, revision, config)
    tc = adapter.text_config(net)
    n_heads = tc.num_attention_heads
    head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // n_heads
    fp = weights_fingerprint(Path(path)) if local else f"hub:{model}@{revision or 'main'}"
    return LoadedModel(
        model=net,
        processor=processor,
        adapter=adapter,
        model_id=model,
        revision=revision,
        fingerprint=fp,
        n_layers=tc.num_hidden_layers,
        n_heads=n_heads,
        n_kv_heads=getattr(tc, "num_key_value_heads", n_heads),
        head_dim=head_dim,
        attention_layers=adapter.attention_layers(tc),
    )
