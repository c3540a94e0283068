"""Load any supported VLM by hub id or local path, with its processor and adapter."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vheads._errors import VheadsError
from vheads._io import read_json
from vheads.models._adapter import ADAPTER_REGISTRY, Adapter, adapter_for, check_prompt_setup, read_chat_template

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
#: weight quantizations bitsandbytes runs (CUDA only): the name vheads takes -> BitsAndBytesConfig flag
QUANTIZATIONS = {"4bit": "load_in_4bit", "8bit": "load_in_8bit"}
#: ``device_map`` strategies of transformers/accelerate (anything else is one device, e.g. ``cuda:1``)
DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


@dataclass
class ProcessorBundle:
    """What the adapters need of a processor: the image processor, the tokenizer, the patch
    size, the model config (tiled families read their token geometry from it) and how
    prompts are rendered (chat template, system prompt)."""

    image_processor: Any
    tokenizer: Any
    patch_size: int
    #: the model's config, for what a family's layout needs of it (Gemma: mm_tokens_per_image)
    config: Any = None
    #: the chat template prompts are rendered with (a ``chat_template`` file's or the
    #: checkpoint's); None: the tokenizer's, else the adapter's hand-written fallback
    chat_template: str | None = None
    #: a system turn put before the user message; None: whatever the template does without one
    system_prompt: str | None = None


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
    n_kv_heads: int  # of the first softmax layer (Gemma 4: full layers have their own, see per_layer_config)
    head_dim: int  # likewise
    #: the softmax-attention layers, the only ones with heads (all layers but the linear-
    #: attention ones of a hybrid stack; see :meth:`Adapter.attention_layers`)
    attention_layers: tuple[int, ...] = ()
    #: the resolved (absolute) folder of a local checkpoint other than the built-in tiny
    #: model; None for ``tiny`` and a hub id (which find themselves again by their id)
    path: str | None = None

    def record(self) -> dict[str, Any]:
        """What a head-set file stores of this model (its ``model`` key): the id as given, the
        revision, the fingerprint that proves a later load is the same model, the shape, and
        for a local folder its resolved ``path``, so the file finds the model again from any
        working folder (:func:`vheads.discovery.model_to_load`)."""
        rec: dict[str, Any] = {"id": self.model_id, "revision": self.revision, "fingerprint": self.fingerprint,
                               "n_layers": self.n_layers, "n_heads": self.n_heads}
        if self.path is not None:
            rec["path"] = self.path
        if len(self.attention_layers) < self.n_layers:  # hybrid: only these layers have heads
            rec["attention_layers"] = list(self.attention_layers)
        return rec

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


def _safetensors_problem(f: Path) -> str | None:
    """Why ``f`` is not a whole safetensors file (read from its header alone), or None.

    Layout: 8 bytes little-endian header length N, N bytes of JSON ``{name: {"dtype",
    "shape", "data_offsets": [begin, end]}, …}``, then the data, which the offsets must
    cover exactly (a truncated download ends before the last tensor)."""
    size = f.stat().st_size
    if size < 8:
        return f"{size} bytes, shorter than a safetensors header"
    with open(f, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if n > size - 8:
            return f"its header claims {n:,} bytes but the file holds {size:,} (truncated?)"
        try:
            header = json.loads(fh.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "its header is not JSON"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    ends = [t.get("data_offsets", [0, 0])[1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    data = size - 8 - n
    if max(ends, default=0) != data:
        return f"its tensors need {max(ends, default=0):,} bytes of data but the file holds {data:,} (truncated or damaged)"
    return None


#: the files a local model folder needs beside ``config.json`` and its ``*.safetensors``
#: weights (what ``save_pretrained`` of the model, its processor and tokenizer writes):
#: the image processor's config, and the tokenizer in one of its formats
IMAGE_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tekken.json", "spiece.model", "vocab.txt")
#: said in every refusal of a folder that lacks one (docs/data_formats.md says the same)
FOLDER_NEEDS = ("a model folder needs config.json, *.safetensors weights, preprocessor_config.json (the image "
                "processor) and tokenizer files (tokenizer.json, or tokenizer.model, or vocab.json + merges.txt), "
                "as model.save_pretrained(DIR), processor.save_pretrained(DIR) write them")


def _processor_files_problem(path: Path) -> str | None:
    """What of the processor a local folder lacks (image processor config, tokenizer files), or None.

    Transformers would fail on a missing image processor with a long ``OSError`` and, worse,
    build an empty tokenizer from a folder without tokenizer files (every prompt check then
    fails on the image token); both are refused here, before anything loads."""
    image = [n for n in IMAGE_PROCESSOR_FILES if (path / n).is_file()]
    if not image or image == ["processor_config.json"] and "image_processor" not in (read_json(path / "processor_config.json") or {}):
        return "no preprocessor_config.json (the image processor's settings)"
    if not any((path / n).is_file() for n in TOKENIZER_FILES):
        return "no tokenizer files (tokenizer.json, tokenizer.model or vocab.json)"
    return None


def check_processor_files(path: str | Path) -> None:
    """Refuse (:class:`VheadsError`, one line saying what a folder needs) a local VLM folder
    without its image processor's config or without tokenizer files."""
    missing = _processor_files_problem(Path(path))
    if missing:
        raise VheadsError(f"model folder {path} has {missing}; {FOLDER_NEEDS}")


