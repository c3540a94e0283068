"""The study's ablation types (config key ``ablation``; DESIGN.md "Ablation types").

``attention`` (the seed's mask) runs every test, as before. Each head-output ablation
(``zero``, ``mean``, ``resample``) runs NCS once more — at the first of ``row_groups``, for S
and its ``row_group_controls`` — stored under the test id ``ncs-<group>@ablation=<name>``,
both arms included, so the existing tables are untouched and the report's "ablation ×
setting" table reads them. ``mean`` replaces S's outputs by their mean over a reference set
of ``n_eval`` items per arm kind, generated from the study seed (their ids are stored in
the run's ``ablation_reference`` meta); ``resample`` pairs every evaluation item with
another of its set by a seeded derangement over all ``n_eval`` items (not per shard).
"""

from __future__ import annotations

from vheads._ids import ablation_test_id  # noqa: F401  (re-exported)

#: the study's default ``ablation``: the seed's mask, and ``zero`` beside it wherever the study runs NCS
DEFAULT_ABLATION = ["attention", "zero"]


def validate_ablation(cfg, bad) -> None:
    """An unknown name, or a head-output ablation without NCS to run it in, names the key
    (the ablations themselves: below)."""
    from vheads.evaluation import ABLATION_REGISTRY  # torch-free

    for a in cfg.ablation:
        if a not in ABLATION_REGISTRY:
            bad("ablation", str(ABLATION_REGISTRY.unknown(a)))
    # the default's zero ablation runs where the study runs NCS; one the config names needs NCS
    head_output = any(a not in ABLATION_REGISTRY or ABLATION_REGISTRY.get(a).head_output for a in cfg.ablation)
    if cfg.ablation != DEFAULT_ABLATION and head_output and ("ncs" not in cfg.tests or not cfg.row_groups):
        bad("ablation", "the head-output ablations run NCS; add 'ncs' to tests (with a row group) or set ablation = [\"attention\"]")


def ablation_runs(cfg, source, templates, lo: int, hi: int) -> list[tuple[str, dict | None, dict | None]]:
    """``(ablation, reference, meta)`` of each head-output ablation of ``cfg`` for the shard
    ``[lo, hi)`` of the NCS items: ``reference`` as :func:`vheads.evaluation.run_test` takes
    it, ``meta`` what the run records (the mean's reference item ids)."""
    from vheads.evaluation import ABLATION_REGISTRY, donors, item_sets, reference_sets

    out = []
    kinds = ["class-matched", "class-mismatched"]
    for a in cfg.ablation:
        entry = ABLATION_REGISTRY.get(a)
        if not entry.head_output:
            continue
        if entry.replacement == "mean":
            ref = reference_sets(kinds, cfg.n_eval, cfg.seed, source, templates)
            out.append((a, ref, {"items": {k: [it.id for it in v] for k, v in ref.items()}, "seed": cfg.seed, "n": cfg.n_eval}))
        elif entry.replacement == "donor":
            from vheads.study._data import eval_seed

            full = item_sets(kinds, cfg.n_eval, eval_seed(cfg.seed), source, templates)
            d = donors(cfg.n_eval, cfg.seed)
            out.append((a, {k: [v[d[i]] for i in range(lo, hi)] for k, v in full.items()}, None))
        else:
            out.append((a, None, None))
    return out


def ablation_rows(computer, unit, sets, ids, hsets, cache, out) -> None:
    """NCS of S and its ``row_group_controls`` under each head-output ablation, added to the
    eval unit's ``out`` rows (outcomes and both arms, every metric)."""
    import json

    from vheads.evaluation import METRICS, run_test

    cfg = computer.cfg
    group = (unit.get("row_groups") or cfg.row_groups)[0]
    wanted = unit["cells"]["ablations"] if "cells" in unit else None  # a later round of controls: the undecided ones
    keep = [j for j, h in enumerate(ids) if h == "S" or h.split("#")[0] in cfg.row_group_controls]
    if not keep:  # a later round of controls (vheads.study._sequential) that runs none of them
        return
    lo, hi = unit["shard"]
    uid, setting = unit["unit_id"], unit["setting"]
    for a, ref, meta in ablation_runs(cfg, computer.source, computer.templates, lo, hi):
        if wanted is not None and a not in wanted:
            continue
        res = run_test(computer.engine, "ncs", sets, [hsets[j] for j in keep], cfg.beta, group, cfg.seed, cfg.run.batch_size,
                       cache=cache, memo=computer.memo, ablation=a, reference=ref)
        test_id = ablation_test_id(group, a)
        vals = [res.under(m).values for m in METRICS]
        for jj, j in enumerate(keep):
            for i, iid in enumerate(res.item_ids):
                out["outcomes"].append((uid, setting, test_id, ids[j], iid, *(float(v[jj, i]) for v in vals)))
            for arm in ("matched", "mismatched"):
                drops = [res.under(m).detail[f"drop_{arm}"] for m in METRICS]
                for i, it in enumerate(sets[f"class-{arm}"]):
                    out["arms"].append((uid, setting, test_id, ids[j], it.id, arm, *(float(d[jj, i]) for d in drops)))
        if meta is not None:
            out.setdefault("meta", []).append((f"ablation_reference:{a}", json.dumps(meta)))
