"""The headline β of a study: the steering strength Table 3's CERS is tested at, chosen by a
rule fixed before S is looked at.

Rules (config key ``beta_rule``):

- ``fixed``: the config's ``beta`` (runs before wave 4 all did this; the seed used 1e4).
- ``controls[:TOL]`` (default ``controls:0.05``): the β sweep runs first, in its own units;
  from its *control* head-sets alone (the first ``beta_sweep_controls`` layer-matched draws
  of every setting, S never read) the headline β is the largest sweep point at which their
  CERS (each draw's mean over the items, in p4) has a root mean square of at most TOL: the
  strongest steering that leaves random heads of S's layers unmoved. On the tiny model
  attention saturates from β = 10 on and steering random heads then moves answers by
  ±0.1–0.3, so the rule keeps it in the range where steering is selective. When no point
  meets TOL, the point of smallest RMS. A study without sweep controls (``beta_sweep = []``
  or ``beta_sweep_controls = 0``) has nothing to apply it to: it takes ``beta``, and the
  record says so.

The rule, its inputs and the β it gave are stored in the run's meta (``headline_beta``) and
stated in the report; the CERS units and the pointing suite then run at that β.
"""

from __future__ import annotations

import json
import math

import numpy as np

DEFAULT_TOLERANCE = 0.05

from vheads._ids import BETA_SWEEP_LIKE, parse_test_id


def parse_beta_rule(rule: str) -> tuple[str, float | None]:
    """``"fixed"`` → ``("fixed", None)``; ``"controls"`` / ``"controls:0.05"`` → ``("controls", 0.05)``.
    Anything else is a ``ValueError`` naming the choices."""
    name, sep, tol = str(rule).partition(":")
    if name == "fixed" and not sep:
        return "fixed", None
    if name == "controls":
        try:
            value = float(tol) if sep else DEFAULT_TOLERANCE
        except ValueError:
            value = float("nan")
        if not (math.isfinite(value) and 0 < value < 1):
            raise ValueError(f"the tolerance after 'controls:' must be a number in (0, 1), got {tol!r}")
        return "controls", value
    raise ValueError(f"must be 'fixed' (the config's beta) or 'controls[:TOL]' (from the sweep's controls), got {rule!r}")


def controls_rule(control_cers: dict[float, np.ndarray], tolerance: float) -> tuple[float, dict[float, float], bool]:
    """The ``controls`` rule on ``control_cers`` (β → each control draw's CERS, ``[n_draws]``):
    ``rms[β] = sqrt(mean_d CERS_d²)``; the largest β with ``rms ≤ tolerance``, else the β of
    smallest RMS. Returns (β, rms by β, whether a point met the tolerance)."""
    rms = {float(b): float(np.sqrt(np.mean(np.square(v)))) for b, v in sorted(control_cers.items()) if len(v)}
    if not rms:
        raise ValueError("the controls rule needs the β sweep's control draws; none are stored")
    ok = [b for b, r in rms.items() if r <= tolerance]
    return (max(ok) if ok else min(rms, key=rms.get)), rms, bool(ok)


def headline_beta(store, cfg) -> float:
    """The headline β of ``cfg``'s study, decided once and kept in ``store``'s meta
    (``headline_beta``: JSON {beta, rule, tolerance, rms, met, n_draws}); the ``controls``
    rule reads the stored β-sweep outcomes of the control draws only."""
    have = store.get_meta("headline_beta")
    if have is not None:
        return float(json.loads(have)["beta"])
    name, tol = parse_beta_rule(cfg.beta_rule)
    record: dict = {"rule": cfg.beta_rule}
    if name == "controls" and not (cfg.beta_sweep and cfg.beta_sweep_controls and "layer-matched" in cfg.controls):
        record.update(beta=float(cfg.beta), applied="fixed: the study has no beta-sweep controls to apply the rule to")
    elif name == "fixed":
        record["beta"] = float(cfg.beta)
    else:
        rows = store.query("SELECT test, setting, headset_id, avg(value) FROM outcomes WHERE test LIKE ? "
                           "AND headset_id LIKE 'layer-matched#%' GROUP BY test, setting, headset_id", BETA_SWEEP_LIKE)
        by_beta: dict[float, list[float]] = {}
        for test, _, _, v in rows:
            by_beta.setdefault(parse_test_id(test).value, []).append(float(v))
        beta, rms, met = controls_rule({b: np.array(v) for b, v in by_beta.items()}, tol)
        record.update(beta=beta, tolerance=tol, rms={f"{b:g}": r for b, r in rms.items()}, met=met,
                      n_draws=len(next(iter(by_beta.values()))))
    store.set_meta(headline_beta=json.dumps(record))
    return float(record["beta"])


#: the β points and layer-matched draws ``vheads evaluate --beta-rule controls`` sweeps (the
#: study's defaults, ``beta_sweep`` and ``beta_sweep_controls``)
EVALUATE_SWEEP = (1.0, 10.0, 100.0, 1000.0, 10000.0)
EVALUATE_SWEEP_DRAWS = 5


def beta_by_rule(engine, headsets: dict, rule: str, beta: float, n: int, seed: int, *, steer_rows: str = "all",
                 source=None, batch_size: int = 128, progress: bool = False) -> tuple[float, dict]:
    """The β ``vheads evaluate`` steers at, chosen by the study's rule (:func:`parse_beta_rule`):
    ``fixed`` → ``beta``; ``controls[:TOL]`` → CERS of :data:`EVALUATE_SWEEP_DRAWS`
    layer-matched draws of every head-set at each point of :data:`EVALUATE_SWEEP` (S's own
    values never read), then :func:`controls_rule` over those draws, as the study does.
    Returns ``(β, record)``, the record as the study stores it (rule, tolerance, rms by β, met)."""
    from vheads.evaluation import evaluate_headsets

    name, tol = parse_beta_rule(rule)
    if name == "fixed":
        return float(beta), {"rule": rule, "beta": float(beta)}
    by_beta: dict[float, list[float]] = {}
    for b in EVALUATE_SWEEP:
        results = evaluate_headsets(engine, headsets, ["cers"], f"layer-matched:{EVALUATE_SWEEP_DRAWS}", n, b, "all", seed,
                                    batch_size, progress, steer_rows, source)
        for r in results:
            by_beta.setdefault(b, []).extend(float(np.mean(r.outcomes.values[j])) for j, hid in enumerate(r.headset_ids)
                                             if hid.startswith("layer-matched#"))
    chosen, rms, met = controls_rule({b: np.array(v) for b, v in by_beta.items()}, tol)
    return chosen, {"rule": rule, "beta": chosen, "tolerance": tol, "rms": {f"{b:g}": r for b, r in rms.items()}, "met": met,
                    "n_draws": len(next(iter(by_beta.values())))}
