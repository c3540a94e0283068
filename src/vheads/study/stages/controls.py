"""Head-sets and their random controls (DESIGN.md "Controls and statistics"): every
setting's S (the causal setting's among them), each ``[controls]`` entry's draws from a seed
of their own (:func:`control_seed`), the k sweep's sets with their layer-matched draws, and
the head-set algebra's shared / only-one parts (seed Table 15). No forward pass: one
``headsets`` unit computed on the driver."""

from __future__ import annotations

import json
import time

import numpy as np

from vheads._seeds import derived_seed
from vheads.study._stage import Key, Stage, register_stage

KEYS = (
    Key("algebra_controls", 100, "layer-matched draws for the shared / only-one head-sets of ordinal vs referring (0 = skip)"),
    Key("controls_h", 10, "sequential rank p (Besag & Clifford 1991): an exchangeable control (layer-matched, any-layer,\n"
        "random-n of |S|) stops once h of its draws reach T_S in every cell of its (setting, test), p = h / L;\n"
        "its [controls] R is then R_max; 0 = run every one of R (a fixed-R rank p)",
        later=True, before=0),  # a run from before the sequential rank p compared every draw (controls_h = 0)
    Key("controls_batch", 32, "exchangeable control draws per round of the sequential comparison (the rows run past a stop)",
        later=True),
    Key("test_controls", {}, "R of a [controls] entry in one test, e.g. [test_controls.ncs-grid] layer-matched = 100",
        later=True, type=dict[str, dict[str, int]]),
    Key("controls", {"layer-matched": 249, "any-layer": 249, "attention-matched": 20}, "control name = R draws per head-set",
        entries={"layer-matched": "R >= 239 lets a Holm-adjusted p over 12 settings fall under 0.05 (where the pool holds\n"
                                  "as many: a pool of at most 2R is compared whole, each head-set once)",
                 "any-layer": "every other head-set of |S| heads (C(64, 6) - 1 = 74,974,367 on the tiny model; its\n"
                              "layer-matched pools, prod C(16, c_l) - 1, all hold far more than 2R as well)",
                 "attention-matched": "layer- and image-attention-matched draws (Table 9, column B)"},
        example='# "random-n@200" = 5      # random-n with its own head count (Table 12); also sinks = 1, text-heavy = 1, '
                "whole-layers = R", type=dict[str, int]),
)


def validate_controls(cfg, bad) -> None:
    """Every ``[controls]`` entry a known control (the error names ``controls.NAME``) with a
    number of draws R it can take; the sequential comparison's h and rounds; the algebra's R;
    ``[test_controls]`` naming known tests and configured controls."""
    from vheads.evaluation import MAX_R, TESTS, get_control, split_control_name

    if not cfg.controls:
        bad("controls", "is empty: a head-set means something only against controls; e.g. layer-matched = 249")
    for name, R in cfg.controls.items():
        try:
            ctl = get_control(split_control_name(name)[0])
        except ValueError as e:
            bad(f"controls.{name}", str(e))
        if R < 1:
            bad(f"controls.{name}", f"R must be at least 1, got {R}")
        if R > MAX_R:
            bad(f"controls.{name}", f"R = {R} draws is more than {MAX_R:,}")
        if not ctl.random and R != 1:
            bad(f"controls.{name}", f"{name} is deterministic, so R must be 1, got {R}")
    if cfg.controls_h < 0:
        bad("controls_h", f"must be 0 (every one of R controls) or h >= 1 (stop once h controls reach S), got {cfg.controls_h}")
    if not 1 <= cfg.controls_batch <= MAX_R:
        bad("controls_batch", f"must be 1 to {MAX_R:,} control draws per round, got {cfg.controls_batch}")
    if not 0 <= cfg.algebra_controls <= MAX_R:
        bad("algebra_controls", f"must be 0 (skip) to {MAX_R:,} layer-matched draws, got {cfg.algebra_controls}")
    for t, per in cfg.test_controls.items():
        if t not in TESTS:
            bad(f"test_controls.{t}", f"unknown test {t!r}; choose from {', '.join(TESTS)}")
        for name, R in per.items():
            if name not in cfg.controls:
                bad(f"test_controls.{t}.{name}", f"{name!r} is not one of the configured controls "
                    f"({', '.join(cfg.controls)}); a test's count changes the R of a [controls] entry")
            if not 1 <= R <= MAX_R:
                bad(f"test_controls.{t}.{name}", f"R must be 1 to {MAX_R:,}, got {R}")
            if cfg.controls[name] == 1 and R != 1 and name in ("sinks", "text-heavy"):
                bad(f"test_controls.{t}.{name}", f"{name} is deterministic, so R must be 1, got {R}")


