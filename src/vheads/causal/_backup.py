"""Backup heads: the heads whose effect grows once a top head is already hidden (co-ablation).

For a hidden head h and another head g, with ``T(S)`` the test's statistic when S is hidden
(NCS: mean matched drop − mean mismatched drop):

- ``alone[g] = T({g})`` — g's entry in the exact map;
- ``with_hidden[h, g] = T({h, g}) − T({h})`` — g's effect once h is already hidden;
- ``gain[h, g] = with_hidden[h, g] − alone[g] = T({h, g}) − T({h}) − T({g})``.

A backup of h has a large positive gain: it does h's job when h is gone, so alone it looks
idle (a redundant pair has gain ≈ T({h, g}) and ``alone`` ≈ 0 for both). The hidden heads
are, by default, the top heads of the exact map on the same items; pass ``heads`` to take
them from another map (the regression's, which sees heads the one-head map misses). Every
per-item value is kept (NCS: per arm), so every number is recomputable, and each hidden
head's gains are a :class:`~vheads.causal.CausalMap` (method ``backup-L0H7``) the results
store holds like any map. Cost: N one-head sets and t · (N − 1) pairs per item.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vheads.causal._map import DEFAULT_ABLATION, CausalMap, check_ablation, check_causal_request, head_id, map_key, per_item_values
from vheads.evaluation import HeadSet

METHOD_PREFIX = "backup-"


@dataclass
class BackupScan:
    """One test's co-ablation scan. ``single[metric][arm]`` is ``[N, n_items]`` (every head
    alone), ``pair[metric][arm]`` ``[t, N, n_items]`` (hidden head i with head g; NaN at g = i)."""

    test: str
    ablation: str
    n_layers: int
    n_heads: int
    attention_layers: list[int]
    heads: list[tuple[int, int]]  # every head, in unit order
    hidden: list[tuple[int, int]]  # the top heads hidden first
    item_ids: dict[str, list[str]]
    single: dict[str, dict[str, np.ndarray]]
    pair: dict[str, dict[str, np.ndarray]]

    @staticmethod
    def _stat(arms: dict[str, np.ndarray]) -> np.ndarray:
        if "matched" in arms:
            return arms["matched"].mean(axis=-1) - arms["mismatched"].mean(axis=-1)
        return arms["value"].mean(axis=-1)

    def gains(self, metric: str = "p4") -> dict[str, np.ndarray]:
        """Per arm, the per-item gain ``pair − single[hidden] − single[g]`` ``[t, N, n_items]``."""
        at = [self.heads.index(h) for h in self.hidden]
        return {a: p - self.single[metric][a][at][:, None] - self.single[metric][a][None] for a, p in self.pair[metric].items()}

    def pairs(self, metric: str = "p4", top: int | None = None) -> list[dict]:
        """Every (hidden, head) pair with its numbers, largest gain first (``top`` per hidden head)."""
        alone = self._stat(self.single[metric])  # [N]
        both = self._stat(self.pair[metric])  # [t, N]
        gain = self._stat(self.gains(metric))
        rows = []
        for i, h in enumerate(self.hidden):
            hi = self.heads.index(h)
            order = [j for j in np.argsort(-np.nan_to_num(gain[i], nan=-np.inf), kind="stable") if j != hi][:top]
            rows += [{"hidden": list(h), "head": list(self.heads[j]), "alone": float(alone[j]),
                      "with_hidden": float(both[i, j] - alone[hi]), "gain": float(gain[i, j]),
                      "hidden_alone": float(alone[hi]), "pair": float(both[i, j])} for j in order]
        return rows

    def causal_maps(self) -> dict[str, CausalMap]:
        """Each hidden head's per-item gains as a map over the other heads (method ``backup-L0H7``),
        under every metric, keyed like every map (``ncs-all:backup-L0H7``)."""
        out = {}
        g = {m: self.gains(m) for m in self.pair}
        for i, h in enumerate(self.hidden):
            keep = [j for j, x in enumerate(self.heads) if x != h]
            per = {m: {a: v[i][keep] for a, v in arms.items()} for m, arms in g.items()}
            method = METHOD_PREFIX + head_id(*h)
            out[map_key(self.test, self.ablation, method)] = CausalMap(
                self.test, self.ablation, self.n_layers, self.n_heads, list(self.attention_layers),
                [head_id(*self.heads[j]) for j in keep], dict(self.item_ids), per, {"hidden": list(h)}, method=method)
        return out


def backup_heads(engine, sets: dict, test: str = "ncs", heads=None, top: int = 3, rows: str = "all",
                 ablation: str = DEFAULT_ABLATION, metric: str = "p4", seed: int = 0, batch_size: int = 128,
                 progress: bool = False, memo=None) -> BackupScan:
    """Co-ablate each of ``heads`` (default: the ``top`` heads of the one-head map on ``sets``
    in ``metric``) with every other head in ``test`` (one of :data:`vheads.causal.CAUSAL_TESTS`);
    ``sets``, ``rows``, ``ablation``, ``seed`` as :func:`vheads.causal.exact_causal_map` takes them."""
    from vheads.evaluation import ProbeMemo, run_test

    check_causal_request([test], rows, n=2, batch_size=batch_size, seed=seed, ablation=ablation)
    extra = check_ablation(ablation, [test])
    L, H = engine.shape
    att = list(engine.lm.attention_layers)
    every = [(l, h) for l in att for h in range(H)]
    memo = memo if memo is not None else ProbeMemo()

    def run(hsets):
        res = run_test(engine, test, sets, hsets, 1.0, rows, seed, batch_size, progress, memo=memo, **extra)
        return per_item_values(res, test, sets, rows)

    tid, single, items = run([HeadSet([x], L, H, att) for x in every])
    if heads is None:
        effect = BackupScan._stat(single[metric])
        heads = [every[j] for j in np.argsort(-effect, kind="stable")[:top]]
    hidden = [tuple(int(v) for v in h) for h in heads]
    for h in hidden:
        if h not in every:
            raise ValueError(f"head {h} is not a head of this model's softmax layers")
    sets_pairs = [HeadSet([h, g], L, H, att) if g != h else HeadSet([h], L, H, att) for h in hidden for g in every]
    _, flat, _ = run(sets_pairs)
    t, N = len(hidden), len(every)
    pair = {m: {a: v.reshape(t, N, -1).copy() for a, v in arms.items()} for m, arms in flat.items()}
    for i, h in enumerate(hidden):
        for arms in pair.values():
            for v in arms.values():
                v[i, every.index(h)] = np.nan
    return BackupScan(tid, ablation, L, H, att, every, hidden, items, single, pair)
