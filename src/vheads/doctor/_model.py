"""The doctor's checks of the model itself (never invariants): bf16 vs fp32 P(option), the
baseline audit on a few items, and the speed and projected time of a study."""

from __future__ import annotations

import os
import time

import torch

from vheads.doctor._checks import Context
from vheads.doctor._report import Check

#: the evaluation kinds whose P(option) the dtype check compares
DTYPE_KINDS = ("grid-oracle", "grid-neutral", "class-matched", "class-mismatched", "text")
#: |ΔP(option)| between dtypes above which the doctor marks the check ✗ (not an invariant)
DTYPE_DRIFT = 0.05
AUDIT_ITEMS = 8
SPEED_ROWS = 32


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
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
        del lm2
    d = float((here - there).abs().max())
    agree = int((here.argmax(-1) == there.argmax(-1)).sum())
    return Check("bf16 vs fp32", d <= DTYPE_DRIFT, f"max |ΔP(option)| = {d:.3f} over {len(DTYPE_KINDS)} items ({str(ctx.lm.model.dtype).replace('torch.', '')} vs "
                 f"{other}); same top option on {agree}/{len(DTYPE_KINDS)}", invariant=False,
                 numbers={"max_diff": d, "agree": agree, "items": len(DTYPE_KINDS)})


def check_baseline(ctx: Context) -> tuple[Check, float]:
    """The baseline audit (:func:`vheads.evaluation.baseline_audit`) on a few items of each set;
    also returns the items per second it ran at."""
    from vheads._seeds import derived_seed
    from vheads.evaluation import audit_sets, baseline_audit

    sets = audit_sets(AUDIT_ITEMS, lambda kind: derived_seed(ctx.seed, "doctor-audit", kind), templates=ctx.templates)
    t0 = time.perf_counter()
    rep = baseline_audit(ctx.engine, sets)
    secs = time.perf_counter() - t0
    n = sum(r["n"] for r in rep.values())
    parts = [f"{name} {r['mean_p_key']:.2f}{'' if r['ok'] else '(!)'}" for name, r in rep.items()]
    expected = ", ".join(f"{name} {r['expected'][0]:.2f}-{r['expected'][1]:.2f}" for name, r in rep.items())
    ok = all(r["ok"] for r in rep.values())
    return Check("baseline", ok, f"mean P(key) on {AUDIT_ITEMS} items each: " + ", ".join(parts), invariant=False,
                 numbers={name: r["mean_p_key"] for name, r in rep.items()},
                 details=[f"expected {expected}; (!) outside: the model may not read these items (a random model sits at 0.25)"]), n / secs