def control_seed(seed: int, heads, name: str) -> int:
    """The seed of control ``name``'s draws for the head-set ``heads`` (docs/controls.md):
    derived from the heads themselves (an any-layer draw: from their number, see
    ``COMMON_DRAWS``), not from the setting's id, so two settings that
    select the same heads (``cm-ord-gaze`` and ``cm-ord-last`` on the tiny model), a k-sweep
    point and an algebra part with a setting's heads draw the same controls (R draws from
    one seed: the first R of a longer sequence), and the probe memo runs their rows once.
    A layer-matched draw's seed comes from S's per-layer counts (``PATTERN_DRAWS``): every
    head-set of one layer pattern reads one sequence, S itself skipped."""
    from vheads.evaluation import COMMON_DRAWS, PATTERN_DRAWS

    if name in COMMON_DRAWS:
        return derived_seed(seed, "control", f"common:{len(heads)}", name)
    if name in PATTERN_DRAWS:  # the draws depend on S only through its layer pattern (and the skip of S)
        return derived_seed(seed, "control", "pattern:" + ",".join(map(str, heads.per_layer_counts().tolist())), name)
    return derived_seed(seed, "control", ",".join(f"{l}.{h}" for l, h in sorted(heads.heads)), name)


def algebra_pairs(settings: list[str]) -> list[tuple[str, str]]:
    """Pairs of settings that differ in one factor, for head-set algebra (seed Table 15):
    the heads they share and the heads only one has. As in the seed, two pairs per factor,
    at the query-span and last-token sources:

    - query type: ``c0-ord-s`` vs ``c0-ref-s`` on the first corpus c0;
    - corpus: ``c0-ord-s`` vs ``c1-ord-s`` (the first two corpora);
    - attention source: ``cL-ord-s`` vs ``cL-ord-out`` on the last corpus cL;

    for s in (qsp, last); pairs whose settings the study lacks are left out. Corpora are
    ordered as they first appear in ``settings``."""
    have = set(settings)
    corpora = list(dict.fromkeys(s.split("-", 1)[0] for s in settings))
    if not corpora:
        return []
    c0, cl = corpora[0], corpora[-1]
    pairs = []
    for src in ("qsp", "last"):
        pairs.append((f"{c0}-ord-{src}", f"{c0}-ref-{src}"))
        if len(corpora) > 1:
            pairs.append((f"{c0}-ord-{src}", f"{corpora[1]}-ord-{src}"))
        pairs.append((f"{cl}-ord-{src}", f"{cl}-ord-out"))
    return [p for p in dict.fromkeys(pairs) if p[0] in have and p[1] in have]


def _heads_json(hs) -> str:
    return json.dumps([list(h) for h in hs.heads])


