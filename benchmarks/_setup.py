"""What every benchmark shares: the device, the model shapes, prompts of a chosen length.

The models are random-initialised Qwen3-VL built locally (no downloads) with the real
2B language-model layout: 28 layers × 16 query heads / 8 KV heads. On a GPU the width is
the real one too (hidden 2,048, head_dim 128); on a CPU the width is cut (hidden and
head_dim, and the vision tower) as far as CPU time forces, and the table says so.

The zoo's capture rows (:func:`zoo_specs`) use the same language-model layout in two other
families: Qwen3.5 (hybrid: every 4th layer softmax attention, the others Gated DeltaNet)
and InternVL (dynamic tiling: 448-px tiles of 256 tokens, up to 12 tiles + a thumbnail).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, replace

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
    #: the family built (``build_tiny_random`` model type): qwen3_vl, qwen3_5 or internvl
    family: str = "qwen3_vl"

    def reduced(self) -> str:
        """What differs from the real 2B layout, in words (empty when nothing does)."""
        keys = [k for k in REAL_2B if self.family != "internvl" or not k.startswith("vision")]  # InternVL: its own tower
        cut = [f"{k} {REAL_2B[k]}→{getattr(self, k)}" for k in keys if getattr(self, k) != REAL_2B[k]]
        return ", ".join(cut)

    def describe(self) -> str:
        s = f"{FAMILY_NAMES[self.family]} random init, {self.layers} layers × {self.heads} heads / {self.kv_heads} KV heads, hidden {self.hidden}, head_dim {self.head_dim}"
        if self.family == "internvl":
            s += f", {INTERNVL['tile']}-px tiles of {INTERNVL['tile'] // INTERNVL['patch'] // 2}² tokens, ≤ {INTERNVL['max_tiles']} tiles + thumbnail, vision tower 1 block of width 32"
        if self.family == "qwen3_5":
            s += ", every 4th layer softmax attention (Gated DeltaNet between)"
        return s + (f" (reduced for CPU time: {self.reduced()}; MLP width 2×hidden)" if self.reduced() else " (MLP width 2×hidden)")


FAMILY_NAMES = {"qwen3_vl": "Qwen3-VL", "qwen3_5": "Qwen3.5", "internvl": "InternVL"}
#: InternVL 3/3.5's image layout: 448-px tiles, patch 14, pixel shuffle 0.5 (256 tokens a tile), 12 tiles at most
INTERNVL = {"tile": 448, "patch": 14, "max_tiles": 12}
#: the zoo's capture rows: family -> prompt lengths (tokens; InternVL: 12 tiles + thumbnail = 3,328 image tokens)
ZOO_LENGTHS = {"qwen3_5": [4096], "internvl": [3328]}


def zoo_specs(device: str, quick: bool) -> list[tuple[ModelSpec, list[int]]]:
    """(model, capture lengths) of the zoo's capture rows: :func:`model_spec`'s layout and
    widths in the hybrid (Qwen3.5) and the tiled (InternVL) family."""
    base = model_spec(device, quick)
    return [(replace(base, family=f), lengths) for f, lengths in ZOO_LENGTHS.items()]


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
    family = kw.pop("family")
    if family == "internvl":  # its builder's vision tower is fixed (1 block, width 32)
        kw = {k: kw[k] for k in ("layers", "heads", "kv_heads", "hidden", "head_dim")} | INTERNVL
        return str(build_tiny_random(family, out, **kw))
    return str(build_tiny_random(family, out, max_pixels=4096 * 4096, **kw))


def load(model_dir: str, device: str, dtype: str):
    from vheads.models import load_model

    return load_model(model_dir, dtype=dtype, device=device)


def image_size_for(lm, n_tokens: int) -> tuple[int, int]:
    """(width, height) of an image of about ``n_tokens`` image tokens: Qwen-VL one merged
    token per 32×32 px (a square); InternVL ``n_tokens / 256 − 1`` tiles (one view is the
    thumbnail) laid out as the most nearly square ``cols × rows`` grid, at most 12."""
    if lm.adapter.family != "internvl":
        side = 32 * max(1, int(round(n_tokens**0.5)))
        return side, side
    per_view = int(lm.model.config.image_seq_length)
    tiles = min(INTERNVL["max_tiles"], max(1, round(n_tokens / per_view) - 1))
    rows = max(r for r in range(1, int(tiles**0.5) + 1) if tiles % r == 0)
    tile = INTERNVL["tile"]
    return tile * (tiles // rows), tile * rows


def prompt_of_length(lm, n_tokens: int, seed: int = 0):
    """The prompt of :func:`item_of_length`."""
    return lm.adapter.build(item_of_length(lm, n_tokens, seed), lm.processor)


def item_of_length(lm, n_tokens: int, seed: int = 0):
    """A four-option question about a random image of about ``n_tokens`` image tokens
    (see :func:`image_size_for`) split into six panel regions."""
    from PIL import Image

    from vheads.data import Item

    width, side = image_size_for(lm, n_tokens)
    g = torch.Generator().manual_seed(seed)
    img = Image.fromarray((torch.rand(side, width, 3, generator=g) * 255).byte().numpy())
    w = width // 6
    regions = {f"panel{i + 1}": (i * w, 0, (i + 1) * w, side) for i in range(6)}
    item = Item(f"bench{seed}", "strip-ordinal", img, "what happens in panel 3 ?", "A",
                regions=regions, target="panel3", options=("a dog runs", "a cat sleeps", "a car stops", "a bird sings"),
                query_span=(16, 23))
    return item


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str) -> float:
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t


def interleaved(runs: dict, repeats: int, device: str) -> dict[str, list[float]]:
    """The times of each of ``runs`` (name -> function): each run once untimed (the shapes
    warm), then all of them in turn ``repeats`` times, so load on the machine hits them alike."""
    for f in runs.values():
        f()
    t = {m: [] for m in runs}
    for _ in range(max(1, repeats)):
        for m, f in runs.items():
            t[m].append(timed(f, device))
    return t


def against_limit(planned, plain, repeats: int, device: str) -> tuple[float, float]:
    """(median time of ``planned``, median time of ``plain``), :func:`interleaved`: a batched
    row against its limit (the same rows with no plan)."""
    t = interleaved({"planned": planned, "plain": plain}, repeats, device)
    return median(t["planned"]), median(t["plain"])


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
