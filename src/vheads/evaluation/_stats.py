"""Statistics of the causal tests: one function per statistic, formula in its docstring.

Notation: ``x_i`` (i = 1..n) are per-item outcomes of one head-set (a CERS contrast, an
NCS drop); ``T_S`` is a head-set's test statistic (a mean over items) and ``T_1..T_R`` the
same statistic for its R control head-sets. Every function validates its input (finite
values, matching lengths, enough items) and returns a small frozen dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

ALTERNATIVES = ("two-sided", "greater", "less")


def _vector(x, what: str, min_n: int = 1) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a 1-d array of per-item values, got shape {arr.shape}")
    if len(arr) < min_n:
        raise ValueError(f"{what} needs at least {min_n} values, got {len(arr)}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be finite; {int(np.sum(~np.isfinite(arr)))} value(s) are not")
    return arr


def _scalar(v, what: str) -> float:
    v = float(v)
    if not np.isfinite(v):
        raise ValueError(f"{what} must be finite, got {v}")
    return v


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")


@dataclass(frozen=True)
class Interval:
    """A mean and its interval ``[low, high]`` over ``n`` items."""

    mean: float
    low: float
    high: float
    n: int
    confidence: float


def t_interval(x, confidence: float = 0.95) -> Interval:
    """Per-item mean with a t-interval.

    ``mean ± t_{(1+c)/2, n-1} · sd / √n``, with ``sd`` the sample SD (ddof = 1) and
    ``t_{q, n-1}`` the q-quantile of Student's t with n − 1 degrees of freedom
    (c = 0.95 gives ``t_{0.975, n-1}``). Needs n ≥ 2.
    """
    _check_confidence(confidence)
    x = _vector(x, "x", min_n=2)
    n = len(x)
    half = sps.t.ppf((1 + confidence) / 2, df=n - 1) * x.std(ddof=1) / np.sqrt(n)
    m = float(x.mean())
    return Interval(m, m - half, m + half, n, confidence)


@dataclass(frozen=True)
class BootstrapInterval(Interval):
    """A percentile-bootstrap interval, with the resamples and seed it came from."""

    n_resamples: int = 0
    seed: int = 0


def bootstrap_ci(x, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> BootstrapInterval:
    """Percentile bootstrap interval of the mean of ``x``.

    With ``rng = numpy.random.default_rng(seed)``, draw an index matrix
    ``I = rng.integers(0, n, size=(B, n))`` (B = ``n_resamples``; row b is resample b, items
    drawn with replacement), take ``m_b = mean_j x[I[b, j]]``, and report the
    ``(1−c)/2`` and ``(1+c)/2`` percentiles of ``m_1..m_B`` (numpy's default linear
    interpolation). This is the same resampling as ``scipy.stats.bootstrap(...,
    method="percentile")`` with the same generator.
    """
    _check_confidence(confidence)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be an integer ≥ 1, got {n_resamples!r}")
    x = _vector(x, "x", min_n=1)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_resamples, len(x)))  # [B, n]
    means = x[idx].mean(axis=1)  # [B]
    low, high = np.percentile(means, [100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2])
    return BootstrapInterval(
        float(x.mean()), float(low), float(high), len(x), confidence, int(n_resamples), seed
    )


def welch_interval(x, y, confidence: float = 0.95) -> Interval:
    """Difference of two independent means, ``mean(x) − mean(y)``, with a Welch t-interval.

    ``d ± t_{(1+c)/2, ν} · sqrt(s_x²/n_x + s_y²/n_y)`` with sample variances (ddof = 1) and
    the Welch–Satterthwaite degrees of freedom
    ``ν = (s_x²/n_x + s_y²/n_y)² / [(s_x²/n_x)²/(n_x − 1) + (s_y²/n_y)²/(n_y − 1)]``
    (``scipy.stats.ttest_ind(x, y, equal_var=False).confidence_interval``). This is NCS's
    interval: its two arms are different items, so both arms' variances enter. ``n`` of the
    result is n_x. Needs n ≥ 2 in each arm; when both arms are constant the interval is
    the point.
    """
    _check_confidence(confidence)
    x = _vector(x, "x", min_n=2)
    y = _vector(y, "y", min_n=2)
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    d = float(x.mean() - y.mean())
    se2 = vx + vy
    if se2 == 0:
        return Interval(d, d, d, len(x), confidence)
    df = se2**2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))
    half = float(sps.t.ppf((1 + confidence) / 2, df=df) * np.sqrt(se2))
    return Interval(d, d - half, d + half, len(x), confidence)


def bootstrap_diff_ci(x, y, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> BootstrapInterval:
    """Percentile bootstrap interval of ``mean(x) − mean(y)``, both arms resampled.

    With ``rng = numpy.random.default_rng(seed)``: ``I = rng.integers(0, n_x, (B, n_x))``
    then ``J = rng.integers(0, n_y, (B, n_y))``; ``d_b = mean_j x[I[b, j]] − mean_j
    y[J[b, j]]``; report the ``(1−c)/2`` and ``(1+c)/2`` percentiles of ``d_1..d_B``. The same
    resampling as ``scipy.stats.bootstrap((x, y), statistic, method="percentile")`` (independent
    samples) with the same generator.
    """
    _check_confidence(confidence)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be an integer ≥ 1, got {n_resamples!r}")
    x = _vector(x, "x", min_n=1)
    y = _vector(y, "y", min_n=1)
    rng = np.random.default_rng(seed)
    ix = rng.integers(0, len(x), size=(n_resamples, len(x)))  # [B, n_x]
    iy = rng.integers(0, len(y), size=(n_resamples, len(y)))  # [B, n_y]
    diffs = x[ix].mean(axis=1) - y[iy].mean(axis=1)  # [B]
    low, high = np.percentile(diffs, [100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2])
    return BootstrapInterval(float(x.mean() - y.mean()), float(low), float(high), len(x), confidence,
                             int(n_resamples), seed)


#: fewer items than this per arm: a percentile bootstrap may undercover, so BCa is shown beside it
MIN_BOOTSTRAP_N = 30


def bca_diff_ci(x, y, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> BootstrapInterval:
    """Bias-corrected and accelerated (BCa) bootstrap interval of ``mean(x) − mean(y)``, both
    arms resampled: ``scipy.stats.bootstrap((x, y), mean(x) − mean(y), method="BCa",
    n_resamples=B, rng=numpy.random.default_rng(seed))`` (bias correction from the share of
    resampled differences below the observed one, acceleration from the jackknife of each
    arm). With few items per arm (below :data:`MIN_BOOTSTRAP_N`) the percentile interval
    of :func:`bootstrap_diff_ci` tends to be too narrow; BCa corrects part of that."""
    _check_confidence(confidence)
    x = _vector(x, "x", min_n=2)
    y = _vector(y, "y", min_n=2)
    if float(np.ptp(x)) == 0 and float(np.ptp(y)) == 0:  # no spread: the interval is the point
        d = float(x.mean() - y.mean())
        return BootstrapInterval(d, d, d, len(x), confidence, int(n_resamples), seed)
    res = sps.bootstrap((x, y), lambda a, b, axis=-1: a.mean(axis=axis) - b.mean(axis=axis), n_resamples=n_resamples,
                        confidence_level=confidence, method="BCa", rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return BootstrapInterval(float(x.mean() - y.mean()), float(ci.low), float(ci.high), len(x), confidence,
                             int(n_resamples), seed)


@dataclass(frozen=True)
class RankP:
    """One-sided rank p of a head-set against R controls; ``n_at_least`` = #{T_r ≥ T_S}."""

    p: float
    n_at_least: int
    R: int

    @property
    def floor(self) -> float:
        """The smallest p possible with R controls, 1 / (R + 1)."""
        return 1 / (self.R + 1)


