"""The doctor's checks of the model itself (never invariants): bf16 vs fp32 P(option), the
baseline audit on a few items, and the speed and projected time of a study."""

from __future__ import annotations

import gc
import os
import time

import torch

from vheads.doctor._checks import Context
from vheads.doctor._report import Check

#: the evaluation kinds whose P(option) the dtype check compares
DTYPE_KINDS = ("grid-oracle", "grid-neutral", "class-matched", "class-mismatched", "text")
#: |ΔP(option)| between dtypes above which the doctor marks the check ✗ (not an invariant)
DTYPE_DRIFT = 0.05
AUDIT_ITEMS = 24  # per set: enough that the binomial interval can exclude a range
SPEED_ROWS = 32
#: the largest batch the speed check times (a study's default batch_size)
MAX_SPEED_ROWS = 512


def _free_bytes(device: torch.device) -> int:
    """Free memory on ``device``; on CUDA after emptying PyTorch's cache, which
    ``mem_get_info`` counts as used."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


def _option_probs(ctx: Context, engine) -> torch.Tensor:
    out = []
    for kind in DTYPE_KINDS:
        pr = engine.lm.adapter.build(ctx.items[kind], engine.lm.processor)
        out.append(engine.letter_probs(engine.forward(pr, logits_at=[pr.layout.n_tokens - 1]).logits[:, -1]).cpu())
    return torch.cat(out)  # [items, 4]


def check_dtypes(ctx: Context, model_path: str, device_map: str | None = None, quantization: str | None = None) -> Check:
    """P(option) of one item per evaluation kind in this dtype and the other (bf16 <-> fp32),
    where a second copy of the weights fits in free memory (placed by the same ``device_map``);
    skipped for quantized weights, whose dtype is the quantization's."""
    from vheads.engine import Engine
    from vheads.models import load_model

    lm = ctx.lm
    if quantization is not None:
        return Check("bf16 vs fp32", None, f"skipped: the weights are {quantization} (bitsandbytes); the compute dtype is not "
                     "the weights' precision", invariant=False)
    other = "float32" if ctx.half else "bfloat16"
    n_params = sum(p.numel() for p in lm.model.parameters())
    need = n_params * (4 if other == "float32" else 2)
    free = _free_bytes(lm.device)
    if need * 1.3 > free:
        return Check("bf16 vs fp32", None, f"skipped: a {other} copy needs {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free",
                     invariant=False)
    try:
        lm2 = load_model(model_path, lm.revision, other, str(lm.device), device_map=device_map)
    except (RuntimeError, ValueError, TypeError) as e:
        return Check("bf16 vs fp32", None, f"skipped: the model does not load in {other} here ({str(e).splitlines()[0][:120]})", invariant=False)
    try:
        here = _option_probs(ctx, ctx.engine)
        there = _option_probs(ctx, Engine(lm2))
    except RuntimeError as e:  # e.g. a kernel without bf16 support on this device
        return Check("bf16 vs fp32", None, f"skipped: {other} does not run here ({str(e).splitlines()[0][:120]})", invariant=False)
    finally:
        del lm2  # the copy freed before the next check (and its cached blocks on CUDA)
        gc.collect()
        if lm.device.type == "cuda":
            torch.cuda.empty_cache()
    d = float((here - there).abs().max())
    agree = int((here.argmax(-1) == there.argmax(-1)).sum())
    return Check("bf16 vs fp32", d <= DTYPE_DRIFT, f"max |ΔP(option)| = {d:.3f} over {len(DTYPE_KINDS)} items ({str(ctx.lm.model.dtype).replace('torch.', '')} vs "
                 f"{other}); same top option on {agree}/{len(DTYPE_KINDS)}", invariant=False,
                 numbers={"max_diff": d, "agree": agree, "items": len(DTYPE_KINDS)})


def binomial_interval(p_key, level: float = 0.95) -> tuple[float, float]:
    """Clopper–Pearson interval of a mean of per-item probabilities ``p_key`` in [0, 1]: the
    exact binomial interval at ``x = Σ p`` successes of ``n`` (Beta quantiles, which take a
    non-integer ``x``). A [0, 1]-valued outcome varies at most as a Bernoulli of the same mean,
    so the interval is as wide as the one of ``n`` coin flips: conservative."""
    from scipy.stats import beta

    n, x = len(p_key), float(sum(p_key))
    a = (1 - level) / 2
    lo = 0.0 if x <= 0 else float(beta.ppf(a, x, n - x + 1))
    hi = 1.0 if x >= n else float(beta.ppf(1 - a, x + 1, n - x))
    return lo, hi


