"""Several models in one study (``models = [...]``) and the checks of how a model loads
(device, device map, quantization): torch is asked what this machine has last, after every
other check."""

from __future__ import annotations

from dataclasses import dataclass, replace

from vheads._errors import VheadsError, safe_name
from vheads.study.stages.core import DTYPES


def check_ray_device(device: str) -> None:
    """A Ray replica sees only the GPU Ray gave it, as ``cuda:0`` (``CUDA_VISIBLE_DEVICES``):
    ``cuda:N`` would name a GPU it cannot see, or every replica's own GPU by accident."""
    if device.startswith("cuda:"):
        raise VheadsError(f"device {device!r} names one GPU, but on Ray each replica gets a GPU of its own (Ray picks it); "
                          'set device = "cuda"')


def _validate_loading(cfg, bad) -> None:
    """Device and loading options: the one check that imports torch (it asks torch what this
    machine has), so it runs after every other check and a typo elsewhere is refused at once."""
    if cfg.run.backend == "local":  # Ray workers may have devices the driver lacks
        from vheads.models import check_device, check_load_options

        try:
            check_device(cfg.device)
        except VheadsError as e:
            bad("device", str(e))
        try:
            check_load_options(cfg.device, cfg.device_map or None, cfg.quantization or None)
        except VheadsError as e:
            bad("quantization" if cfg.quantization else "device_map", str(e))
    else:
        import torch

        try:
            torch.device(cfg.device)
        except (RuntimeError, ValueError, TypeError):
            bad("device", f"{cfg.device!r} is not a torch device; use cpu, cuda or mps (on Ray: no cuda:N)")
        try:
            check_ray_device(cfg.device)
        except VheadsError as e:
            bad("device", str(e))


#: the keys of one entry of ``models = [...]``; revision, dtype and device default to the
#: study's top-level keys, every other key (items, controls, seeds, ...) is the study's
MODEL_KEYS = ("name", "model", "revision", "dtype", "device", "device_map", "quantization", "trust_remote_code",
              "system_prompt", "chat_template")
#: the keys of a models entry that fall back to the top-level key of the same name
MODEL_LOADING_KEYS = MODEL_KEYS[2:]


@dataclass(frozen=True)
class ModelEntry:
    """One model of a multi-model study; ``name`` (a safe name) scopes its rows in the store
    and names its report folder ``models/<name>/``."""

    name: str
    model: str
    revision: str
    dtype: str
    device: str
    device_map: str = ""
    quantization: str = ""
    trust_remote_code: bool = False
    system_prompt: str = ""
    chat_template: str = ""


def model_entries(cfg) -> list[ModelEntry]:
    """The study's ``models`` entries, checked (one error naming the entry) and completed
    with the top-level revision / dtype / device / loading options; ``[]`` for a single-model study."""
    out: list[ModelEntry] = []
    for i, e in enumerate(cfg.models):
        key = f"models[{i}]"
        if not isinstance(e, dict):
            raise VheadsError(f"config key {key!r}: expected a table {{ name = ..., model = ... }}, got {e!r:.80}")
        for k, v in e.items():
            if k not in MODEL_KEYS:
                raise VheadsError(f"unknown config key '{key}.{k}'; an entry of 'models' takes {', '.join(MODEL_KEYS)}")
            want = bool if k == "trust_remote_code" else str
            if not isinstance(v, want):
                raise VheadsError(f"config key '{key}.{k}': expected {want.__name__}, got {type(v).__name__} {v!r:.80}")
        for k in ("name", "model"):
            if not e.get(k):
                raise VheadsError(f"config key {key!r}: needs {k!r} (e.g. {{ name = \"tiny\", model = \"tiny\" }})")
        name = safe_name(e["name"], f"config key '{key}.name'")
        if any(m.name == name for m in out):
            raise VheadsError(f"config key 'models': the name {name!r} is used twice; give every model its own name")
        loading = {k: e.get(k, getattr(cfg, k)) for k in MODEL_LOADING_KEYS}
        if loading["dtype"] == "auto":
            from vheads._device import default_dtype

            loading["dtype"] = default_dtype(loading["device_map"] or loading["device"])
        entry = ModelEntry(name, e["model"], **loading)
        twin = next((m for m in out if _same_model(m, entry)), None)
        if twin is not None:  # the same model twice: every cross-model table would compare it with itself
            raise VheadsError(f"config key 'models': {key} ({name!r}) loads model {entry.model!r} exactly as {twin.name!r} "
                              "does (same revision, dtype and loading options); list each model once")
        out.append(entry)
    return out


def _same_model(a: ModelEntry, b: ModelEntry) -> bool:
    """Two entries that load the same weights the same way (the device aside: it changes
    only float rounding)."""
    return all(getattr(a, k) == getattr(b, k) for k in ("model", *MODEL_LOADING_KEYS) if k != "device")


def model_config(cfg, entry: ModelEntry):
    """The single-model study of one entry: what a run of that model alone would use."""
    return replace(cfg, model=entry.model, models=[], **{k: getattr(entry, k) for k in MODEL_LOADING_KEYS})


def _validate_models(cfg, bad) -> None:
    """``models``: entries, names, dtypes, devices and loading options (loading itself is
    checked by the runner)."""
    if not cfg.models:
        return
    if cfg.model != type(cfg).model:
        bad("model", f"is {cfg.model!r} but 'models' is set too; name every model in 'models' and drop 'model'")
    entries = model_entries(cfg)
    for i, e in enumerate(entries):
        if e.dtype not in DTYPES:
            bad(f"models[{i}].dtype", f"unknown dtype {e.dtype!r}")
    for i, e in enumerate(entries):
        if any(getattr(e, k) != getattr(cfg, k) for k in MODEL_LOADING_KEYS):
            try:
                _validate_loading(model_config(cfg, e), bad)
            except VheadsError as err:
                raise VheadsError(f"{err} (in models[{i}], {e.name!r})") from None