def check_model_folder(path: str | Path, weights: bool = True) -> Path:
    """Refuse (:class:`VheadsError`, one line naming the file) a local model folder whose
    files cannot load, before anything is loaded: ``config.json`` missing or not a JSON
    object; no weights; only pickled weights (``*.bin``: vheads never unpickles a file, as
    unpickling can run code); a ``*.safetensors`` file that is truncated or damaged.
    ``weights=False`` checks ``config.json`` only. The processor's files are
    :func:`check_processor_files`'s to check, once the config is known to be a VLM's."""
    path = Path(path)
    config = read_json(path / "config.json", f"model folder {path}: config.json")
    if not isinstance(config, dict):
        raise VheadsError(f"model folder {path}: config.json must hold a JSON object, got {type(config).__name__}")
    if not weights:
        return path
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        pickled = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pt*"))
        if pickled:
            raise VheadsError(f"model folder {path}: its weights are pickled ({pickled[0]}); vheads does not unpickle files "
                              "(unpickling can run code). Convert them to safetensors where you trust them "
                              "(model.save_pretrained(DIR, safe_serialization=True))")
        raise VheadsError(f"model folder {path} holds no weights (*.safetensors); is it the folder save_pretrained wrote?")
    for f in weights:
        problem = _safetensors_problem(f)
        if problem:
            raise VheadsError(f"model folder {path}: weight file {f.name} cannot be read: {problem}; download or save it again")
    return path