def headset_stage(store, cfg, shape: tuple[int, int], attention_layers: tuple[int, ...] | None = None) -> None:
    """Compute and commit the ``headsets`` unit (once) and the ``control_fallbacks`` /
    ``control_pools`` meta."""
    from vheads._ids import S as S_ID, control_label, headset_id, k_label
    from vheads.discovery import select_heads
    from vheads.evaluation import COMMON_DRAWS, HeadSet, draw_controls, split_control_name
    from vheads.study._causal import CAUSAL_SETTING, causal_setting_rows

    if "headsets" in store.done_units():
        return
    t0 = time.time()
    L, H = shape
    inputs = {}
    for key in ("image_mass", "sink_mass"):
        v = store.get_meta(key)
        if v is not None:
            inputs[key] = np.array(json.loads(v))
    rows, fallbacks = [], {}
    discovered = {}

    pools: dict = {}

    def record(setting: str, label: str, draws, R: int) -> None:
        """Keep the fallbacks of one control draw, ``fallbacks[setting][label]``, and how its
        head-sets were chosen, ``pools[setting][label]`` (:func:`vheads.evaluation.draw_controls`:
        the whole pool or distinct draws; its size where known; R asked). The row groups, the
        β sweep and the pointing suite reuse the main draws (label ``layer-matched``), so they
        carry the main record."""
        if draws.fallbacks:
            fallbacks.setdefault(setting, {})[label] = [str(f) for f in draws.fallbacks]
        pools.setdefault(setting, {})[label] = {"mode": draws.mode, "pool": draws.pool, "n": len(draws), "R": R}

    # the discovered settings, then the causal one (the exact map's top-k: same controls, same tests)
    for sid, scores, heads in (store.query("SELECT setting, scores, headset FROM discovery ORDER BY setting")
                               + causal_setting_rows(store, cfg, shape, attention_layers)):
        S = HeadSet([tuple(h) for h in json.loads(heads)], L, H, attention_layers)
        if sid != CAUSAL_SETTING:  # head-set algebra pairs discovered settings only
            discovered[sid] = S
        rows.append((sid, "S", "S", 0, cfg.seed, _heads_json(S)))
        scfg = cfg.for_setting(sid)  # its [[scope]]'s controls and k sweep
        for name in scfg.controls:
            R = scfg.drawn_R(name)  # the most any of its tests compares ([test_controls])
            seed = control_seed(cfg.seed, S, name)
            base, n = split_control_name(name)  # "random-n@200": 200 heads per draw
            draws = draw_controls(base, S, R, seed, **({"n": n} if n else {}), **({"common": True} if base in COMMON_DRAWS else {}),
                                  **inputs)
            label = control_label(name)
            record(sid, label, draws, R)
            for i, d in enumerate(draws):
                rows.append((sid, headset_id(label, i), label, i, seed, _heads_json(d)))
        sc = np.array(json.loads(scores))
        for kk in scfg.k_sweep:
            if kk <= L * H:
                Sk = select_heads(sc, kk, cfg.selection, attention_layers)
                rows.append((sid, k_label(S_ID, kk), "S@k", kk, cfg.seed, _heads_json(Sk)))
                if scfg.k_sweep_controls:  # every sweep point is tested against its own controls
                    seed = control_seed(cfg.seed, Sk, "layer-matched")
                    draws = draw_controls("layer-matched", Sk, scfg.k_sweep_controls, seed)
                    record(sid, k_label("layer-matched", kk), draws, scfg.k_sweep_controls)
                    for i, d in enumerate(draws):
                        rows.append((sid, headset_id("layer-matched", i, kk), "layer-matched@k", i, seed, _heads_json(d)))
    # head-set algebra: shared heads and heads only one setting has, each with
    # same-size layer-matched controls (pseudo-setting "A&B")
    if cfg.algebra_controls:
        for a, b in algebra_pairs(list(discovered)):
            pid = f"{a}&{b}"
            parts = {"shared": discovered[a] & discovered[b], f"only:{a}": discovered[a] - discovered[b], f"only:{b}": discovered[b] - discovered[a]}
            for part, hs in parts.items():
                if not len(hs):
                    continue
                rows.append((pid, part, "S", 0, cfg.seed, _heads_json(hs)))
                seed = control_seed(cfg.seed, hs, "layer-matched")
                draws = draw_controls("layer-matched", hs, cfg.algebra_controls, seed)
                record(pid, f"{part}/layer-matched", draws, cfg.algebra_controls)
                for i, d in enumerate(draws):
                    rows.append((pid, headset_id(f"{part}/layer-matched", i), f"{part}/layer-matched", i, seed, _heads_json(d)))
    store.commit_unit("headsets", "headsets", time.time() - t0, {"headsets": rows})
    store.set_meta(control_fallbacks=json.dumps(fallbacks), control_pools=json.dumps(pools))


def _run(ctx) -> int:
    headset_stage(ctx.store, ctx.cfg, (ctx.shape["n_layers"], ctx.shape["n_heads"]), ctx.shape["attention_layers"])
    return 0


STAGE = register_stage(Stage("controls", 50, keys=KEYS, validate=validate_controls, run=_run, tables=("headsets",)))