def rank_p(t_s: float, t_controls) -> RankP:
    """One-sided rank p: ``p = (1 + #{r : T_r ≥ T_S}) / (R + 1)``.

    Controls that tie with T_S count against S. The floor is 1 / (R + 1) (S above every
    control); p = 1 when every control reaches T_S.
    """
    t_s = _scalar(t_s, "t_s")
    t = _vector(t_controls, "t_controls", min_n=1)
    n_ge = int(np.sum(t >= t_s))
    return RankP((1 + n_ge) / (len(t) + 1), n_ge, len(t))


@dataclass(frozen=True)
class Holm:
    """Holm-adjusted p-values of a family, in the input order, and which are rejected at alpha."""

    p_adjusted: np.ndarray
    reject: np.ndarray
    alpha: float


def holm(pvals, alpha: float = 0.05) -> Holm:
    """Holm step-down adjustment over a family of m tests.

    Sort ``p_(1) ≤ … ≤ p_(m)``; ``p̃_(i) = min(1, max_{j ≤ i} (m − j + 1) · p_(j))``; reject
    where ``p̃ ≤ alpha``. The same numbers as ``statsmodels.stats.multitest.multipletests(...,
    method="holm")`` (checked in the tests) — not its default, ``"hs"`` (Holm-Šidák), which
    is slightly less conservative. Computed here with numpy because multipletests runs a
    full ``gc.collect()`` on every call (about a second in a process holding a model).
    """
    p = _vector(pvals, "pvals", min_n=1)
    if np.any((p < 0) | (p > 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {p[(p < 0) | (p > 1)].tolist()}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha}")
    m = len(p)
    order = np.argsort(p, kind="mergesort")  # ties keep their input order
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))  # p̃_(i), sorted
    p_adj = np.empty(m)
    p_adj[order] = stepped
    return Holm(p_adj, p_adj <= alpha, alpha)


