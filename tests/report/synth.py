"""A synthetic results store with known values, written row by row (no model involved)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

from vheads.discovery._score_space import parse_score
from vheads.store import Store

L, H, K = 4, 8, 4
CORPORA = {"cm": "comics", "ph": "photo"}
QUERIES = {"ord": "ordinal", "ref": "referring"}
SOURCES = {"last": "last", "qsp": "qspan", "out": "out"}
SETTINGS = [f"{c}-{q}-{s}" for c in CORPORA for q in QUERIES for s in SOURCES]  # 12


def LOGPROB(v):  # noqa: N802 - the synthetic store's logprob of a p4 value
    return 3.0 * v  # linear: NCS = matched − mismatched mean holds in it too


def LOGIT_DIFF(v):  # noqa: N802 - and its logit-diff: the sign flips, so conclusions change
    return -v


def make_run(run_dir: Path, *, settings=SETTINGS, R: int = 9, n_items: int = 12, tests=("cers", "ncs-all"),
             row_groups: bool = True, text: bool = True, extra_controls: bool = True, sweeps: bool = True,
             overlap: bool = True, audit: str | None = "ok", strips: bool = True, any_layer: bool = True,
             config_R: int | None = None, seed: int = 0, meta_extra: dict | None = None, metrics: bool = True,
             config_extra: dict | None = None, causal: bool = False, atp: bool = False, ablations: tuple[str, ...] = (),
             score_points: dict[str, str | None] | None = None, k_sweep_tests: tuple[str, ...] = ("cers",),
             k_points: tuple[int, ...] = (2, 8), small_pools: dict[str, int] | None = None,
             attention_matched: tuple[int, int] | None = None) -> Path:
    """Write a store into ``run_dir``. ``audit``: 'ok', 'bad' (oracle out of range) or None.
    ``metrics=False``: no logprob / logit-diff columns (a store of an older vheads).
    ``causal``: an exact causal map (NCS, per item and arm, every head and layer) and the
    causal setting ``causal-ncs`` tested like the others; ``atp`` (with ``causal``): its AtP
    estimate too (method 'atp', heads only, p4: a noisy copy of each exact value, the other
    metrics NULL), drawn from a generator of its own so every other value stays as without.
    ``small_pools``: setting -> the size of its layer-matched pool, smaller than R on purpose:
    that many draws are stored, and meta ``control_pools`` records the pool as compared whole
    (as a study records a pool of at most 2R); the other settings' pools are recorded as sampled.
    ``attention_matched``: (R asked, distinct head-sets stored) of an attention-matched control,
    whose pool is not countable (recorded as None)."""
    rng = np.random.default_rng(seed)
    store = Store(run_dir)
    controls = ({"layer-matched": R} | ({"any-layer": R} if any_layer else {})
                | ({"attention-matched": attention_matched[0]} if attention_matched else {}))
    stored = {"attention-matched": attention_matched[1]} if attention_matched else {}
    config = {"model": "tiny", "corpora": list(CORPORA.values()), "settings": list(settings), "k": K,
              "controls": {c: (config_R or r) for c, r in controls.items()}, "n_items": n_items, "seeds": {"controls": 7},
              "beta": 10000.0,
              "row_groups": ["all", "image", "question", "last"] if row_groups else ["all"] if "ncs-all" in tests else [],
              **(config_extra or {})}
    small_pools = small_pools or {}
    pools = {s: {c: ({"mode": "exact", "pool": small_pools[s], "n": small_pools[s], "R": r}
                     if s in small_pools and c == "layer-matched" else {"mode": "sampled", "pool": None,
                                                                          "n": stored.get(c, r), "R": r})
                 for c, r in controls.items()} for s in settings}
    points = {f"score:{p}": json.dumps({"name": p.split("-", 2)[-1], "rows": "last", "region": "target", "norm": "raw",
                                         "keys": "mass", "across": "mean", "select": "flat", "k": None, "order": i})
              for i, p in enumerate(score_points or {})}  # each score point's axes, as a study records them
    store.set_meta(config=config, model_id="vheads/tiny-test", n_layers=L, n_heads=H,
                   **({"control_pools": json.dumps(pools)} if small_pools or stored else {}), **points, **(meta_extra or {}))

    rows: dict[str, list[tuple]] = {k: [] for k in ("discovery", "overlap", "ceilings", "headsets", "outcomes",
                                                   "arms", "audit", "strip_attention", "random_overlap", "causal_map")}
    heads = {}
    for s in settings:
        c, q, src = s.split("-")
        scores = rng.uniform(0, 0.2, size=(L, H))
        order = np.argsort(-scores, axis=None)[:K]
        hs = [[int(i // H), int(i % H)] for i in order]
        heads[s] = {tuple(h) for h in hs}
        rows["discovery"].append((s, QUERIES[q], SOURCES[src], CORPORA[c], 50, K, json.dumps(scores.tolist()),
                                  json.dumps(hs)))
        rows["headsets"].append((s, "S", "S", 0, 0, json.dumps(hs)))
        if overlap:
            rows["ceilings"].append((s, K, 3.5, 3.0, 4.0, 200))
            rows["random_overlap"] += [(s, K, d, 5, int(rng.integers(0, K + 1))) for d in range(7)]
        if strips:
            for (l, h) in hs[:3]:
                for it in range(3):
                    m = rng.dirichlet(np.ones(6)) * 0.5
                    rows["strip_attention"].append((s, f"strip{it}", l, h, json.dumps(m.tolist())))

    for order, (p, copy) in enumerate((score_points or {}).items()):
        c, q, name = p.split("-")
        # the point's axes, as a study records them (meta score:<id>): a preset's
        store.set_meta(**{f"score:{p}": json.dumps({"name": name, **parse_score(name).to_dict(), "order": order})})
        scores = rng.uniform(0, 0.2, size=(L, H))
        hs = ([list(h) for h in sorted(heads[copy])] if copy else
              [[int(i // H), int(i % H)] for i in np.argsort(-scores, axis=None)[:K]])
        heads[p] = {tuple(h) for h in hs}
        rows["discovery"].append((p, QUERIES[q], "score", CORPORA[c], 50, K, json.dumps(scores.tolist()), json.dumps(hs)))
        rows["headsets"].append((p, "S", "S", 0, 0, json.dumps(hs)))

    items = [f"item{i:03d}" for i in range(n_items)]
    distinct_sets = list(itertools.islice(itertools.combinations(range(L * H), K), max(R, 1)))  # K flat head indices
    all_controls = dict(controls)
    if extra_controls:
        all_controls |= {"sinks": 1, "text-heavy": 1}
    test_list = list(tests)
    if row_groups:
        test_list += ["ncs-image", "ncs-question", "ncs-last"]
    if text:
        test_list += ["text"]
    if sweeps:
        test_list += [f"cers@beta={b}" for b in (1, 10, 100)]
    test_list += [f"ncs-all@ablation={a}" for a in ablations]
    if causal:
        true = rng.normal(0, 0.05, size=(L, H))
        units = [(f"L{l}H{h}", true[l, h]) for l in range(L) for h in range(H)] + [(f"L{l}", true[l].sum()) for l in range(L)]
        for hid, e in units:
            for arm, mean in (("matched", e), ("mismatched", 0.0)):
                rows["causal_map"] += [("causal-map/0-8", "exact", "ncs-all", "attention", hid, f"c-{arm}{i}", arm, float(v))
                                       for i, v in enumerate(mean + rng.normal(0, 0.02, 8))]
        top = np.argsort(-true, axis=None)[:K]
        rows["headsets"].append(("causal-ncs", "S", "S", 0, 0, json.dumps([[int(i // H), int(i % H)] for i in top])))
    for si, s in enumerate([*settings, *(["causal-ncs"] if causal else []), *(score_points or {})]):
        for test in test_list:
            effect = 0.02 * si
            s_vals = effect + rng.normal(0, 0.05, n_items)
            if test.startswith("ncs-all"):  # as the study stores NCS: matched drops minus the mismatched mean
                arm_vals = {"matched": 0.05 + effect + rng.normal(0, 0.03, n_items), "mismatched": rng.normal(0, 0.03, n_items)}
                s_vals = arm_vals["matched"] - arm_vals["mismatched"].mean()
            rows["outcomes"] += [(f"u-{s}-{test}", s, test, "S", it, float(v)) for it, v in zip(items, s_vals)]
            for c, r in all_controls.items():
                for d in range(small_pools.get(s, r) if c == "layer-matched" else stored.get(c, r)):
                    hid = f"{c}#{d}"
                    v = rng.normal(0, 0.05, n_items) + rng.normal(0, 0.02)
                    rows["outcomes"] += [(f"u-{s}-{test}", s, test, hid, it, float(x)) for it, x in zip(items, v)]
                    if test == test_list[0]:  # every draw a head-set of its own (real draws rarely repeat)
                        rows["headsets"].append((s, hid, c, d, 7, json.dumps([list(divmod(i, H)) for i in distinct_sets[d]])))
            if test.startswith("ncs-all"):
                for arm, vals in arm_vals.items():
                    rows["arms"] += [(f"u-{s}-{test}", s, test, "S", it, arm, float(v)) for it, v in zip(items, vals)]
        if sweeps:
            for t in k_sweep_tests[:1]:
                for k in k_points:
                    rows["outcomes"] += [(f"u-{s}-k{k}", s, t, f"S@k={k}", it, float(rng.normal(0.01 * k, 0.05)))
                                         for it in items]
    if sweeps:
        for s in settings:
            for t in k_sweep_tests[1:]:
                for k in k_points:
                    rows["outcomes"] += [(f"u-{s}-{t}-k{k}", s, t, f"S@k={k}", it, float(rng.normal(0.01 * k, 0.05)))
                                         for it in items]
    if overlap:
        for a, b in itertools.combinations(settings, 2):
            ov = len(heads[a] & heads[b])
            half = 0.8 * ov
            rows["overlap"].append((a, b, K, ov, half, half - 1, half + 1, 0, 3.5, 3.5, 3.5, half / 3.5))
    if audit:
        oracle = 0.97 if audit == "ok" else 0.55
        rows["audit"] += [("oracle", 40, oracle, 0.9, 1.0, int(0.9 <= oracle <= 1.0)),
                          ("floor", 40, 0.26, 0.15, 0.35, 1), ("matched", 40, 0.95, 0.9, 1.0, 1),
                          ("mismatched", 40, 0.2, 0.0, 0.45, 1)]
    if metrics:  # the other metrics' columns: linear maps of p4 (NCS = matched − mismatched mean holds in each)
        for table in ("outcomes", "arms", "causal_map"):
            rows[table] = [(*r, LOGPROB(r[-1]), LOGIT_DIFF(r[-1])) for r in rows[table]]
    if causal and atp:
        noise = np.random.default_rng(seed + 1)
        rows["causal_map"] += [(r[0], "atp", *r[2:7], float(0.8 * r[7] + noise.normal(0, 0.01)), None, None)
                               for r in list(rows["causal_map"]) if "H" in r[4]]
    store.commit_unit("synthetic", "synthetic", 0.0, rows)
    store.close()
    if strips:
        from PIL import Image

        (run_dir / "strips").mkdir(exist_ok=True)
        for it in range(3):
            arr = np.zeros((32, 192, 3), dtype=np.uint8)
            for p in range(6):
                arr[:, p * 32:(p + 1) * 32] = rng.integers(40, 220, 3)
                arr[8:24, p * 32 + 8:p * 32 + 24] = 255 - arr[0, p * 32]
            Image.fromarray(arr).save(run_dir / "strips" / f"strip{it}.png")
    return run_dir