class _Collect(logging.Handler):
    """Holds transformers' log records while a load runs (its load report is many lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _load_weights(path: str, model: str, **kwargs):
    """``AutoModelForImageTextToText.from_pretrained``; a checkpoint that does not load
    (weights whose shapes differ from its config, a damaged file) is one line naming the
    model and, for shapes, the first mismatched weight. Transformers' log lines are held
    during the load and shown afterwards only when it succeeds."""
    from safetensors import SafetensorError
    from transformers import AutoModelForImageTextToText
    from transformers.utils import logging as hf_logging

    from vheads._quiet import no_progress_bars

    held = _Collect()
    hf_logging.disable_default_handler()
    hf_logging.add_handler(held)
    try:
        with no_progress_bars():  # no "Loading weights" bar (a doctor loads twice)
            net = AutoModelForImageTextToText.from_pretrained(path, **kwargs)
    except (OSError, ValueError, RuntimeError, KeyError, EOFError, SafetensorError) as e:
        lines = [ln for r in held.records for ln in r.getMessage().splitlines()]
        mismatch = next((" ".join(ln.split()) for ln in lines if "MISMATCH" in ln and "|" in ln), None)
        why = f"a weight's shape differs from config.json ({mismatch})" if mismatch else (str(e).strip().splitlines() or [type(e).__name__])[0]
        files = sorted(p.name for p in Path(path).glob("*.safetensors")) if os.path.isdir(path) else []
        where = f"model folder {path}: {', '.join(files[:3])}{' …' if len(files) > 3 else ''}" if files else f"model {model!r}"
        raise VheadsError(f"{where}: the weights do not load: {why}") from None
    finally:
        hf_logging.remove_handler(held)
        hf_logging.enable_default_handler()
    for r in held.records:  # a load that worked: its warnings (missing or unused weights) as transformers prints them
        logging.getLogger(r.name).handle(r)
    return net


def load_processor(path: str, revision: str | None, config, *, system_prompt: str | None = None,
                   chat_template: str | Path | None = None, **remote: bool) -> ProcessorBundle:
    """AutoProcessor when it loads; otherwise image processor + tokenizer alone.

    Qwen-VL processors type-check a video processor that needs torchvision; vheads only
    needs images, so a missing torchvision must not stop loading.

    The prompts' chat template is the ``chat_template`` file's when given, else the
    processor's (``chat_template.json`` / ``.jinja``), else the tokenizer's; the setup is
    checked (:func:`~vheads.models._adapter.check_prompt_setup`) before anything else loads.
    ``system_prompt`` (None or ""): the template's own default.
    """
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    own = read_chat_template(chat_template) if chat_template else None  # a bad file is refused first
    image_processor = tokenizer = proc = None
    try:
        proc = AutoProcessor.from_pretrained(path, revision=revision, **remote)
        image_processor = getattr(proc, "image_processor", None)
        tokenizer = getattr(proc, "tokenizer", None)
    except Exception:  # noqa: BLE001 - fall back to the two parts we need
        pass
    if image_processor is None:
        image_processor = AutoImageProcessor.from_pretrained(path, revision=revision, **remote)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(path, revision=revision, **remote)
    patch = getattr(config.vision_config, "patch_size", 14)
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch  # InternVL: (p, p)
    template = (own or getattr(proc, "chat_template", None) or (None if proc is not None else _processor_template(path, revision))
                or getattr(tokenizer, "chat_template", None))
    bundle = ProcessorBundle(image_processor, tokenizer, int(patch), config, template, system_prompt or None)
    where = f"chat_template file {str(chat_template)!r}" if own else f"model {path!r}"
    check_prompt_setup(adapter_for(config.model_type), bundle, where)
    return bundle


def _processor_template(path: str, revision: str | None) -> str | None:
    """The processor's chat template file of a checkpoint (``chat_template.jinja``, else
    ``chat_template.json``), read directly when the processor itself does not load (a
    Qwen-VL processor without torchvision): it comes before the tokenizer's, as in
    ``AutoProcessor``."""
    from transformers.utils import cached_file

    for name in ("chat_template.jinja", "chat_template.json"):
        try:
            f = cached_file(path, name, revision=revision, _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
        except OSError:
            f = None
        if f:
            return read_chat_template(f)
    return None


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


def check_load_options(device: str = "cpu", device_map: str | None = None, quantization: str | None = None) -> None:
    """Raise :class:`VheadsError` (one line) when these loading options cannot run here, before
    anything is loaded.

    - ``device_map``: one of :data:`DEVICE_MAP_STRATEGIES` (layers spread over the GPUs, then
      CPU) or one device; needs ``accelerate``.
    - ``quantization``: ``4bit`` or ``8bit`` weights through bitsandbytes, which runs on a
      CUDA GPU only: refused on CPU / MPS, and where bitsandbytes is not installed.
    """
    check_device(device)
    if device_map is not None:
        if device_map not in DEVICE_MAP_STRATEGIES:
            try:
                check_device(device_map)
            except VheadsError:
                raise VheadsError(f"device_map {device_map!r} is neither one of {', '.join(DEVICE_MAP_STRATEGIES)} nor a "
                                  "device of this machine") from None
        if importlib.util.find_spec("accelerate") is None:
            raise VheadsError(f"device_map {device_map!r} needs the accelerate package, which is not installed: pip install accelerate")
    if quantization is None:
        return
    if quantization not in QUANTIZATIONS:
        raise VheadsError(f"quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    strategy = device_map in DEVICE_MAP_STRATEGIES  # spread over the GPUs: CUDA is enough
    where = device if device_map is None else device_map
    if not torch.cuda.is_available() or not (strategy or torch.device(where).type == "cuda"):
        why = "" if torch.cuda.is_available() else " (no CUDA on this machine)"
        raise VheadsError(f"{quantization} quantization (bitsandbytes) runs on a CUDA GPU only, and this load is on "
                          f"{where!r}{why}; drop the quantization or load on cuda")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise VheadsError(f"{quantization} quantization needs the bitsandbytes package, which is not installed: pip install bitsandbytes")


def load_model(model: str = "tiny", revision: str | None = None, dtype: str = "auto", device: str = "cpu", *,
               device_map: str | None = None, quantization: str | None = None, trust_remote_code: bool = False,
               system_prompt: str | None = None, chat_template: str | Path | None = None) -> LoadedModel:
    """Load a VLM (``AutoModelForImageTextToText``) and its processor, pick its adapter.

    ``model`` is ``tiny`` (built-in), a local folder saved with ``save_pretrained`` or a hub
    id. The language model's attention starts on sdpa; :func:`vheads.engine.install`
    switches it to the vheads attention function.

    Options for large models (checked first by :func:`check_load_options`): ``device_map``
    places the layers (``auto``: over the GPUs, then CPU) instead of moving the model to
    ``device``; ``quantization`` (``4bit``/``8bit``) loads bitsandbytes weights, computing in
    ``dtype``; ``trust_remote_code`` reaches ``from_pretrained`` only when True (a checkpoint's
    own Python code never runs unless asked for).

    ``dtype`` ``auto`` (the default): :func:`vheads._device.default_dtype` of the device
    (bfloat16 on CUDA, float32 elsewhere); float16 on a Gemma warns.

    Prompts: ``chat_template`` (a file) overrides the checkpoint's chat template;
    ``system_prompt`` adds a system turn (None: whatever the template does without one).
    Both are checked, with the processor, before the weights load.
    """

    from vheads._device import default_dtype, dtype_warning
    from vheads._versions import check_versions

    check_versions()  # one line naming the package, before anything is read

    if dtype == "auto":  # bfloat16 on CUDA, float32 elsewhere
        dtype = default_dtype(device_map or device)
    if dtype not in DTYPES:
        raise VheadsError(f"dtype {dtype!r} is not one of auto, {', '.join(DTYPES)}")
    check_load_options(device, device_map, quantization)
    remote = {"trust_remote_code": True} if trust_remote_code else {}
    path, config = _model_config(model, revision, remote)
    if dtype_warning(config.model_type, dtype):
        import warnings

        warnings.warn(dtype_warning(config.model_type, dtype), UserWarning, stacklevel=2)
    local = os.path.isdir(path)
    adapter = adapter_for(config.model_type)
    processor = load_processor(path, revision, config, system_prompt=system_prompt, chat_template=chat_template, **remote)
    placement: dict[str, Any] = {}
    if device_map is not None or quantization is not None:
        placement["device_map"] = device_map if device_map is not None else {"": device}
    if quantization is not None:
        from transformers import BitsAndBytesConfig

        extra = {"bnb_4bit_compute_dtype": DTYPES[dtype]} if quantization == "4bit" else {}
        placement["quantization_config"] = BitsAndBytesConfig(**{QUANTIZATIONS[quantization]: True}, **extra)
    net = _load_weights(path, model, revision=revision, dtype=DTYPES[dtype], attn_implementation="sdpa", **placement, **remote)
    if not placement:  # a placed (or quantized) model stays where from_pretrained put it
        net.to(device)
    net.eval()
    tc = adapter.text_config(net)
    n_heads = tc.num_attention_heads
    layers = adapter.attention_layers(tc)
    head_dim = _layer_attribute(tc, "head_dim", layers[0]) or tc.hidden_size // n_heads
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
        n_kv_heads=_layer_attribute(tc, "num_key_value_heads", layers[0]) or n_heads,
        head_dim=head_dim,
        attention_layers=layers,
        path=str(Path(path).resolve()) if local and model != "tiny" else None,
    )


def _model_config(model: str, revision: str | None, remote: dict, weights: bool = True):
    """``(path, config)`` of ``model``, refused when the folder is missing, its files cannot
    load (:func:`check_model_folder`; ``weights=False``: its ``config.json`` alone) or it is
    not a VLM."""
    from transformers import AutoConfig

    path = resolve_model_path(model)
    if not os.path.isdir(path) and (model.startswith((".", "/")) or os.sep in model and os.path.exists(os.path.dirname(model))):
        raise FileNotFoundError(f"model folder {model!r} does not exist")
    if os.path.isdir(path):
        check_model_folder(path, weights=weights)
    try:
        config = AutoConfig.from_pretrained(path, revision=revision, **remote)
    except OSError as e:  # not a folder here, and the hub (or its cache, offline) does not have it
        raise VheadsError(_not_found(model, revision, e)) from None
    if getattr(config, "vision_config", None) is None:
        raise ValueError(
            f"{model!r} (model type {config.model_type!r}) has no vision config: it is not a vision-language model; "
            f"supported VLM families: {', '.join(sorted(ADAPTER_REGISTRY.names()))} (see `vheads models`)"
        )
    if os.path.isdir(path):
        check_processor_files(path)  # a VLM folder: its image processor and tokenizer, before anything loads
    return path, config


def _not_found(model: str, revision: str | None, e: OSError) -> str:
    """One line for a model that is neither a folder here nor loadable from the hub."""
    from huggingface_hub import constants

    why = (str(e).strip().splitlines() or [type(e).__name__])[0]
    rev = f" at revision {revision!r}" if revision else ""
    if constants.HF_HUB_OFFLINE:
        return (f"model {model!r}{rev} is not a folder here and not in the Hugging Face cache, and the hub is off "
                "(HF_HUB_OFFLINE is set): download it where there is network, or pass a local folder")
    return (f"model {model!r}{rev} is not a folder here and could not be loaded from the Hugging Face hub ({why}); "
            "check the id, or pass a local model folder (docs/data_formats.md lists the files it needs)")


def preflight_prompts(model: str, revision: str | None = None, *, chat_template: str | Path | None = None,
                      system_prompt: str | None = None, trust_remote_code: bool = False) -> tuple[Adapter, ProcessorBundle]:
    """The adapter and processor of ``model`` (no weights), its prompt setup checked
    (:func:`~vheads.models._adapter.check_prompt_setup`): the check a command runs before
    any work, and what renders prompts without the model."""
    remote = {"trust_remote_code": True} if trust_remote_code else {}
    path, config = _model_config(model, revision, remote, weights=False)
    return adapter_for(config.model_type), load_processor(path, revision, config, system_prompt=system_prompt,
                                                          chat_template=chat_template, **remote)


def _layer_attribute(text_config, name: str, layer: int):
    """``name`` of the text config as layer ``layer`` has it: configs whose layers differ
    (Gemma 4's full layers have their own head size and KV heads) keep it per layer."""
    per_layer = getattr(text_config, "per_layer_config", None)
    if per_layer is not None:
        return getattr(per_layer[layer], name, None)
    return getattr(text_config, name, None)