def holm_floors(n_compared) -> np.ndarray:
    """The smallest Holm-adjusted p each member of a family can reach, in input order.

    Member i is compared with ``n_i`` distinct control head-sets, so its rank p is one of
    ``j / (n_i + 1)``, j = 1 … n_i + 1, at least ``f_i = 1 / (n_i + 1)``. Holm's adjusted p
    is non-decreasing in every raw p of the family, so each member's smallest adjusted p is
    reached when every member sits at its own floor: the floors are :func:`holm` of
    ``(f_1, …, f_m)``. Sorted ``f_(1) ≤ … ≤ f_(m)`` (``f_(1)`` from the family's largest n),
    the member at place r gets ``min(1, max_{j ≤ r} (m − j + 1) · f_(j))``. With one n for
    all, that is ``m / (n + 1)``; every floor is at least ``max(m / (n_max + 1), 1 / (n_i + 1))``,
    and above it when several members share a small n (n = 99, 9, 9: the floors are 0.03,
    0.2, 0.2, not 0.1). Checked against an enumeration of every attainable rank p with
    statsmodels' Holm in the tests.
    """
    n = np.asarray(n_compared)
    if n.ndim != 1 or not len(n):
        raise ValueError(f"n_compared must be a non-empty 1-d list of control counts, got {n_compared!r}")
    if not np.issubdtype(n.dtype, np.integer) or np.any(n < 1):
        raise ValueError(f"each member needs a whole number ≥ 1 of distinct controls compared, got {list(n_compared)}")
    return holm(1.0 / (n.astype(float) + 1)).p_adjusted


def required_n(m: int, alpha: float = 0.05) -> int:
    """The fewest distinct controls per member at which Holm over m members can reach
    ``alpha``: the smallest n with ``m / (n + 1) ≤ alpha``, i.e. ``n ≥ m / alpha − 1``
    (239 for m = 12 at 0.05; 19 for a single test)."""
    if m < 1 or not 0 < alpha < 1:
        raise ValueError(f"need a family of m ≥ 1 and 0 < alpha < 1, got m={m}, alpha={alpha}")
    return max(1, int(np.ceil(m / alpha - 1e-9)) - 1)