def check_baseline(ctx: Context) -> tuple[Check, float]:
    """The baseline audit (:func:`vheads.evaluation.baseline_audit`) on ``AUDIT_ITEMS`` items
    of each set, each set judged by the binomial interval of its mean P(key)
    (:func:`binomial_interval`): ⚠ where the interval lies wholly outside the set's expected
    range (the model does not read these items), ✓ otherwise — a mean outside the range on
    a few items is not evidence. Also returns the items per second it ran at."""
    from vheads._seeds import derived_seed
    from vheads.evaluation import audit_sets, baseline_audit

    sets = audit_sets(AUDIT_ITEMS, lambda kind: derived_seed(ctx.seed, "doctor-audit", kind), templates=ctx.templates)
    t0 = time.perf_counter()
    rep = baseline_audit(ctx.engine, sets)
    secs = time.perf_counter() - t0
    n = sum(r["n"] for r in rep.values())
    parts, outside = [], []
    for name, r in rep.items():
        lo, hi = binomial_interval(r["p_key"])
        r["interval"] = [lo, hi]
        if hi < r["expected"][0] or lo > r["expected"][1]:
            outside.append(name)
        parts.append(f"{name} {r['mean_p_key']:.2f} [{lo:.2f}, {hi:.2f}]{'(!)' if name in outside else ''}")
    expected = ", ".join(f"{name} {r['expected'][0]:.2f}-{r['expected'][1]:.2f}" for name, r in rep.items())
    return Check("baseline", not outside, f"mean P(key) [95% binomial interval] on {AUDIT_ITEMS} items each: " + ", ".join(parts),
                 invariant=False, numbers={name: {"mean_p_key": r["mean_p_key"], "interval": r["interval"], "n": r["n"]}
                                           for name, r in rep.items()},
                 details=[f"expected {expected}; (!) the interval lies outside: the model may not read these items "
                          "(a random model sits at 0.25)"]), n / secs


def check_speed(ctx: Context, cfg, items_per_s: float | None, study_rows=None) -> Check:
    """Rows per second of a batched masked forward (the evaluation's unit of work) and the
    projected time at that rate of the study ``cfg`` (a :class:`vheads.study.StudyConfig`;
    None: no projection), its rows counted by ``study_rows`` (:func:`vheads.study.study_rows`,
    handed in by the caller: the doctor stands below the study and does not import it)."""
    from vheads.engine import mask_keys, positions_mask, row_mask

    eng, pr = ctx.engine, ctx.prompt()
    lay = pr.layout
    T = lay.n_tokens
    L, H = eng.shape
    # the study's own batch (rows x prompt length within its token budget): a forward's cost
    # is far from linear in its rows, so a smaller batch would project a slower study
    B = max(1, min(cfg.run.batch_size, cfg.run.token_budget // T, MAX_SPEED_ROWS)) if cfg is not None else SPEED_ROWS
    g = torch.Generator().manual_seed(ctx.seed)
    heads = torch.rand(B, L, H, generator=g) < 0.1
    heads[:, [l for l in range(L) if l not in ctx.lm.attention_layers]] = False
    plan = eng.plan(B, [mask_keys(heads, row_mask(lay, "all").expand(B, T), positions_mask(T, lay.image_positions).expand(B, T))])
    eng.forward(pr, plan, logits_at=[T - 1])  # warm-up
    if ctx.lm.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    eng.forward(pr, plan, logits_at=[T - 1])
    if ctx.lm.device.type == "cuda":
        torch.cuda.synchronize()
    rows_per_s = B / (time.perf_counter() - t0)
    speed = f"{items_per_s:.1f} items/s (baseline audit), " if items_per_s else ""
    speed += f"{rows_per_s:.1f} rows/s masked at batch {B}"
    if cfg is None or study_rows is None:
        return Check("speed", None, speed, invariant=False, numbers={"items_per_s": items_per_s, "rows_per_s": rows_per_s})
    from vheads.discovery import resolve_k

    shape = (len(ctx.lm.attention_layers), H)
    k = resolve_k(*shape, cfg.k or None, cfg.selection)
    rows = study_rows(cfg, k, shape, pool_heads=shape)
    secs = sum(rows.values()) / rows_per_s
    numbers = {"items_per_s": items_per_s, "rows_per_s": rows_per_s, "study_rows": rows, "projected_s": secs}
    if not cfg.controls_h:
        return Check("speed", None, f"{speed}; the configured study: about {sum(rows.values()):,} distinct rows, "
                     f"{_duration(secs)} at that rate", invariant=False, numbers=numbers)
    # sequential controls: between every comparison stopping at its h-th draw reaching S and every one to R_max
    low = study_rows(cfg, k, shape, pool_heads=shape, sequential=True)
    low_s = sum(low.values()) / rows_per_s
    numbers |= {"study_rows_low": low, "projected_low_s": low_s}
    return Check("speed", None, f"{speed}; the configured study: {sum(low.values()):,} to {sum(rows.values()):,} distinct rows "
                 f"(every sequential control stopping at its h-th draw reaching S … every one to R_max, where S beats "
                 f"its controls), {_duration(low_s)} to {_duration(secs)} at that rate", invariant=False, numbers=numbers)


def _duration(secs: float) -> str:
    if secs < 120:
        return f"{secs:.0f} s"
    if secs < 7200:
        return f"{secs / 60:.0f} min"
    return f"{secs / 3600:.1f} h"
