"""Sequential rank p (Besag & Clifford, 1991): compare S with its random controls in batches,
and stop once the comparison is decided.

A fixed-R rank p runs every one of R controls, although where S sits inside its controls
(many reach T_S) the first few dozen already say so. Besag and Clifford's sequential Monte
Carlo p-value (J. Besag and P. Clifford, "Sequential Monte Carlo p-values", *Biometrika*
78(2), 301–304, 1991) draws controls one at a time and stops

- at the ``h``-th control with ``T_r ≥ T_S``, after ``L`` controls: ``p = h / L``;
- or after ``R_max`` controls, ``g < h`` of them reaching T_S: ``p = (1 + g) / (R_max + 1)``
  (the fixed-R rank p of :func:`vheads.evaluation.rank_p` with R = R_max).

Under the null hypothesis that S is exchangeable with its controls (S one more draw of the
same pool; ties with T_S count against S), this p is valid: ``P(p ≤ u) ≤ u`` for every u,
with equality at the values it can take. Its floor is the fixed-R floor ``1 / (R_max + 1)``;
the expected number of controls run is about ``h / P(T_r ≥ T_S)`` when S is inside them,
so a head-set that is not special costs a few dozen controls instead of R_max.

**Batches.** Controls run in batches (one batched forward holds many head-sets); the p is
computed from the draws *in their drawn order* as if they had been run one at a time: ``L``
is the position of the h-th control reaching T_S, and the draws of the last batch after it
ran (their outcomes are stored) but do not enter p. The batch size therefore changes
neither p nor its validity, only how many forwards run past the stopping point.

**A family of settings.** Holm's step-down (:func:`vheads.evaluation.holm`) needs only
that every p of the family is valid (``P(p ≤ u) ≤ u`` under its null), whatever their
dependence; Besag–Clifford p's are, so Holm over them keeps the family-wise error rate at
α. The Holm-adjusted floor of a family of m is ``m / (R_max + 1)``: an R_max with
``m / (R_max + 1) > α`` can never reject, and its verdicts read *cannot tell*.

**Stopping once the family's decision is settled** (in the spirit of Gandy & Hahn's
MMCTest, 2014, for the one direction that saves draws). A comparison not yet stopped,
after n draws with e < h reaching T_S, can still end anywhere in ``[lo, hi]``
(:func:`p_bounds`): ``lo = (1 + e) / (R_max + 1)`` (no later draw reaches T_S) and
``hi = h / (n + h − e)`` (the next h − e all do; ``(1 + e + R_max − n) / (R_max + 1)`` where
fewer than h − e draws are left). Holm is monotone — lowering any p of the family never
un-rejects a member — so where Holm over the family with every open member at its ``lo``
(and every stopped one at its p) does not reject a member, no later draw can make it
rejected: its verdict is settled (:func:`settled_no`) and it stops (``stopped ==
"decided"``). Its p is then ``hi`` at the draws it ran: at least the p its full sequence
would have given, whatever that sequence, so still a valid p, and a reviewer recomputes it
from n, e, h and R_max. Every member of a family the report adjusts together must be in
the family the rule reads (the rule may read fewer members — those left out count as
rejected, at p = 0 — never more); a settled member keeps its verdict, and the other
members' p's are no smaller than with its full sequence, so the family-wise error stays
≤ α. (The other direction, a rejection settled before R_max, needs ``hi`` to pass Holm:
with e = 0 that is n ≈ R_max, so it saves nothing and is not used.)

Everything here is pure (numpy, no model): :func:`sequential_rank_p` reads a sequence of
control statistics, :func:`run_sequential` drives any ``batch → statistics`` callback and
:func:`sequential_decisions` turns a family into verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: verdicts of one comparison of a family (:func:`sequential_decisions`)
VERDICTS = ("yes", "no", "cannot tell")
#: why a comparison stopped: h controls reached T_S; R_max controls compared; fewer than
#: R_max exist (a small pool compared whole, or a run stopped by another test's rule); its
#: family's verdict on it was settled before either (:func:`settled_no`; p is then ``hi``)
STOPS = ("h", "R_max", "all", "decided")


def _check_h_rmax(h: int, R_max: int) -> None:
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 1:
        raise ValueError(f"h (controls_h) must be an integer ≥ 1, got {h!r}")
    if isinstance(R_max, bool) or not isinstance(R_max, (int, np.integer)) or R_max < h:
        raise ValueError(f"R_max must be an integer ≥ h = {h}, got {R_max!r}")


@dataclass(frozen=True)
class SequentialRankP:
    """A Besag–Clifford rank p of S against controls compared in their drawn order.

    ``compared`` (L): the controls that enter p — up to and including the h-th one reaching
    T_S (``stopped == "h"``), else all of them up to R_max; ``n_at_least``: how many of those
    reached T_S; ``ran``: controls whose statistic was given (≥ compared: a batch runs past
    the stopping point); ``stopped``: one of :data:`STOPS`."""

    p: float
    n_at_least: int
    compared: int
    ran: int
    h: int
    R_max: int
    stopped: str

    @property
    def R(self) -> int:
        """The controls p is over (as :class:`vheads.evaluation.RankP`'s R)."""
        return self.compared

    @property
    def floor(self) -> float:
        """The smallest p possible: ``1 / (R_max + 1)`` (``1 / (L + 1)`` when fewer than R_max exist)."""
        return 1 / ((self.compared if self.stopped == "all" else self.R_max) + 1)

    def to_dict(self) -> dict:
        return {"p": self.p, "n_at_least": self.n_at_least, "compared": self.compared, "ran": self.ran, "h": self.h,
                "R_max": self.R_max, "stopped": self.stopped, "floor": self.floor}


def stop_position(t_s: float, t_controls, h: int) -> int | None:
    """1-based position of the h-th control with ``T_r ≥ T_S`` in ``t_controls`` (draw
    order), or ``None`` when fewer than h reach T_S."""
    hits = np.flatnonzero(np.asarray(t_controls, dtype=float) >= float(t_s))
    return int(hits[h - 1]) + 1 if len(hits) >= h else None


def sequential_rank_p(t_s: float, t_controls, h: int, R_max: int) -> SequentialRankP:
    """Besag–Clifford p of ``t_s`` against ``t_controls`` (draw order; NaN-free).

    With L the position of the h-th ``T_r ≥ T_S`` among the first R_max: ``p = h / L``.
    Otherwise, over the first ``n = min(len, R_max)`` controls with g reaching T_S:
    ``p = (1 + g) / (n + 1)`` — the fixed-R rank p (``stopped`` ``"R_max"`` when n = R_max,
    ``"all"`` when fewer were given: a small pool compared whole is then the exact
    permutation p). Controls past the stopping point are counted in ``ran`` only."""
    _check_h_rmax(h, R_max)
    t_s = float(t_s)
    if not np.isfinite(t_s):
        raise ValueError(f"t_s must be finite, got {t_s}")
    t = np.asarray(t_controls, dtype=float).reshape(-1)
    if len(t) < 1:
        raise ValueError("t_controls needs at least one control statistic")
    if not np.all(np.isfinite(t)):
        raise ValueError(f"t_controls must be finite; {int(np.sum(~np.isfinite(t)))} value(s) are not")
    head = t[:R_max]
    L = stop_position(t_s, head, h)
    if L is not None:
        return SequentialRankP(h / L, h, L, len(t), h, R_max, "h")
    g = int(np.sum(head >= t_s))
    return SequentialRankP((1 + g) / (len(head) + 1), g, len(head), len(t), h, R_max,
                           "R_max" if len(head) == R_max else "all")


def run_sequential(t_s: float, statistics: Callable[[int, int], Sequence[float]], h: int, R_max: int, batch: int,
                   available: int | None = None) -> tuple[SequentialRankP, np.ndarray]:
    """Drive a sequential comparison: ``statistics(lo, hi)`` returns ``T_r`` of controls
    ``lo .. hi − 1`` (draw order); batches of ``batch`` are asked for until h controls have
    reached T_S or R_max (or ``available``, the controls that exist) have run. Returns the
    p (:func:`sequential_rank_p`) and every statistic computed."""
    _check_h_rmax(h, R_max)
    if batch < 1:
        raise ValueError(f"batch must be ≥ 1, got {batch}")
    end = R_max if available is None else min(R_max, available)
    got: list[float] = []
    while len(got) < end:
        lo, hi = len(got), min(end, len(got) + batch)
        vals = np.asarray(statistics(lo, hi), dtype=float).reshape(-1)
        if len(vals) != hi - lo:
            raise ValueError(f"statistics({lo}, {hi}) returned {len(vals)} values, expected {hi - lo}")
        got.extend(vals.tolist())
        if stop_position(t_s, got, h) is not None:
            break
    return sequential_rank_p(t_s, got, h, R_max), np.asarray(got)


def batches_needed(t_s: float, t_controls, h: int, R_max: int, batch: int) -> int:
    """How many batches of ``batch`` the run of :func:`run_sequential` asks for, given the
    statistics of the controls in draw order (the study's staged units read it)."""
    _check_h_rmax(h, R_max)
    L = stop_position(t_s, np.asarray(t_controls, dtype=float)[:R_max], h)
    n = min(R_max, len(t_controls)) if L is None else L
    return max(1, -(-n // batch))


@dataclass(frozen=True)
class SequentialDecision:
    """One comparison of a family: its p, Holm-adjusted p, the family's Holm floor and the verdict."""

    rank: SequentialRankP
    p_holm: float
    holm_floor: float
    verdict: str


def holm_floor(m: int, R_max: int) -> float:
    """The smallest Holm-adjusted p a family of ``m`` comparisons with ``R_max`` controls
    each can reach: ``min(1, m / (R_max + 1))``."""
    return min(1.0, m / (R_max + 1))


def sequential_decisions(ranks: Sequence[SequentialRankP], alpha: float = 0.05) -> list[SequentialDecision]:
    """Holm over a family's Besag–Clifford p's (valid p's: the family-wise error stays ≤ α),
    and a verdict per comparison:

    - ``yes``: Holm-adjusted p ≤ α;
    - ``cannot tell``: not rejected, and either the family's Holm floor ``m / (R_max + 1)``
      exceeds α (these controls could never reject) or all R_max controls ran without h
      reaching T_S and the unadjusted p ≤ α (evidence that more controls might settle);
    - ``no``: otherwise — h controls reached T_S (S sits inside its controls), or the rank
      p over R_max exceeds α.
    """
    from vheads.evaluation._stats import holm

    if not ranks:
        return []
    adj = holm([r.p for r in ranks], alpha=alpha)
    out = []
    m = len(ranks)
    for r, p_adj, rej in zip(ranks, adj.p_adjusted, adj.reject):
        floor = holm_floor(m, r.compared if r.stopped == "all" else r.R_max)
        if rej:
            verdict = "yes"
        elif floor > alpha or (r.stopped != "h" and r.p <= alpha):
            verdict = "cannot tell"
        else:
            verdict = "no"
        out.append(SequentialDecision(r, float(p_adj), floor, verdict))
    return out


def p_bounds(t_s: float, t_controls, h: int, R_max: int) -> tuple[float, float]:
    """``(lo, hi)``: the least and the largest Besag–Clifford p a comparison can still end with,
    given its first draws ``t_controls`` (draw order; fewer than R_max, fewer than h of them
    reaching T_S): ``lo = (1 + e) / (R_max + 1)``; ``hi = h / (n + h − e)`` where h − e more
    draws fit in R_max, else ``(1 + e + R_max − n) / (R_max + 1)``. A stopped comparison
    (h reached, or R_max run) has ``lo = hi = p``."""
    _check_h_rmax(h, R_max)
    t = np.asarray(t_controls, dtype=float).reshape(-1)[:R_max]
    L = stop_position(t_s, t, h)
    if L is not None or len(t) >= R_max:
        p = sequential_rank_p(t_s, t, h, R_max).p
        return p, p
    n, e = len(t), int(np.sum(t >= float(t_s)))
    hi = h / (n + h - e) if n + h - e <= R_max else (1 + e + R_max - n) / (R_max + 1)
    return (1 + e) / (R_max + 1), hi


def settled_no(lo, alpha: float = 0.05) -> list[bool]:
    """Which members of a family Holm cannot reject whatever their remaining draws: Holm over
    ``lo`` — each open member's :func:`p_bounds` ``lo``, each stopped member's p — does not
    reject them (Holm is monotone, so larger final p's reject no more)."""
    from vheads.evaluation._stats import holm

    if not len(lo):
        return []
    return [not bool(r) for r in holm([float(x) for x in lo], alpha=alpha).reject]


def control_rank_p(t_s: float, t_controls, h: int, R_max: int | None = None, settled: bool = False) -> SequentialRankP:
    """The rank p of S against one control's statistics in draw order, as a study reports it:

    - ``h = 0`` (``controls_h = 0``): the fixed-R rank p over every control given,
      ``(1 + g) / (n + 1)`` (:func:`vheads.evaluation.rank_p`), ``stopped`` ``"all"``;
    - ``h ≥ 1``: :func:`sequential_rank_p` with ``R_max`` (default: the controls given);
      an ``R_max`` below h can never see h controls reach T_S, so its p is the fixed-R
      rank p over the first R_max (``stopped`` ``"R_max"``).

    With ``settled`` (the study stopped it once its family's verdict was settled, before h
    draws reached T_S and before R_max: :func:`settled_no`), p is the largest it could still
    have become, :func:`p_bounds`' ``hi``, ``stopped`` ``"decided"``.

    The same p whatever was stored past the stopping point (a batch runs past it)."""
    t = np.asarray(t_controls, dtype=float).reshape(-1)
    R_max = len(t) if R_max is None else int(R_max)
    if settled and 1 <= h <= R_max:
        rp = sequential_rank_p(t_s, t, int(h), R_max)
        if rp.stopped == "all":  # fewer than R_max ran and fewer than h reached T_S
            return SequentialRankP(p_bounds(t_s, t, int(h), R_max)[1], rp.n_at_least, rp.compared, rp.ran, int(h), R_max,
                                   "decided")
        return rp
    if h == 0 or R_max < h:
        head = t if h == 0 else t[:R_max]
        g = int(np.sum(head >= float(t_s)))
        stopped = "all" if h == 0 or len(head) < R_max else "R_max"
        return SequentialRankP((1 + g) / (len(head) + 1), g, len(head), len(t), int(h), R_max, stopped)
    return sequential_rank_p(t_s, t, int(h), R_max)


def sequential_params(config: dict) -> tuple[int, int]:
    """``(h, batch)`` of a stored config (a store's ``config`` meta): a run from before the
    sequential rank p has no ``controls_h`` and compared every draw (h = 0)."""
    h = config.get("controls_h", 0) if isinstance(config, dict) else 0
    b = config.get("controls_batch", 32) if isinstance(config, dict) else 32
    return (int(h) if isinstance(h, int) else 0), (int(b) if isinstance(b, int) else 32)