def member_required_n(n_compared, i: int, alpha: float = 0.05) -> int:
    """The fewest distinct controls member ``i`` needs, the family's other n's as they are,
    for its Holm floor (:func:`holm_floors`) to reach ``alpha``. At most :func:`required_n` of
    the family's size (then its rank p comes first and Holm multiplies it by m); fewer where
    the other members' n's are large (n's of 99, 99, 99 beside it: 19, the single-test floor)."""
    n = [int(x) for x in n_compared]
    if not 0 <= i < len(n):
        raise ValueError(f"member {i} is not in a family of {len(n)}")
    lo, hi = 1, max(required_n(len(n), alpha), 1)
    while lo < hi:  # the floor falls as n_i grows: the smallest n_i that reaches alpha
        mid = (lo + hi) // 2
        if holm_floors(n[:i] + [mid] + n[i + 1:])[i] <= alpha + 1e-12:
            hi = mid
        else:
            lo = mid + 1
    return lo


#: a verdict's three values: S beats its controls; it does not; the controls compared cannot say
VERDICTS = ("yes", "no", "cannot tell")


def verdict(p_holm: float, floor: float, alpha: float = 0.05) -> str:
    """``"cannot tell"`` where ``floor`` — the smallest adjusted p the member could reach
    with the controls it was compared with (:func:`holm_floors`; ``1 / (n + 1)`` for a test
    outside any family) — is above ``alpha``: no outcome of S could have read "yes", so a
    "no" would be no evidence. Else ``"yes"`` where ``p_holm ≤ alpha``, ``"no"`` where not."""
    p_holm, floor = _scalar(p_holm, "p_holm"), _scalar(floor, "floor")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha}")
    if floor > alpha:
        return "cannot tell"
    return "yes" if p_holm <= alpha else "no"


@dataclass(frozen=True)
class ZScore:
    """How many control SDs a head-set's statistic lies above the controls' mean."""

    z: float
    mean: float
    sd: float
    R: int


