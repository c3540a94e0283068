"""How many batch rows a study runs: the doctor's projection of a study's time.

:func:`study_rows` counts the rows of a study config by stage. The probe memo
(:class:`vheads.evaluation.ProbeMemo`) runs a head-set on an item once per test however
often it is drawn, so on a model with few heads (the built-in tiny model's layer-matched
pool of a three-head S has a few hundred members, for 17 settings × 249 draws) the distinct
control head-sets, not the draws, set the work: with ``pool_heads`` each control's draws
are counted as the distinct head-sets they are expected to give from its pool
(:func:`control_pool`) of a head-set spread evenly over the layers. Since issue 35 a setting
compares S with distinct head-sets only (the whole pool when it holds at most
``EXACT_POOL_FACTOR`` · R, else R distinct draws: :func:`compared_per_setting`), and the
settings' subsets of one pool overlap as :func:`expected_union` says.
"""

from __future__ import annotations

import math

from vheads.evaluation import COMMON_DRAWS


def compared_per_setting(pool: int | None, R: int) -> int:
    """Distinct head-sets one setting's control of R compares S with (the rule of
    :func:`vheads.evaluation.draw_controls`): the whole pool when it holds at most
    ``EXACT_POOL_FACTOR`` · R, else R."""
    from vheads.evaluation import EXACT_POOL_FACTOR

    return pool if pool is not None and pool <= EXACT_POOL_FACTOR * R else R


def expected_union(pool: int | None, per: float, sets: int) -> float:
    """Expected size of the union of ``sets`` independent uniform ``per``-subsets of a pool of
    ``pool`` members: each member is in one subset with probability per / N, so
    ``N (1 − (1 − per/N)^sets)``; ``sets · per`` for an unknown pool."""
    if pool is None:
        return float(sets * per)
    if pool <= 0 or per <= 0:
        return 0.0
    return pool * (1.0 - (1.0 - min(per, pool) / pool) ** sets)


