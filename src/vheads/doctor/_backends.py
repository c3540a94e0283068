"""The doctor's attention-backend check (not an invariant): does P(option) depend on the
attention kernel, and which kernel are vheads' numbers?

The answer of a VLM can depend on the attention backend (transformers#33615: Qwen2-VL on
ChartQA 81.6 with flash-attention, 72.6 with eager). On a few items the check runs the
model as transformers does under each backend — ``eager``, ``sdpa`` and, where the package
is installed and the device is CUDA, ``flash_attention_2`` — once for each tower: the
vision tower's backend changed with the language model on sdpa, and the language model's
changed with the vision tower on sdpa (``model.set_attn_implementation`` per sub-config).
It prints, per tower, the largest |ΔP(option)| between any two backends, and which backend
vheads' numbers are: the vision tower keeps the implementation :func:`vheads.engine.install`
gives it (read from its config), and the language model runs vheads' attention, whose
untouched heads take sdpa; the engine's empty-plan P(option) is printed against each
backend's, so a reader sees it sit on sdpa's.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import torch

from vheads.doctor._checks import Context
from vheads.doctor._report import Check

#: the items the backends are compared on: one grid with the target cell named, one neutral
#: grid, one single-image class question (a few forwards per backend and tower)
BACKEND_KINDS = ("grid-oracle", "grid-neutral", "class-matched")
#: the language model's sub-config; every other sub-config is "the vision tower" (vision
#: encoder, and a projector where a family gives it a config of its own)
LLM = "text_config"
#: the largest |ΔP(option)| between two backends the check accepts before marking ⚠: two
#: kernels computing the same softmax differ by reduction order only (~1e-6 in float32);
#: in bf16 / fp16 the rounding of the logits alone moves P by up to a few hundredths
BACKEND_DRIFT = {"half": 0.05, "float32": 1e-3}


def flash_available(device: torch.device) -> bool:
    """flash-attention 2 can run here: the ``flash_attn`` package is installed (transformers'
    own test) and the model sits on a CUDA device."""
    from transformers.utils import is_flash_attn_2_available

    return device.type == "cuda" and bool(is_flash_attn_2_available())


def available_backends(device: torch.device) -> tuple[str, ...]:
    """The backends the check compares on ``device``: eager and sdpa everywhere,
    ``flash_attention_2`` where :func:`flash_available`."""
    return ("eager", "sdpa") + (("flash_attention_2",) if flash_available(device) else ())


def towers(model) -> dict[str, list[str]]:
    """The model's sub-configs by tower: ``{"language model": ["text_config"], "vision tower": [...]}``."""
    subs = [s for s in getattr(model.config, "sub_configs", {}) or {} if getattr(model.config, s, None) is not None]
    return {"language model": [s for s in subs if s == LLM], "vision tower": [s for s in subs if s != LLM]}


def engine_backends(model) -> dict[str, str]:
    """What the installed engine computes with, per tower: the vision sub-configs' own
    implementation (as :func:`vheads.engine.install` left it), and sdpa for the language
    model (vheads' attention runs every head it does not touch through transformers' sdpa)."""
    vision = sorted({getattr(model.config, s)._attn_implementation for s in towers(model)["vision tower"]})
    return {"language model": "sdpa", "vision tower": "/".join(vision) or "none"}


def option_probs(ctx: Context, kinds: Sequence[str] = BACKEND_KINDS) -> torch.Tensor:
    """P over the four option letters at the last prompt row of one item per kind, from the
    model's own forward (whatever attention it is set to): [items, 4]."""
    lm = ctx.lm
    ids = lm.adapter.letter_token_ids(lm.processor)
    out = []
    with torch.no_grad():
        for kind in kinds:
            logits = lm.model(**ctx.inputs(ctx.prompt(kind))).logits[0, -1].float()  # [V]
            out.append(torch.softmax(logits[ids], -1).cpu())
    return torch.stack(out)  # [items, 4]