def z_score(t_s: float, t_controls) -> ZScore:
    """``z = (T_S − mean_r T_r) / SD_r(T_r)``, SD the sample SD (ddof = 1). Needs R ≥ 2.

    If every control has the same value (SD = 0), z is ±inf, or nan when T_S equals it.
    """
    t_s = _scalar(t_s, "t_s")
    t = _vector(t_controls, "t_controls", min_n=2)
    mean, sd = float(t.mean()), float(t.std(ddof=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = float(np.float64(t_s - mean) / sd)
    return ZScore(z, mean, sd, len(t))


@dataclass(frozen=True)
class PairedT:
    """A paired t-test over n items: ``mean_diff`` = mean of a_i − b_i."""

    t: float
    p: float
    df: int
    mean_diff: float
    alternative: str


def paired_t(a, b, alternative: str = "two-sided") -> PairedT:
    """Paired t-test of ``a`` against ``b`` over the same n items.

    ``d_i = a_i − b_i``, ``t = mean(d) / (sd(d) / √n)`` with n − 1 degrees of freedom
    (``scipy.stats.ttest_rel``). ``alternative``: ``"two-sided"``, ``"greater"``
    (H1: mean d > 0) or ``"less"``.
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    a = _vector(a, "a", min_n=2)
    b = _vector(b, "b", min_n=2)
    if len(a) != len(b):
        raise ValueError(
            f"a paired test needs the same items on both sides, got {len(a)} and {len(b)} values"
        )
    res = sps.ttest_rel(a, b, alternative=alternative)
    return PairedT(float(res.statistic), float(res.pvalue), len(a) - 1, float(np.mean(a - b)), alternative)


@dataclass(frozen=True)
class Spearman:
    """Spearman rank correlation ρ of n pairs and its two-sided p."""

    rho: float
    p: float
    n: int


def spearman(x, y) -> Spearman:
    """Spearman ρ: the Pearson correlation of the ranks of x and of y (ties get mean ranks).

    ``scipy.stats.spearmanr``; p is two-sided (t-distribution with n − 2 df). Used between
    each control's image-attention mass and its CERS. ρ is nan if x or y is constant.
    """
    x = _vector(x, "x", min_n=3)
    y = _vector(y, "y", min_n=3)
    if len(x) != len(y):
        raise ValueError(f"spearman needs pairs, got {len(x)} x and {len(y)} y values")
    res = sps.spearmanr(x, y)
    return Spearman(float(res.statistic), float(res.pvalue), len(x))


def paired_one_sided_p(s_part, controls) -> PairedT:
    """Is a part of a head-set above its same-size controls, item by item? (seed Table 15)

    ``s_part`` [n]: per-item outcome of the part (the heads two settings share, or the
    heads only one has); ``controls`` [R, n]: the same outcome for R same-size controls
    on the same items. With ``c_i = mean_r controls[r, i]`` and ``d_i = s_i − c_i``, this
    is the one-sided paired t-test of H1: mean d > 0, i.e.
    ``paired_t(s_part, c, alternative="greater")``; ``mean_diff`` is the part's effect
    above the controls' mean.
    """
    s = _vector(s_part, "s_part", min_n=2)
    c = np.asarray(controls, dtype=float)
    if c.ndim != 2 or c.shape[1] != len(s) or c.shape[0] < 1:
        raise ValueError(
            f"controls must have shape [R, n] = [R, {len(s)}] (one row per control, one column "
            f"per item of s_part), got {c.shape}"
        )
    if not np.all(np.isfinite(c)):
        raise ValueError("controls must be finite")
    return paired_t(s, c.mean(axis=0), alternative="greater")


@dataclass(frozen=True)
class ArmsDifference:
    """A difference of two NCS values over the same items, with both arms' variances:
    ``mean_diff`` = NCS_A − NCS_B, its Welch ``interval``, the Welch t, its df and p."""

    t: float
    p: float
    df: float
    mean_diff: float
    interval: Interval
    alternative: str
    n_matched: int
    n_mismatched: int


def _per_item_arm(x, what: str, n: int | None = None) -> np.ndarray:
    """One arm's per-item drops ``[n]``, or the per-item mean of R head-sets' drops ``[R, n]``."""
    arr = np.asarray(x, dtype=float)
    if arr.ndim == 2:
        if arr.shape[0] < 1:
            raise ValueError(f"{what} has no head-set rows")
        arr = arr.mean(axis=0)
    arr = _vector(arr, what, min_n=2)
    if n is not None and len(arr) != n:
        raise ValueError(f"{what}: a paired comparison needs the same items on both sides, got {len(arr)} and {n} values")
    return arr


def ncs_difference_t(a_matched, a_mismatched, b_matched, b_mismatched, alternative: str = "two-sided",
                     confidence: float = 0.95) -> ArmsDifference:
    """NCS of head-set A minus NCS of B on the same items, both arms' variances in.

    Per matched item i, ``u_i = drop_A,i − drop_B,i``; per mismatched item j,
    ``v_j = drop_A,j − drop_B,j``. Then ``NCS_A − NCS_B = mean(u) − mean(v)``, a difference
    of two independent means (the arms are different items), tested like NCS itself:
    ``t = (mean u − mean v) / sqrt(s_u²/n_u + s_v²/n_v)`` with the Welch–Satterthwaite df,
    ``scipy.stats.ttest_ind(u, v, equal_var=False, alternative=...)``, and
    :func:`welch_interval` of (u, v). Pairing within each arm removes the item-to-item
    variation both head-sets share; the mismatched arm's variance stays in (a paired t of
    ``drop_matched − mean(drop_mismatched)`` would treat that mean as a constant).

    B may be ``[R, n]`` arrays (R control head-sets): B's per-item drop is then their mean
    (head-set algebra: a part against its same-size controls, ``alternative="greater"``).
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    am = _per_item_arm(a_matched, "a_matched")
    ax = _per_item_arm(a_mismatched, "a_mismatched")
    u = am - _per_item_arm(b_matched, "b_matched", len(am))  # [n_matched]
    v = ax - _per_item_arm(b_mismatched, "b_mismatched", len(ax))  # [n_mismatched]
    iv = welch_interval(u, v, confidence)
    vu, vv = u.var(ddof=1) / len(u), v.var(ddof=1) / len(v)
    if vu + vv == 0:  # both differences constant: no variance to test against
        t, p, df = float("nan"), float("nan"), float("nan")
    else:
        res = sps.ttest_ind(u, v, equal_var=False, alternative=alternative)
        t, p, df = float(res.statistic), float(res.pvalue), float(res.df)
    return ArmsDifference(t, p, df, iv.mean, iv, alternative, len(u), len(v))