def spread(k: int, n_layers: int, n_heads: int, selection: str = "flat") -> list[int]:
    """Heads per layer of a head-set of size ``k`` spread as evenly as the layers allow
    (``per-layer``: ``k`` in every layer)."""
    if selection == "per-layer":
        return [min(k, n_heads)] * n_layers
    k = min(k, n_layers * n_heads)
    return [k // n_layers + (1 if i < k % n_layers else 0) for i in range(n_layers)]


def control_pool(name: str, counts: list[int], n_heads: int) -> int | None:
    """Distinct head-sets control ``name`` can draw for an S with ``counts`` heads per layer:
    ``layer-matched`` (and ``attention-matched``, matched on fewer heads: at most as many)
    ``Π_l C(H − s_l, s_l)``; ``any-layer`` ``C(L·H − k, k)``; ``random-n@n`` ``C(L·H − k, n)``;
    a deterministic control one; ``None`` for a name not known here."""
    from vheads.evaluation import get_control, split_control_name

    base, n = split_control_name(name)
    k, total = sum(counts), len(counts) * n_heads
    if not get_control(base).random:
        return 1
    if base in ("layer-matched", "attention-matched"):
        return math.prod(math.comb(n_heads - s, s) for s in counts)
    if base == "any-layer":
        return math.comb(total - k, k)
    if base == "random-n":
        return math.comb(total - k, n if n is not None else k)
    return None


def study_rows(cfg, main_k: int | None = None, heads: tuple[int, int] | None = None,
               pool_heads: tuple[int, int] | None = None) -> dict[str, int]:
    """Batch rows a study of ``cfg`` runs, by stage, each row its probe memo serves again
    counted once.

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

    ``pool_heads`` = (attention layers, heads per layer), with ``main_k``: every control's
    draws over all settings are counted as the distinct head-sets expected from its pool
    (module docstring), as the memo runs them; without it every draw counts (an upper bound).

    Left out: the head-set algebra, the pointing suite. The memo is one replica's: with
    several replicas (``run.backend = "ray"``) the shared rows run once on each.
    """
    n_strips = len(cfg.corpora) * len(cfg.queries) * cfg.n_discovery
    disc = n_strips * (1 + (5 if "out" in cfg.sources else 0))
    settings = len(cfg.corpora) * len(cfg.queries) * len(cfg.sources)
    if cfg.scores:
        settings += len(cfg.scores) * (1 if cfg.score_on == "first" else len(cfg.corpora) * len(cfg.queries))
    if "ncs" in cfg.causal_tests:
        settings += 1  # the causal setting
    n, tests = cfg.n_eval, set(cfg.tests)

    def distinct(name: str, per_setting: int, k: int | None = main_k) -> float:
        """Distinct head-sets of ``per_setting`` draws of control ``name`` in every setting."""
        if pool_heads is None or k is None:
            return float(settings * per_setting)
        counts = spread(k, pool_heads[0], pool_heads[1], cfg.selection)
        pool = control_pool(name, counts, pool_heads[1])
        per = compared_per_setting(pool, per_setting)
        if name in COMMON_DRAWS and pool is not None and per < pool:
            # one common sequence over all heads, each setting its first `per` draws that miss
            # its S: the union is about the prefix one setting needs, per / P(a draw misses S)
            every = math.comb(pool_heads[0] * pool_heads[1], k)
            return min(float(settings * per), per * every / pool, float(every))
        return expected_union(pool, per, settings)

    cers, ncs = bool(tests & {"cers", "cers-sym"}), "ncs" in tests
    k_points = [kk for kk in dict.fromkeys(cfg.k_sweep) if kk != main_k]  # S@k=main_k is S
    other_groups = [g for g in dict.fromkeys(cfg.row_groups) if g != "all"]
    other_ablations = [a for a in cfg.ablation if a != "attention"] if cfg.row_groups else []
    other_betas = {b for b in cfg.beta_sweep if b != cfg.beta} if "cers" in tests else set()
    # rows of one head-set on the evaluation items: in the main run of every test, at the other
    # row groups and ablations (NCS), at the other betas (CERS), in the k sweep (CERS and NCS)
    main = (2 * cers + 2 * ncs + 2 * ("ncs-grid" in tests) + ("text" in tests)) * n
    extra_ncs = (len(other_groups) + len(other_ablations)) * 2 * n if ncs else 0
    per_beta, per_k = len(other_betas) * 2 * n, (2 * cers + 2 * ncs) * n
    # S (and S@k) in every setting
    evaluation = settings * (main + extra_ncs + per_beta + len(k_points) * per_k)
    for name, R in cfg.controls.items():
        evaluation += distinct(name, R) * (main + (extra_ncs if name in cfg.row_group_controls else 0))
    if other_betas and "layer-matched" in cfg.controls:  # the first draws again at every other beta
        evaluation += distinct("layer-matched", min(cfg.beta_sweep_controls, cfg.controls["layer-matched"])) * per_beta
    for kk in dict.fromkeys(cfg.k_sweep):  # layer-matched draws of each top-k set
        evaluation += distinct("layer-matched", cfg.k_sweep_controls, kk) * per_k
    once = (2 * n if ncs else 0) + (2 * n if "ncs-grid" in tests else 0) + (n if "text" in tests else 0)
    causal = 0
    if heads is not None:
        units = heads[0] * heads[1] + heads[0]  # every head alone, every whole layer
        per_item = {"ncs": 2, "ncs-grid": 2, "text": 1}  # rows per item of each test
        for t in cfg.causal_tests:
            runs = sum(1 for a in cfg.ablation if a == "attention" or (a != "mean" and t in ("ncs", "text")))
            causal += (units * runs + 1) * per_item[t] * n  # + the unmasked baselines, once
    return {"discovery": disc, "evaluation": int(round(evaluation)) + once + causal}
