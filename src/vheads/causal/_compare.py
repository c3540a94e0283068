"""How well an estimated head map (AtP) ranks heads as the exact causal map does
(numpy and scipy only: the report reads it without loading torch)."""

from __future__ import annotations

import numpy as np


def compare_maps(exact: np.ndarray, approx: np.ndarray, k: int, valid: np.ndarray | None = None, exact_items: np.ndarray | None = None,
                 approx_items: np.ndarray | None = None, item_ids: list[str] | None = None, n_show: int = 5) -> dict:
    """How well ``approx [L, H]`` (AtP) ranks heads as ``exact [L, H]`` does, over the heads
    ``valid [L, H]`` (default: every head where both are finite):

    - ``spearman``, ``spearman_p``: Spearman ρ over heads (:func:`scipy.stats.spearmanr`);
    - ``top_k_recall``: |top-k(exact) ∩ top-k(approx)| / k, top-k by value (largest first);
    - ``heads``: the ``n_show`` heads with the largest |exact − approx| (value and 1-based
      rank in each map);
    - ``items`` (with per-item maps ``exact_items``/``approx_items`` [n, L, H] and their
      ``item_ids``): the ``n_show`` items whose per-item Spearman ρ over heads is lowest.
    """
    from scipy.stats import spearmanr

    exact, approx = np.asarray(exact, dtype=float), np.asarray(approx, dtype=float)
    if exact.shape != approx.shape or exact.ndim != 2:
        raise ValueError(f"maps must both be [L, H]; got {exact.shape} and {approx.shape}")
    ok = np.isfinite(exact) & np.isfinite(approx) & (np.ones_like(exact, dtype=bool) if valid is None else np.asarray(valid, dtype=bool))
    n = int(ok.sum())
    if not 1 <= k <= n:
        raise ValueError(f"k must be 1 to the {n} heads compared, got {k}")
    where = np.argwhere(ok)  # [n, 2] (layer, head), row-major
    e, a = exact[ok], approx[ok]
    rho = spearmanr(e, a)
    rank_e = np.empty(n, dtype=int)
    rank_a = np.empty(n, dtype=int)
    rank_e[np.argsort(-e, kind="stable")] = np.arange(1, n + 1)
    rank_a[np.argsort(-a, kind="stable")] = np.arange(1, n + 1)
    recall = int(((rank_e <= k) & (rank_a <= k)).sum()) / k
    worst = np.argsort(-np.abs(e - a), kind="stable")[:n_show]
    heads = [{"head": [int(where[j, 0]), int(where[j, 1])], "exact": float(e[j]), "approx": float(a[j]),
              "exact_rank": int(rank_e[j]), "approx_rank": int(rank_a[j])} for j in worst]
    res = {"n_heads": n, "k": k, "spearman": float(rho.statistic), "spearman_p": float(rho.pvalue), "top_k_recall": recall, "heads": heads}
    if exact_items is not None and approx_items is not None:
        xi, ai = np.asarray(exact_items, dtype=float)[:, ok], np.asarray(approx_items, dtype=float)[:, ok]  # [n_items, n]
        ids = item_ids or [str(i) for i in range(len(xi))]
        per = [float(spearmanr(x, y).statistic) for x, y in zip(xi, ai)]
        order = sorted(range(len(per)), key=lambda i: (np.nan_to_num(per[i], nan=-2.0), i))[:n_show]
        res["items"] = [{"item": ids[i], "spearman": per[i]} for i in order]
    return res
