"""What a device can do: the default dtype of a load, and the dtype a family cannot run in.

Torch-free at import (the config and the CLI use it before torch loads); a capability is
asked of torch only for a CUDA device, and every function takes the capability as an
argument too, so each branch (the GPU's included) runs in the CPU tests.
"""

from __future__ import annotations

#: accelerate's device maps (``device_map = ...``): the GPUs where there are any
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")

#: families whose activations overflow float16 (inf / NaN logits): Gemma's
FP16_UNSAFE = ("gemma",)


def device_kind(device: str) -> str:
    """``"cuda"`` for ``cuda`` / ``cuda:N`` and a device map (``auto`` …: the GPUs where
    there are any), else the device's type (``cpu``, ``mps``)."""
    kind = str(device).split(":")[0]
    return "cuda" if kind in DEVICE_MAPS else kind


def default_dtype(device: str, bf16_supported: bool | None = None) -> str:
    """The dtype ``dtype = "auto"`` loads in: ``bfloat16`` on a CUDA device that runs it
    (float32 there is ≈ 10x slower on an H100 / H200 with TF32 off), ``float32`` on a CUDA
    device without bf16 and everywhere else (CPU: bf16 matmuls are slower than fp32 and the
    tiny study's numbers are fp32's). ``bf16_supported``: the device's capability (None:
    asked of torch; a driver without a GPU, e.g. a Ray driver for GPU workers, assumes it)."""
    if device_kind(device) != "cuda":
        return "float32"
    if bf16_supported is None:
        import torch

        if not torch.cuda.is_available() and str(device) in DEVICE_MAPS:
            return "float32"  # a device map on a machine without a GPU places every layer on the CPU
        bf16_supported = torch.cuda.is_bf16_supported() if torch.cuda.is_available() else True
    return "bfloat16" if bf16_supported else "float32"


def dtype_warning(model_type: str, dtype: str) -> str | None:
    """A one-line warning for a dtype the family is known not to run in (Gemma in float16),
    else None."""
    if dtype in ("float16", "fp16") and model_type.startswith(FP16_UNSAFE):
        return (f"{model_type} in float16: Gemma's activations overflow float16 (inf / NaN logits); "
                "use dtype bfloat16 (or float32)")
    return None


def padding_costs_more(device: str, fused_unmasked: bool | None = None) -> bool:
    """Whether items of one length should get forwards of their own (no padding): where the
    attention kernels of an unpadded batch are fused ones that cannot take a padding mask
    (flash / memory-efficient sdpa on CUDA), a padded batch of items of different lengths
    ran slower than one call per item on the H200 (``benchmarks/README.md``, "First GPU
    run": 0.84x at the 2B width, 0.69x at the 8B); on a CPU sdpa takes the mask in the same
    kernel and packing saves forwards. ``fused_unmasked``: the capability (None: asked of
    torch for a CUDA device, False elsewhere)."""
    if fused_unmasked is None:
        if device_kind(device) != "cuda":
            return False
        import torch

        fused_unmasked = bool(torch.backends.cuda.flash_sdp_enabled() or torch.backends.cuda.mem_efficient_sdp_enabled())
    return bool(fused_unmasked)
