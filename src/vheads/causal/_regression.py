"""Head attribution by regression over random multi-head ablations (the ``regression`` causal map).

The exact map hides one head at a time and misses heads that matter only together (a
backup takes over when one is hidden). Head attribution (Kim, Kang et al., 2025) hides
random *subsets* and fits a linear model of the outcome on which heads were hidden:

- **Design** (:func:`draw_design`): ``n_subsets`` subsets of the softmax layers' N heads,
  each head in with probability ``q`` (``mode = "bernoulli"``), or ``m`` heads drawn
  uniformly without replacement (``mode = "fixed"``); seed, mode, q / m and the 0/1 matrix
  ``X [n_subsets, N]`` are recorded. Every subset runs through
  :func:`vheads.evaluation.run_test` like any list of head-sets (batched forwards, the
  run's ablation: attention masking from the image, zero, resample).
- **Model**: for item i, ``y_i[s] = b_i + Σ_h β_i[h] · X[s, h] + ε``, ``y_i[s]`` the item's
  drop (NCS: per arm) with subset s hidden. Bernoulli designs fit the intercept ``b_i``; a
  fixed-size design cannot (its rows all sum to m, so the intercept is the columns' sum)
  and is fitted through the origin, which is exact for an additive model: hiding nothing
  drops nothing. All items share X, so the per-item coefficients are one least-squares
  solve, ``B = (ZᵀZ)⁻¹ZᵀY``, and, the fit being linear in y, the mean over items of ``β_i``
  is the fit of the mean outcome. A head's **coefficient** is the test's statistic of the
  per-item coefficients: NCS ``mean_matched β − mean_mismatched β``, every other test the
  mean — the coefficient of the regression of the per-subset statistic on X.
- **Intervals**: a percentile bootstrap over items (each NCS arm resampled apart; the
  design is held fixed, so this is the items' sampling variation), and the OLS standard
  errors of the per-subset statistic's regression, ``σ̂²(ZᵀZ)⁻¹`` with ``σ̂² = RSS/(n − p)``.
  The subsets are independent draws, so the OLS errors measure how well the design pins
  down the additive coefficients on these items; the residual is the outcome's
  non-additive part (interactions) rather than independent noise, so they are a guide,
  and the bootstrap (which also covers new items) is the interval the report prints.
- **Interactions** (:meth:`HeadAttribution.interactions`): the same regression with the
  products ``X[:, a] · X[:, b]`` of every pair among the top heads added; a redundant pair
  (either head enough alone) has a positive product term.

With q = 1/2 a redundant pair whose co-ablation drops D gets coefficient ≈ D/2 each, where
each head alone drops nothing: the one-head map and AtP see neither head
(tests/causal/test_planted_pair.py).

The study's stored control draws are such a design only where each draw is an independent
uniform subset (:func:`stored_design`): ``random-n`` (fixed size n over every head) and
``any-layer`` (fixed size |S| over the heads outside S; S's own heads never enter, their
coefficients are not identified). ``layer-matched`` and ``layer+attention-matched`` draws
hold every layer's count fixed (the columns of a layer sum to a constant: only contrasts
within a layer are identified, and the heads are not independent across the layer),
``whole-layers`` hides whole layers (a layer's heads are collinear), and ``sinks`` /
``text-heavy`` are one fixed set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vheads._errors import VheadsError
from vheads._seeds import derived_seed
from vheads.causal._map import DEFAULT_ABLATION, CausalMap, causal_units, check_ablation, map_key, per_item_values
from vheads.evaluation import HeadSet

METHOD = "regression"
DESIGN_MODES = ("bernoulli", "fixed")
#: the design the command and the study draw by default: 256 subsets, each head in with probability 1/2
DEFAULT_SUBSETS = 256
DEFAULT_Q = 0.5
#: control families whose stored draws are a regression design, and why the others are not
STORED_DESIGNS = {
    "random-n": (True, "independent uniform subsets of n heads of the whole model: a fixed-size design"),
    "any-layer": (True, "independent uniform subsets of |S| heads outside S: a fixed-size design over those heads "
                        "(S's heads never enter: their coefficients are not identified)"),
    "layer-matched": (False, "every draw keeps S's per-layer counts: a layer's columns sum to a constant, so only "
                             "contrasts within a layer are identified and heads of a layer are not independent"),
    "layer+attention-matched": (False, "per-layer counts fixed and heads picked by nearest attention mass: not independent draws"),
    "whole-layers": (False, "whole layers hidden: the heads of a layer are collinear"),
    "sinks": (False, "one fixed head-set, not a random draw"),
    "text-heavy": (False, "one fixed head-set, not a random draw"),
}


def stored_design(control: str) -> tuple[bool, str]:
    """Whether a control family's stored draws qualify as a regression design, and why
    (:data:`STORED_DESIGNS`; ``random-12`` is read as ``random-n``)."""
    name = "random-n" if control.startswith("random-") else control
    if name not in STORED_DESIGNS:
        return False, f"unknown control family {control!r}"
    return STORED_DESIGNS[name]


@dataclass(frozen=True)
class Design:
    """A regression design: which of ``heads`` each subset hides, ``X [n_subsets, N]`` (bool)."""

    mode: str  # 'bernoulli' (each head in with probability q), 'fixed' (m heads), 'stored' (given head-sets)
    heads: tuple[tuple[int, int], ...]
    X: np.ndarray
    q: float | None = None
    m: int | None = None
    seed: int | None = None

    @property
    def intercept(self) -> bool:
        """Whether the fit has an intercept (a design whose rows have one size has none)."""
        sizes = self.X.sum(axis=1)
        return self.mode == "bernoulli" or (self.mode == "stored" and sizes.min() != sizes.max())

    def matrix(self) -> np.ndarray:
        """The regression's design matrix ``Z [n_subsets, p]``: a column of ones (with an
        intercept), then one 0/1 column per head."""
        X = self.X.astype(float)
        return np.column_stack([np.ones(len(X)), X]) if self.intercept else X

    def headsets(self, n_layers: int, n_heads: int, attention_layers=None) -> list[HeadSet]:
        return [HeadSet([self.heads[j] for j in np.flatnonzero(row)], n_layers, n_heads, attention_layers) for row in self.X]

    def to_dict(self) -> dict:
        return {"mode": self.mode, "q": self.q, "m": self.m, "seed": self.seed, "n_subsets": int(len(self.X)),
                "intercept": self.intercept}


def check_design(n_subsets: int, n_heads: int | None, q: float | None = None, m: int | None = None) -> None:
    """Refuse a design before any forward (one line): fewer subsets than the fit has
    coefficients, q outside (0, 1), m outside 1 … N − 1, or both q and m. With ``n_heads``
    None (the model not loaded yet) only what needs no head count is checked."""
    if m is not None and q is not None:
        raise VheadsError(f"a design is either Bernoulli (--q {q}) or of fixed size (--m {m}), not both")
    if q is not None and (isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q < 1):
        raise VheadsError(f"--q {q!r}: the probability a head is in a subset must lie strictly between 0 and 1")
    top = "N − 1" if n_heads is None else n_heads - 1
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1 or (n_heads is not None and m >= n_heads)):
        raise VheadsError(f"--m {m!r}: a subset holds from 1 to {top} of the model's {n_heads or 'N'} heads")
    if isinstance(n_subsets, bool) or not isinstance(n_subsets, int) or n_subsets < 2:
        raise VheadsError(f"--subsets {n_subsets!r}: a design needs at least as many subsets as the fit has coefficients")
    if n_heads is not None:
        p = n_heads + (1 if m is None else 0)
        if n_subsets < p:
            raise VheadsError(f"--subsets {n_subsets!r}: a design needs at least as many subsets as the fit has coefficients "
                              f"({n_heads} heads{' and the intercept' if m is None else ''}: {p})")


def draw_design(n_layers: int, n_heads: int, n_subsets: int = DEFAULT_SUBSETS, q: float | None = None,
                m: int | None = None, seed: int = 0, attention_layers=None) -> Design:
    """``n_subsets`` random subsets of the model's heads (the softmax layers' on a hybrid
    model), each head in with probability ``q`` (default :data:`DEFAULT_Q` when no ``m``
    is given), or ``m`` heads each; drawn from
    ``derived_seed(seed, "design")``. A draw whose design matrix is rank-deficient (a head
    in every subset or in none) is refused: draw more subsets."""
    att = list(range(n_layers)) if attention_layers is None else sorted(int(x) for x in attention_layers)
    heads = tuple((l, h) for l in att for h in range(n_heads))
    N = len(heads)
    q = DEFAULT_Q if q is None and m is None else q
    check_design(n_subsets, N, q, m)
    dseed = derived_seed(seed, "design")
    rng = np.random.default_rng(dseed)
    if m is None:
        X = rng.random((n_subsets, N)) < q  # [n_subsets, N]
    else:
        X = np.zeros((n_subsets, N), dtype=bool)
        for row in X:
            row[rng.choice(N, size=m, replace=False)] = True
    d = Design("bernoulli" if m is None else "fixed", heads, X, None if m is not None else float(q), m, dseed)
    Z = d.matrix()
    if np.linalg.matrix_rank(Z) < Z.shape[1]:
        raise VheadsError(f"--subsets {n_subsets}: the drawn design cannot separate every head (rank "
                          f"{np.linalg.matrix_rank(Z)} < {Z.shape[1]}); draw more subsets or change --q / --m")
    return d


def ols(Z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ordinary least squares of ``y [n]`` on ``Z [n, p]``: the coefficients and their
    classical standard errors ``sqrt(diag(σ̂²(ZᵀZ)⁻¹))``, ``σ̂² = RSS/(n − p)`` (NaN when n = p)."""
    beta, *_ = np.linalg.lstsq(Z, y, rcond=None)
    n, p = Z.shape
    if n <= p:
        return beta, np.full(p, np.nan)
    resid = y - Z @ beta
    cov = (resid @ resid / (n - p)) * np.linalg.inv(Z.T @ Z)
    return beta, np.sqrt(np.clip(np.diag(cov), 0, None))


