"""What every benchmark shares: the device, the model shapes, prompts of a chosen length.

The models are random-initialised Qwen3-VL built locally (no downloads) with the real
2B language-model layout: 28 layers × 16 query heads / 8 KV heads. On a GPU the width is
the real one too (hidden 2,048, head_dim 128); on a CPU the width is cut (hidden and
head_dim, and the vision tower) as far as CPU time forces, and the table says so.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch

REAL_2B = {"hidden": 2048, "head_dim": 128, "vision_hidden": 1024, "vision_depth": 24}


@dataclass(frozen=True)
class ModelSpec:
    """The random Qwen3-VL a benchmark runs on (``build_tiny_random`` arguments)."""

    layers: int = 28
    heads: int = 16
    kv_heads: int = 8
    hidden: int = 2048
    head_dim: int = 128
    vision_hidden: int = 1024
    vision_depth: int = 24

    def reduced(self) -> str:
        """What differs from the real 2B layout, in words (empty when nothing does)."""
        cut = [f"{k} {REAL_2B[k]}→{getattr(self, k)}" for k in REAL_2B if getattr(self, k) != REAL_2B[k]]
        return ", ".join(cut)

    def describe(self) -> str:
        s = f"Qwen3-VL random init, {self.layers} layers × {self.heads} heads / {self.kv_heads} KV heads, hidden {self.hidden}, head_dim {self.head_dim}"
        return s + (f" (reduced for CPU time: {self.reduced()}; MLP width 2×hidden)" if self.reduced() else " (MLP width 2×hidden)")


def device_and_dtype() -> tuple[str, str]:
    """CUDA + bf16 when a GPU is there, else CPU + fp32."""
    return ("cuda", "bfloat16") if torch.cuda.is_available() else ("cpu", "float32")


def model_spec(device: str, quick: bool) -> ModelSpec:
    if device == "cuda":
        return ModelSpec()
    # a 2-core CPU: one full-width forward of 1,000 tokens takes minutes; hidden 256 (128
    # with --quick) and head_dim 16 bring it to seconds; the vision tower is cut to one block
    return ModelSpec(hidden=128 if quick else 256, head_dim=16, vision_hidden=64, vision_depth=1)


def build(spec: ModelSpec, out: str) -> str:
    from vheads.models.tiny_random import build_tiny_random

    kw = asdict(spec)
    return str(build_tiny_random("qwen3_vl", out, max_pixels=4096 * 4096, **kw))


def load(model_dir: str, device: str, dtype: str):
    from vheads.models import load_model

    return load_model(model_dir, dtype=dtype, device=device)


def prompt_of_length(lm, n_tokens: int, seed: int = 0):
    """A four-option question about a random image of about ``n_tokens`` image tokens
    (Qwen-VL: one merged token per 32×32 px) split into six panel regions."""
    from PIL import Image

    from vheads.data import Item

    side = 32 * max(1, int(round(n_tokens**0.5)))
    g = torch.Generator().manual_seed(seed)
    img = Image.fromarray((torch.rand(side, side, 3, generator=g) * 255).byte().numpy())
    w = side // 6
    regions = {f"panel{i + 1}": (i * w, 0, (i + 1) * w, side) for i in range(6)}
    item = Item(f"bench{seed}", "strip-ordinal", img, "what happens in panel 3 ?", "A",
                regions=regions, target="panel3", options=("a dog runs", "a cat sleeps", "a car stops", "a bird sings"),
                query_span=(16, 23))
    return lm.adapter.build(item, lm.processor)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str) -> float:
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def peak_rss() -> int:
    """This process's peak resident memory in bytes (``VmHWM``). Not ``ru_maxrss``: that
    survives ``exec`` and so starts at the parent's size when the parent is large."""
    from pathlib import Path

    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # not Linux: best effort


def peak_memory(fn, device: str) -> tuple[int, int]:
    """(bytes held before, peak bytes during) ``fn()``: GPU ``max_memory_allocated``
    (peak stats reset first), CPU the process's peak RSS."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = peak_rss()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
        return before, torch.cuda.max_memory_allocated()
    return before, peak_rss()
