"""``doctor``: every check on one loaded model; ``fast_checks``: the cheap ones a study runs first."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from vheads.doctor._backends import check_backends
from vheads.doctor._checks import (
    Context, check_batched, check_capture, check_empty_plan, check_image_tokens, check_mask, check_prefix_reuse, check_prompts,
    check_region_tokens, check_steer, check_template,
)
from vheads.doctor._model import check_baseline, check_dtypes, check_speed
from vheads.doctor._report import Check, DoctorReport

#: the invariants, in the order they print: a failure means vheads' numbers on this model are wrong
INVARIANTS: dict[str, Callable[[Context], Check]] = {
    "prompt": check_prompts,
    "template": check_template,
    "image tokens": check_image_tokens,
    "region tokens": check_region_tokens,
    "empty plan": check_empty_plan,
    "capture": check_capture,
    "mask": check_mask,
    "steer": check_steer,
    "batched head-sets": check_batched,
    "prefix reuse": check_prefix_reuse,
}
#: the cheap ones (one prompt per kind, three forwards of one item) ``vheads study`` runs before its first unit
FAST_CHECKS = ("prompt", "template", "image tokens", "empty plan", "mask")


def _guarded(name: str, fn: Callable[[], Check], ctx: Context, invariant: bool = True) -> Check:
    """``fn()``; an exception inside a check is that check failing, with the error's first line."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a doctor reports what broke, it does not stop at it
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return Check(name, False, f"raised {type(e).__name__}: {msg[:200]}", invariant=invariant)
    finally:
        ctx.reinstall()


def run_checks(ctx: Context, names: Iterable[str] = tuple(INVARIANTS)) -> list[Check]:
    """The invariants ``names`` on ``ctx``'s model, each guarded (:func:`_guarded`)."""
    unknown = [n for n in names if n not in INVARIANTS]
    if unknown:
        raise ValueError(f"unknown doctor check(s) {unknown}; choose from {', '.join(INVARIANTS)}")
    return [_guarded(n, lambda n=n: INVARIANTS[n](ctx), ctx) for n in names]


def fast_checks(lm, engine=None, templates=None, seed: int = 0) -> DoctorReport:
    """The checks of :data:`FAST_CHECKS` on a loaded model (``engine``: its engine, made if None)."""
    from vheads.engine import Engine

    ctx = _context(lm, engine or Engine(lm), templates, seed)
    return DoctorReport(lm.model_id, str(lm.device), str(lm.model.dtype).replace("torch.", ""), run_checks(ctx, FAST_CHECKS))


def _context(lm, engine, templates, seed: int) -> Context:
    from vheads.data import DEFAULT_TEMPLATES

    return Context(lm, engine, templates or DEFAULT_TEMPLATES, seed)


def doctor(model: str = "tiny", device: str = "cpu", dtype: str = "auto", revision: str | None = None,
           study=None, study_rows=None, trust_remote_code: bool = False, lm=None, device_map: str | None = None,
           quantization: str | None = None) -> DoctorReport:
    """Every check of the doctor on ``model`` (loaded here, or ``lm`` if given): the invariants,
    then bf16 vs fp32 P(option), P(option) under each attention backend per tower, the baseline audit on a few items, and the speed, with the
    projected time of ``study`` (a :class:`vheads.study.StudyConfig`, whose question templates
    the items are asked with; None: the tiny model's questions and no projection).

    ``device_map`` and ``quantization`` load the model as a study's keys of the same names do
    (:func:`vheads.models.load_model`): layers placed by accelerate, bitsandbytes 4bit / 8bit
    weights. Bad input (an unknown device, dtype, device map or quantization, a model path
    that does not exist) is a :class:`~vheads._errors.VheadsError` before the model loads."""
    from vheads.engine import Engine
    from vheads.models import check_device, check_load_options, load_model

    if lm is None:
        check_device(device)
        check_load_options(device, device_map, quantization)
        lm = load_model(model, revision, dtype, device, device_map=device_map, quantization=quantization,
                        trust_remote_code=trust_remote_code)
    ctx = _context(lm, Engine(lm), study.question_templates if study is not None else None, study.seed if study is not None else 0)
    checks = run_checks(ctx)
    checks.append(_guarded("bf16 vs fp32", lambda: check_dtypes(ctx, model, device_map, quantization), ctx, invariant=False))
    checks.append(_guarded("attention backends", lambda: check_backends(ctx), ctx, invariant=False))
    got: dict = {}

    def baseline() -> Check:
        c, got["items_per_s"] = check_baseline(ctx)
        return c

    checks.append(_guarded("baseline", baseline, ctx, invariant=False))
    checks.append(_guarded("speed", lambda: check_speed(ctx, study, got.get("items_per_s"), study_rows), ctx, invariant=False))
    return DoctorReport(lm.model_id, str(lm.device), str(lm.model.dtype).replace("torch.", ""), checks)