def study_rows(cfg, main_k: int | None = None, heads: tuple[int, int] | None = None) -> dict[str, int]:
    """Batch rows a study of ``cfg`` runs, by stage, each row its probe memo
    (:class:`vheads.evaluation.ProbeMemo`) serves again counted once.

    - discovery: one capture row per item and setting query (``last``, ``qspan``) plus,
      with the ``out`` source, a greedy answer (4 tokens) and a teacher-forced row;
    - evaluation, per setting: S, its controls and the k sweep's sets (CERS and NCS):
      CERS two rows per item (steer onto the target and onto a distractor; symmetric CERS
      reads the same rows) and the β sweep's S and ``beta_sweep_controls`` draws at every β
      but the main one, NCS two arms per item at every row group, NCS_grid two rows per item,
      the text arm one. The memo serves again: the β sweep's point at the main β, the k
      sweep's point at the main k (``main_k``: the model's head-set size, None: unknown) and,
      once per model rather than per setting (every setting runs the same items), the
      unmasked baselines of NCS and the text arm and NCS_grid's all-heads bound.

    The score points (``scores``, on ``score_on``'s corpus × query pairs) and the causal
    setting (``causal_tests`` with NCS) are settings like the grid's; each head-output
    ablation of ``ablation`` runs NCS once more for S and its ``row_group_controls`` at the
    first row group (its baselines are the memo's). With ``heads`` = (attention layers,
    heads per layer), the causal map: every head alone and every whole layer in each of
    ``causal_tests`` under each ablation it takes (its own items: its own baselines, once).

    Left out: the head-set algebra, the pointing suite, and controls that two settings or
    two draws happen to share (heads in the same layers: most on small models), which the
    memo also serves once; so this is an upper bound on a model with few heads. The memo is
    one replica's: with several replicas (``run.backend = "ray"``) the shared rows run once
    on each.
    """
    n_strips = len(cfg.corpora) * len(cfg.queries) * cfg.n_discovery
    disc = n_strips * (1 + (5 if "out" in cfg.sources else 0))
    settings = len(cfg.corpora) * len(cfg.queries) * len(cfg.sources)
    if cfg.scores:
        settings += len(cfg.scores) * (1 if cfg.score_on == "first" else len(cfg.corpora) * len(cfg.queries))
    if "ncs" in cfg.causal_tests:
        settings += 1  # the causal setting
    controls = sum(cfg.controls.values())
    k_points = [kk for kk in dict.fromkeys(cfg.k_sweep) if kk != main_k]  # S@k=main_k is S
    k_sets = len(k_points) + len(cfg.k_sweep) * cfg.k_sweep_controls
    base = 1 + controls
    n = cfg.n_eval
    tests = set(cfg.tests)
    per_setting = once = 0
    if tests & {"cers", "cers-sym"}:
        per_setting += (base + k_sets) * 2 * n
        if "cers" in tests:  # the β sweep runs with CERS; the main β's rows are the main run's
            at_beta = 1 + min(cfg.beta_sweep_controls, cfg.controls.get("layer-matched", 0))
            per_setting += len({b for b in cfg.beta_sweep if b != cfg.beta}) * at_beta * 2 * n
    if "ncs" in tests:
        others = 1 + sum(cfg.controls.get(c, 0) for c in cfg.row_group_controls)
        per_setting += (base + k_sets) * 2 * n + sum(others * 2 * n for g in dict.fromkeys(cfg.row_groups) if g != "all")
        once += 2 * n  # the unmasked baselines of both arms
        if cfg.row_groups:
            per_setting += sum(others for a in cfg.ablation if a != "attention") * 2 * n  # the head-output ablations
    if "ncs-grid" in tests:
        per_setting += base * 2 * n
        once += 2 * n  # every head hidden from the cell: the same head-set in every setting
    if "text" in tests:
        per_setting += base * n
        once += n  # the unmasked baselines
    causal = 0
    if heads is not None:
        units = heads[0] * heads[1] + heads[0]  # every head alone, every whole layer
        per_item = {"ncs": 2, "ncs-grid": 2, "text": 1}  # rows per item of each test
        for t in cfg.causal_tests:
            runs = sum(1 for a in cfg.ablation if a == "attention" or (a != "mean" and t in ("ncs", "text")))
            causal += (units * runs + 1) * per_item[t] * n  # + the unmasked baselines, once
    return {"discovery": disc, "evaluation": settings * per_setting + once + causal}


def check_speed(ctx: Context, cfg, items_per_s: float | None) -> Check:
    """Rows per second of a batched masked forward (the evaluation's unit of work) and the
    projected time at that rate of the study ``cfg`` (a :class:`vheads.study.StudyConfig`;
    None: no projection)."""
    from vheads.engine import mask_keys, positions_mask, row_mask

    eng, pr = ctx.engine, ctx.prompt()
    lay = pr.layout
    T = lay.n_tokens
    L, H = eng.shape
    B = max(1, min(SPEED_ROWS, cfg.run.batch_size)) if cfg is not None else SPEED_ROWS
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
    if cfg is None:
        return Check("speed", None, speed, invariant=False, numbers={"items_per_s": items_per_s, "rows_per_s": rows_per_s})
    from vheads.discovery import resolve_k

    rows = study_rows(cfg, resolve_k(len(ctx.lm.attention_layers), H, cfg.k or None, cfg.selection), (len(ctx.lm.attention_layers), H))
    secs = sum(rows.values()) / rows_per_s
    return Check("speed", None, f"{speed}; the configured study: at most {sum(rows.values()):,} rows, {_duration(secs)} at that "
                 "rate", invariant=False,
                 numbers={"items_per_s": items_per_s, "rows_per_s": rows_per_s, "study_rows": rows, "projected_s": secs})


def _duration(secs: float) -> str:
    if secs < 120:
        return f"{secs:.0f} s"
    if secs < 7200:
        return f"{secs / 60:.0f} min"
    return f"{secs / 3600:.1f} h"