@dataclass
class HeadAttribution:
    """One test's outcomes under a design and the regression on them.

    ``outcomes[metric][arm]`` is ``[n_subsets, n_items of that arm]`` (NCS drops per arm,
    ``value`` for every other test, as :class:`CausalMap` names them)."""

    test: str
    ablation: str
    n_layers: int
    n_heads: int
    attention_layers: list[int]
    design: Design
    item_ids: dict[str, list[str]]
    outcomes: dict[str, dict[str, np.ndarray]]
    meta: dict = field(default_factory=dict)

    def _statistic(self, per_arm: dict[str, np.ndarray]) -> np.ndarray:
        """The test's statistic over items of per-arm arrays ``[..., n_items]``."""
        if "matched" in per_arm:
            return per_arm["matched"].mean(axis=-1) - per_arm["mismatched"].mean(axis=-1)
        return per_arm["value"].mean(axis=-1)

    def item_coefficients(self, metric: str = "p4") -> dict[str, np.ndarray]:
        """Per arm, every item's own fit ``B [p, n_items]`` (intercept first where there is one)."""
        Z = self.design.matrix()
        return {arm: np.linalg.lstsq(Z, Y, rcond=None)[0] for arm, Y in self.outcomes[metric].items()}

    def coefficients(self, metric: str = "p4") -> np.ndarray:
        """Each head's coefficient ``[N]``: the test's statistic of the per-item coefficients."""
        B = self._statistic(self.item_coefficients(metric))
        return B[1:] if self.design.intercept else B

    def subset_statistic(self, metric: str = "p4") -> np.ndarray:
        """The test's statistic of each subset ``[n_subsets]`` (what :meth:`fit` regresses)."""
        return self._statistic(self.outcomes[metric])

    def fit(self, metric: str = "p4") -> tuple[np.ndarray, np.ndarray]:
        """OLS of the per-subset statistic on the design matrix: coefficients and standard
        errors ``[p]`` (intercept first where there is one)."""
        return ols(self.design.matrix(), self.subset_statistic(metric))

    def bootstrap_ci(self, metric: str = "p4", n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> np.ndarray:
        """Percentile bootstrap interval of each head's coefficient ``[N, 2]``, items resampled
        with replacement (each NCS arm apart), the design held fixed."""
        rng = np.random.default_rng(derived_seed(seed, "regression-bootstrap", self.test, self.ablation))
        B = self.item_coefficients(metric)
        if self.design.intercept:
            B = {a: b[1:] for a, b in B.items()}
        draws = {a: b[:, rng.integers(0, b.shape[1], size=(n_boot, b.shape[1]))] for a, b in B.items()}  # [N, R, n]
        stat = self._statistic(draws)  # [N, R]
        lo = (1 - level) / 2
        return np.quantile(stat, [lo, 1 - lo], axis=1).T

    def interactions(self, metric: str = "p4", top: int = 4) -> list[dict]:
        """The regression with the products of every pair among the ``top`` heads of largest
        coefficient added: per pair, the product's coefficient and OLS standard error
        (``[]`` when the design has too few subsets for the extra columns)."""
        order = np.argsort(-self.coefficients(metric), kind="stable")[:top]
        pairs = [(int(a), int(b)) for i, a in enumerate(order) for b in order[i + 1:]]
        Z = self.design.matrix()
        if not pairs or len(Z) <= Z.shape[1] + len(pairs):
            return []
        X = self.design.X.astype(float)
        Zi = np.column_stack([Z, *(X[:, a] * X[:, b] for a, b in pairs)])
        if np.linalg.matrix_rank(Zi) < Zi.shape[1]:
            return []
        beta, se = ols(Zi, self.subset_statistic(metric))
        heads = self.design.heads
        return [{"a": list(heads[a]), "b": list(heads[b]), "coef": float(c), "se": float(s)}
                for (a, b), c, s in zip(pairs, beta[Z.shape[1]:], se[Z.shape[1]:])]

    def causal_map(self) -> CausalMap:
        """The per-item coefficients as a :class:`CausalMap` (method ``regression``, heads
        only): its effects are the coefficients, under every metric."""
        ids, _ = causal_units(self.n_layers, self.n_heads, self.attention_layers, layers=False)
        cut = 1 if self.design.intercept else 0
        per = {m: {a: b[cut:] for a, b in self.item_coefficients(m).items()} for m in self.outcomes}
        meta = {**self.meta, "design": self.design.to_dict(), "n": {a: len(v) for a, v in self.item_ids.items()}}
        return CausalMap(self.test, self.ablation, self.n_layers, self.n_heads, list(self.attention_layers), ids,
                         dict(self.item_ids), per, meta, method=METHOD)

    def to_dict(self, metric: str = "p4") -> dict:
        """A JSON-ready summary: the design, every head's coefficient, its OLS standard error
        and bootstrap interval, and the interactions of the top heads."""
        beta, se = self.fit(metric)
        cut = 1 if self.design.intercept else 0
        ci = self.bootstrap_ci(metric)
        heads = [{"head": list(h), "coef": float(c), "se_ols": float(s), "ci95_bootstrap": [float(x) for x in b]}
                 for h, c, s, b in zip(self.design.heads, beta[cut:], se[cut:], ci)]
        return {"test": self.test, "ablation": self.ablation, "metric": metric, "design": self.design.to_dict(),
                "intercept": float(beta[0]) if cut else None, "heads": heads, "interactions": self.interactions(metric)}


def head_attribution(engine, sets: dict, tests=("ncs",), design: Design | None = None, rows: str = "all",
                     ablation: str = DEFAULT_ABLATION, seed: int = 0, batch_size: int = 128, progress: bool = False,
                     memo=None) -> dict[str, HeadAttribution]:
    """Run every subset of ``design`` (default: :func:`draw_design` with the defaults) hidden
    in each of ``tests`` on ``sets`` (as :func:`vheads.causal.exact_causal_map` takes them)
    and keep every outcome; keyed like the maps (``ncs-all:regression``)."""
    from vheads.causal._map import check_causal_request
    from vheads.evaluation import run_test

    check_causal_request(tests, rows, n=2, batch_size=batch_size, seed=seed, ablation=ablation)
    extra = check_ablation(ablation, tests)
    L, H = engine.shape
    att = list(engine.lm.attention_layers)
    design = design if design is not None else draw_design(L, H, seed=seed, attention_layers=att)
    hsets = design.headsets(L, H, att)
    out = {}
    for test in tests:
        res = run_test(engine, test, sets, hsets, 1.0, rows, seed, batch_size, progress, memo=memo, **extra)
        tid, per, items = per_item_values(res, test, sets, rows)
        out[map_key(tid, ablation, METHOD)] = HeadAttribution(tid, ablation, L, H, att, design, items, per,
                                                              {"rows": rows if test != "text" else "all", "seed": seed})
    return out


def regression_causal_maps(engine, sets: dict, tests=("ncs",), design: Design | None = None, **kwargs) -> dict[str, CausalMap]:
    """:func:`head_attribution` as :class:`CausalMap` objects (method ``regression``)."""
    return {k: a.causal_map() for k, a in head_attribution(engine, sets, tests, design, **kwargs).items()}