def _engine_probs(ctx: Context, kinds: Sequence[str]) -> torch.Tensor:
    eng, out = ctx.engine, []
    for kind in kinds:
        pr = ctx.prompt(kind)
        out.append(eng.letter_probs(eng.forward(pr, logits_at=[pr.layout.n_tokens - 1]).logits[:, -1]).cpu())
    return torch.cat(out)  # [items, 4]


def backend_probs(ctx: Context, backends: Sequence[str], kinds: Sequence[str] = BACKEND_KINDS
                  ) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, dict[str, str]]]:
    """P(option) [items, 4] per tower and backend (the other tower on sdpa), and why a backend
    did not run on a tower (``{tower: {backend: first line of the error}}``: not supported by
    that tower, not installed, a kernel without this dtype, out of memory)."""
    model = ctx.lm.model
    groups = towers(model)
    probs: dict[str, dict[str, torch.Tensor]] = {t: {} for t in groups if groups[t]}
    skipped: dict[str, dict[str, str]] = {}
    subs = [s for g in groups.values() for s in g]
    for tower in probs:
        for b in backends:
            setting = {s: (b if s in groups[tower] else "sdpa") for s in subs}
            try:
                model.set_attn_implementation(setting)
                probs[tower][b] = option_probs(ctx, kinds)
            except (ImportError, ValueError, RuntimeError, NotImplementedError) as e:
                skipped.setdefault(tower, {})[b] = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            finally:
                ctx.reinstall()
    return probs, skipped


def largest_difference(by_backend: dict[str, torch.Tensor]) -> tuple[float, tuple[str, str] | None]:
    """max |P_a − P_b| over the items, options and pairs of backends, and that pair."""
    best, pair = 0.0, None
    for a, b in combinations(by_backend, 2):
        d = float((by_backend[a].double() - by_backend[b].double()).abs().max())
        if pair is None or d > best:
            best, pair = d, (a, b)
    return best, pair


def check_backends(ctx: Context, backends: Sequence[str] | None = None, kinds: Sequence[str] = BACKEND_KINDS) -> Check:
    """P(option) of ``kinds`` under each attention backend (default :func:`available_backends`),
    per tower: ⚠ where two backends differ by more than :data:`BACKEND_DRIFT`; names the backend
    vheads' numbers are (:func:`engine_backends`) and the engine's distance to each backend."""
    lm = ctx.lm
    backends = tuple(backends or available_backends(lm.device))
    probs, skipped = backend_probs(ctx, backends, kinds)
    engine = _engine_probs(ctx, kinds)
    ours = engine_backends(lm.model)
    limit = BACKEND_DRIFT["half" if ctx.half else "float32"]
    parts, numbers, details = [], {"items": len(kinds), "tolerance": limit, "engine": ours, "skipped": skipped}, []
    worst = 0.0
    for tower, by_backend in probs.items():
        d, pair = largest_difference(by_backend)
        worst = max(worst, d)
        to_engine = {b: float((p.double() - engine.double()).abs().max()) for b, p in by_backend.items()} if tower == "language model" else {}
        numbers[tower] = {"max_diff": d, "pair": list(pair) if pair else None, "backends": list(by_backend)}
        parts.append(f"{tower} {d:.2e}" + (f" ({pair[0]} vs {pair[1]})" if pair else " (one backend ran)"))
        if to_engine:
            numbers["engine_vs"] = to_engine
            details.append("max |ΔP(option)| of the engine's empty plan vs the language model on "
                           + ", ".join(f"{b} {v:.2e}" for b, v in to_engine.items()) + f" (the engine's: {ours[tower]})")
    numbers["max_diff"] = worst
    details += [f"{b} not run on the {tower}: {why}" for tower, by in skipped.items() for b, why in by.items()]
    if "flash_attention_2" not in backends:
        details.append("flash_attention_2 not compared: " + ("the flash_attn package is not installed" if lm.device.type == "cuda"
                                                          else f"CUDA only (the model is on {lm.device})"))
    summary = (f"max |ΔP(option)| between backends over {len(kinds)} items: " + ", ".join(parts)
               + f"; vheads' numbers are vision tower {ours['vision tower']}, language model {ours['language model']}")
    return Check("attention backends", worst <= limit, summary, invariant=False, numbers=numbers, details=details)
