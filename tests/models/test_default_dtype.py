"""The default dtype (issue 34 point 10): bfloat16 on CUDA, float32 on CPU, chosen by a
capability function whose every branch runs here; float16 on a Gemma warns."""

from __future__ import annotations

import warnings

import pytest
import torch

from vheads._device import default_dtype, dtype_warning


@pytest.mark.parametrize("device,bf16,want", [
    ("cpu", None, "float32"), ("cpu", True, "float32"), ("mps", True, "float32"),
    ("cuda", True, "bfloat16"), ("cuda:3", True, "bfloat16"), ("auto", True, "bfloat16"),
    ("cuda", False, "float32"),  # a GPU without bf16 (pre-Ampere): float32, not a silent fp16
])
def test_the_default_dtype_follows_the_device_and_its_capability(device, bf16, want):
    assert default_dtype(device, bf16_supported=bf16) == want


def test_a_cuda_device_asks_torch_for_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert default_dtype("cuda") == "float32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert default_dtype("cuda") == "bfloat16"


def test_the_study_config_resolves_auto_at_once_and_keeps_the_cpu_hash():
    """A default config on CPU is float32, as before ``auto`` existed (so runs made then keep
    their hash); a CUDA config is bfloat16 (the Ray driver of GPU workers may have no GPU)."""
    from vheads.study import config_from_dict

    cpu = config_from_dict({})
    assert cpu.dtype == "float32"
    assert cpu.science_hash() == config_from_dict({"dtype": "float32"}).science_hash()
    gpu = config_from_dict({"device": "cuda", "run": {"backend": "ray"}})
    assert gpu.dtype == default_dtype("cuda")
    assert config_from_dict({"device": "cuda", "dtype": "float32", "run": {"backend": "ray"}}).dtype == "float32"


@pytest.mark.parametrize("model_type,dtype,warns", [("gemma3", "float16", True), ("gemma4", "fp16", True),
                                                   ("gemma3", "bfloat16", False), ("qwen3_vl", "float16", False)])
def test_float16_on_a_gemma_warns(model_type, dtype, warns):
    assert (dtype_warning(model_type, dtype) is not None) == warns


def test_loading_a_gemma_in_float16_warns_once_on_one_line(tiny_random_dirs):
    from vheads.models import load_model

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        lm = load_model(str(tiny_random_dirs["gemma3"]), dtype="float16")
    said = [str(w.message) for w in seen if "overflow float16" in str(w.message)]
    assert len(said) == 1 and "\n" not in said[0] and lm.model.dtype == torch.float16
    assert load_model(str(tiny_random_dirs["qwen3_vl"])).model.dtype == torch.float32  # auto on CPU


def test_a_device_map_without_a_gpu_loads_float32(monkeypatch):
    """``device_map = "auto"`` on a machine with no GPU puts every layer on the CPU, where
    bf16 is slower and not the study's fp32 numbers; with a GPU it asks its capability."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_dtype("auto") == "float32" and default_dtype("sequential") == "float32"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert default_dtype("auto") == "bfloat16"
