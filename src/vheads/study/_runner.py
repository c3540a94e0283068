"""``run_study``: discovery × evaluation × report, resumable, on any backend.

Stages: discovery (one unit per corpus × query) → overlap and noise ceilings, stability
curves (no forward pass: the stored per-item scores) → the exact causal map (one unit per
item shard, :mod:`vheads.study._causal`) → head-sets (the causal setting among them) and
their random controls → evaluation (one unit per setting × test × item shard) →
baseline audit → report. Every unit is committed to the store atomically; rerunning the
same command into the same directory computes only what is missing, and a run directory
made with a different configuration is refused.

A study of several models (``models = [...]``) runs these stages once per model, in config
order, into the same run directory and store: each model's rows are scoped by its name
(:class:`vheads.store.Store`), so it resumes per (model, unit); each model gets a backend of
its own, whose replicas load that model once. The report is then the cross-model one.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from vheads import __version__
from vheads._ids import S as S_ID, control_label, headset_id, k_label
from vheads.evaluation import COMMON_DRAWS, PATTERN_DRAWS, HeadSet, draw_controls
from vheads.evaluation import split_control_name
from vheads.study._backends import make_backend
from vheads._errors import VheadsError, check_output_path, path_inside, storage_error
from vheads._io import atomic_write
from vheads.study._config import StudyConfig, changed_config_error, model_config, model_entries, validate_for_model
from vheads.study._headline import headline_beta
from vheads.study._lock import RunLock
from vheads.study._report import build_report_if_available
from vheads.study._stability import stability_stage
from vheads.study._scores import ranks_per_layer, score_units
from vheads.store import STORE_NAME, Store
from vheads._seeds import derived_seed


@dataclass
class StudyResult:
    run_dir: Path
    report: Path | None
    seconds: dict[str, float]
    units_computed: int


def preflight_model(cfg: StudyConfig, key: str = "'model'") -> dict:
    """Check that the model exists and is a supported VLM, without loading weights
    (errors name the config ``key``: ``model``, or ``models[i] ('name')``)."""
    from transformers import AutoConfig

    import os

    from vheads.models import adapter_for, check_model_folder, resolve_model_path

    path = resolve_model_path(cfg.model)
    local = os.path.isdir(path)  # a local folder's files are checked now, before the run folder exists

    def check_folder(weights: bool) -> None:
        try:
            check_model_folder(path, weights)
        except VheadsError as e:
            raise VheadsError(f"config key {key}: {e}") from None

    if local:
        check_folder(weights=False)
    try:
        mc = AutoConfig.from_pretrained(path, revision=cfg.revision or None, **({"trust_remote_code": True} if cfg.trust_remote_code else {}))
    except Exception as e:  # noqa: BLE001 - the message is what matters
        raise VheadsError(f"config key {key}: cannot load {cfg.model!r}: {str(e).splitlines()[0]}") from None
    if getattr(mc, "vision_config", None) is None:
        raise VheadsError(f"config key {key}: {cfg.model!r} is not a vision-language model")
    try:
        adapter = adapter_for(mc.model_type)
    except ValueError as e:
        raise VheadsError(f"config key {key}: {cfg.model!r}: {e}") from None
    if local:
        check_folder(weights=True)
    tc = getattr(mc, "text_config", mc)
    return {"n_layers": tc.num_hidden_layers, "n_heads": tc.num_attention_heads, "attention_layers": adapter.attention_layers(tc),
            "prompts": _prompts(cfg, key)}


def _prompts(cfg: StudyConfig, key: str) -> dict[str, str]:
    """The rendered prompt of one item per kind (the report's protocol shows them); a
    checkpoint whose prompts cannot be built (chat template) is refused here, before any work."""
    from vheads.models import preflight_prompts, prompt_examples

    try:
        adapter, processor = preflight_prompts(cfg.model, cfg.revision or None, chat_template=cfg.chat_template or None,
                                               system_prompt=cfg.system_prompt or None, trust_remote_code=cfg.trust_remote_code)
        return prompt_examples(adapter, processor, cfg.question_templates, cfg.seed)
    except (ValueError, OSError) as e:
        raise VheadsError(f"config key {key}: {str(e).splitlines()[0]}") from None


#: one JSON line per unit: the full and suffix batch rows it ran (``vheads plan`` projects them)
FORWARD_ROWS = "forward_rows.jsonl"


def _log(run_dir: Path, line: str) -> None:
    with open(run_dir / "units.log", "a") as f:
        f.write(line + "\n")


def _commit(store: Store, run_dir: Path, res: dict) -> None:
    payload = res["rows"]
    strips = run_dir / "strips"
    for name, png in payload.get("strips", {}).items():  # item ids hold names from data: kept inside strips/
        atomic_write(path_inside(strips, f"{name}.png"), lambda fh: fh.write(png), mode="wb")
    for name, meta in payload.get("strip_meta", {}).items():
        atomic_write(path_inside(strips, f"{name}.json"), lambda fh: fh.write(json.dumps(meta)))
    for name, png in payload.get("grounding_images", {}).items():  # S's grounding maps for the report (vheads.study._grounding)
        atomic_write(path_inside(run_dir / "grounding", f"{name}.png"), lambda fh: fh.write(png), mode="wb")
    for name, maps in payload.get("grounding_maps", {}).items():
        atomic_write(path_inside(run_dir / "grounding", f"{name}.json"), lambda fh: fh.write(json.dumps(maps)))
    store.commit_unit(res["unit_id"], res["kind"], res["seconds"], payload["rows"])
    if res.get("forward_rows"):  # the batch rows the unit ran (vheads.study._plan projects them)
        with open(run_dir / FORWARD_ROWS, "a") as f:
            f.write(json.dumps({"model": store.model, "unit_id": res["unit_id"], **res["forward_rows"]}) + "\n")
    _log(run_dir, f"done {_logged(store, res['unit_id'])}")


def _logged(store: Store, unit_id: str) -> str:
    """A unit as ``units.log`` names it: ``<model>/<unit_id>`` in a multi-model run."""
    return f"{store.model}/{unit_id}" if store.model else unit_id


def _run_units(store, run_dir, backend, units, desc, progress) -> int:
    done = store.done_units()
    todo = [u for u in units if u["unit_id"] not in done]
    desc = f"{store.model}: {desc}" if store.model else desc
    bar = tqdm(total=len(units), initial=len(units) - len(todo), desc=desc, unit="unit", disable=not progress)
    for res in backend.run(todo, on_start=lambda u: _log(run_dir, f"start {_logged(store, u['unit_id'])}")):
        _commit(store, run_dir, res)
        bar.update(1)
    bar.close()
    return len(todo)


RANDOM_OVERLAP_DRAWS = 100  # uniform random head-sets per setting for the Fig. 7 baseline


def _overlap_stage(store: Store, cfg: StudyConfig, attention_layers: tuple[int, ...] | None = None) -> None:
    """Split-half ceilings, each pair's overlap at half size (Table 20), and the overlap of
    every setting with uniform random draws of its size (Fig. 7)."""
    from vheads.discovery import pair_overlap, split_half_ceiling

    if "overlap" in store.done_units():
        return
    t0 = time.time()
    disc = store.query("SELECT setting, k, headset FROM discovery ORDER BY setting")
    per_layer = ranks_per_layer(cfg)  # setting id -> whether its top-k is taken per layer
    ceil, per, ids = {}, {}, {}
    rows = {"ceilings": [], "overlap": [], "random_overlap": []}
    for sid, k, _ in disc:
        got = store.query("SELECT item_id, scores FROM item_scores WHERE setting=? ORDER BY item_id", sid)
        ids[sid] = [i for i, _ in got]
        per[sid] = np.array([json.loads(s) for _, s in got])
        c = split_half_ceiling(per[sid], k, cfg.splits, derived_seed(cfg.seed, "ceiling", sid), per_layer=per_layer(sid),
                               attention_layers=attention_layers)
        ceil[sid] = c
        rows["ceilings"].append((sid, k, c.mean, c.lo, c.hi, cfg.splits))
    sets = {sid: {tuple(h) for h in json.loads(hs)} for sid, _, hs in disc}
    for i, (a, ka, _) in enumerate(disc):
        for b, _, _ in disc[i + 1:]:
            p = pair_overlap(a, b, per[a], per[b], ceil[a], ceil[b], len(sets[a] & sets[b]), ka, cfg.splits,
                             derived_seed(cfg.seed, "pair-overlap", a, b), per_layer(a), ids[a] == ids[b], attention_layers)
            rows["overlap"].append((a, b, ka, p.all_items, p.half.mean, p.half.lo, p.half.hi, int(p.same_items),
                                    ceil[a].mean, ceil[b].mean, p.geo_ceiling, p.fraction))
    # Fig. 7: overlap of each native set with uniform random draws of the same size
    # (uniform over the heads that exist: on a hybrid model, the softmax layers' heads)
    L, H = next(iter(per.values())).shape[1:] if per else (0, 0)
    pool = [(l, h) for l in (attention_layers if attention_layers is not None else range(L)) for h in range(H)]
    for sid, k, _ in disc:
        seed = derived_seed(cfg.seed, "random-overlap", sid)
        rng = np.random.default_rng(seed)
        for d in range(RANDOM_OVERLAP_DRAWS):
            draw = {pool[int(f)] for f in rng.choice(len(pool), size=len(sets[sid]), replace=False)}
            rows["random_overlap"].append((sid, k, d, seed, len(sets[sid] & draw)))
    store.commit_unit("overlap", "overlap", time.time() - t0, rows)


def _heads_json(hs: HeadSet) -> str:
    return json.dumps([list(h) for h in hs.heads])


def control_seed(seed: int, heads: HeadSet, name: str) -> int:
    """The seed of control ``name``'s draws for the head-set ``heads`` (docs/controls.md):
    derived from the heads themselves (an any-layer draw: from their number, see
    ``COMMON_DRAWS``), not from the setting's id, so two settings that
    select the same heads (``cm-ord-gaze`` and ``cm-ord-last`` on the tiny model), a k-sweep
    point and an algebra part with a setting's heads draw the same controls (R draws from
    one seed: the first R of a longer sequence), and the probe memo runs their rows once.
    A layer-matched draw's seed comes from S's per-layer counts (``PATTERN_DRAWS``): every
    head-set of one layer pattern reads one sequence, S itself skipped."""
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


def _headset_stage(store: Store, cfg: StudyConfig, shape: tuple[int, int], attention_layers: tuple[int, ...] | None = None) -> None:
    from vheads.discovery import select_heads

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

    from vheads.study._causal import CAUSAL_SETTING, causal_setting_rows

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


def _beta_sweep_units(store: Store, cfg: StudyConfig) -> list[dict]:
    """The β sweep, run before every other evaluation (the headline β is chosen from its
    controls, :mod:`vheads.study._headline`): per setting with an S and shard, one unit
    running S and its first ``beta_sweep_controls`` layer-matched draws at every β."""
    if not cfg.beta_sweep:
        return []
    units, n = [], cfg.n_items("beta-sweep")
    for (sid,) in store.query("SELECT DISTINCT setting FROM headsets WHERE control='S' AND setting NOT LIKE '%&%' ORDER BY setting"):
        if "cers" not in cfg.for_setting(sid).tests:
            continue
        hs = store.query("SELECT headset_id, heads FROM headsets WHERE setting=? AND (control='S' OR "
                         "(control='layer-matched' AND draw<?)) ORDER BY control != 'S', draw", sid, cfg.beta_sweep_controls)
        for lo in range(0, n, cfg.run.shard_size):
            hi = min(n, lo + cfg.run.shard_size)
            units.append({"unit_id": f"beta-sweep/{sid}/{lo}-{hi}", "kind": "eval", "setting": sid, "test": "beta-sweep",
                          "shard": [lo, hi], "headset_ids": [h for h, _ in hs], "headsets": [json.loads(x) for _, x in hs]})
    return units


def _eval_units(store: Store, cfg: StudyConfig, beta: float | None = None, rnd: int = 0) -> list[dict]:
    """Every evaluation unit of round ``rnd``; CERS (and its k sweep) at the headline ``beta``
    (default the config's).

    ``controls_h = 0``: round 0 holds every unit (S and every control draw). Otherwise
    (:mod:`vheads.study._sequential`) round 0 holds S, every non-exchangeable control and the
    first ``controls_batch`` draws of each exchangeable one; round r ≥ 1 the next batch of
    each control still undecided in its (setting, test), under ids ``.../r<r>``; ``[]`` once
    every comparison is decided."""
    from vheads.study._ablation import ablation_test_id
    from vheads.study._sequential import round_plan, setting_draws, store_pools, test_ids

    seq = setting_draws(store, cfg) if cfg.controls_h else {}
    pools = store_pools(store)  # how each setting's draws were chosen ([test_controls] reads it)
    if rnd and not seq:
        return []
    later = round_plan(store, cfg, rnd, seq) if rnd else {}
    units = []
    settings = [s for (s,) in store.query("SELECT DISTINCT setting FROM headsets ORDER BY setting")]
    for sid in settings:
        hs = store.query("SELECT headset_id, heads FROM headsets WHERE setting=? ORDER BY control != 'S', control, draw", sid)
        heads_of = dict(hs)
        if rnd == 0:  # S, the controls run whole and the first batch of each sequential control
            first = {h for ids in seq.get(sid, {}).values() for h in ids[:cfg.controls_batch]}
            later_ids = {h for ids in seq.get(sid, {}).values() for h in ids} - first
            ids = [h for h, _ in hs if h not in later_ids]
        algebra = "&" in sid  # shared / only-one head-sets: NCS at all rows only
        scfg = cfg.for_setting(sid)  # its [[scope]]'s tests, row groups and k sweep
        tests = [t for t in cfg.tests if t == "ncs"] if algebra else scfg.tests
        for test in tests:
            cells = None
            if rnd:
                ids, undecided = later.get((sid, test), ([], set()))
                if not ids:
                    continue
                if test == "ncs":  # only the row groups and ablations with an undecided cell run their forwards
                    cells = {"row_groups": [g for g in scfg.row_groups if f"ncs-{g}" in undecided],
                             "ablations": [a for a in cfg.ablation if a != "attention"
                                           and ablation_test_id(scfg.row_groups[0], a) in undecided]}
            n_items = cfg.n_items(test)
            run_ids = test_ids(cfg, sid, test, ids, pools) if scfg.test_controls and not algebra else ids
            for lo in range(0, n_items, cfg.run.shard_size):
                hi = min(n_items, lo + cfg.run.shard_size)
                unit = {"unit_id": f"eval/{sid}/{test}/{lo}-{hi}" + (f"/r{rnd}" if rnd else ""), "kind": "eval",
                        "setting": sid, "test": test, "shard": [lo, hi], "headset_ids": run_ids,
                        "headsets": [json.loads(heads_of[h]) for h in run_ids],
                        "row_groups": ["all"] if algebra else scfg.row_groups if scfg is not cfg else None,
                        "beta": cfg.beta if beta is None else beta}
                if scfg.k_sweep_tests != cfg.k_sweep_tests or cfg.k_sweep_tests != ["cers", "ncs"]:
                    unit["k_sweep_tests"] = scfg.k_sweep_tests
                if cells is not None:
                    unit["cells"] = cells
                units.append(unit)
    # test-major, then shard, then setting: every setting runs a test on the same items, so
    # consecutive units share prompts and many head-sets, and a replica's probe memo (bounded)
    # holds what the next unit asks for however large the study
    rank = {t: i for i, t in enumerate(cfg.tests)}
    units.sort(key=lambda u: (rank.get(u["test"], len(rank)), u["shard"][0]))
    return units


def _evaluation_rounds(store: Store, cfg: StudyConfig, run_dir: Path, backend, beta: float | None, progress: bool) -> int:
    """The evaluation stage, round by round (:mod:`vheads.study._sequential`): each round's
    units are planned from the rounds before it (all committed), so a resumed run plans the
    same units; records where each sequential comparison stopped. Returns the units computed."""
    from vheads.study._sequential import record_stops

    n, rnd = 0, 0
    while True:
        units = _eval_units(store, cfg, beta, rnd)
        if not units:
            break
        n += _run_units(store, run_dir, backend, units, "evaluation" + (f" (controls round {rnd})" if rnd else ""), progress)
        if not cfg.controls_h:
            break
        rnd += 1
    if cfg.controls_h:
        record_stops(store, cfg)
    return n


def _ood_units(store: Store, cfg: StudyConfig, beta: float | None = None) -> list[dict]:
    """Pointing suite: one audit unit per task, and per task x discovered setting x test
    (CERS, NCS) x shard one unit running S and its first ``ood_controls`` layer-matched draws."""
    units = []
    for spec in cfg.ood_tasks:
        task = spec.partition(":")[0]
        units.append({"unit_id": f"ood-audit/{task}", "kind": "ood-audit", "task": task, "spec": spec})
        for (sid,) in store.query("SELECT DISTINCT setting FROM headsets WHERE setting NOT LIKE '%&%' ORDER BY setting"):
            hs = store.query("SELECT headset_id, heads FROM headsets WHERE setting=? AND (control='S' OR "
                             "(control='layer-matched' AND draw<?)) ORDER BY control != 'S', draw", sid, cfg.ood_controls)
            for test in ("cers", "ncs"):
                for lo in range(0, cfg.n_ood, cfg.run.shard_size):
                    hi = min(cfg.n_ood, lo + cfg.run.shard_size)
                    units.append({"unit_id": f"ood/{task}/{sid}/{test}/{lo}-{hi}", "kind": "ood-eval", "task": task, "spec": spec,
                                  "setting": sid, "test": test, "shard": [lo, hi], "headset_ids": [h for h, _ in hs],
                                  "headsets": [json.loads(x) for _, x in hs], "beta": cfg.beta if beta is None else beta})
    return units


def run_study(cfg: StudyConfig, out: str | Path = "runs/study", progress: bool = True, report: bool = True,
              skip_doctor: bool = False) -> StudyResult:
    """Run (or resume) the whole study of ``cfg`` into ``out``; returns the report's path.

    Before a model's first unit its replica runs the doctor's fast checks
    (:func:`vheads.doctor.fast_checks`); a failed invariant stops the run with the check's
    name. ``skip_doctor`` runs anyway; the store's ``doctor`` meta records the checks or the skip.

    Everything is checked before the run folder is made (the config against the model's
    shape included); the run holds ``out``'s lock (:class:`RunLock`) throughout, so a
    second run on the same folder is refused instead of racing this one.
    """
    from vheads.study._data import preflight_data

    run_dir = check_output_path(Path(out))
    if run_dir.exists() and not run_dir.is_dir():
        raise VheadsError(f"--out {run_dir} is a file, not a run folder; pass a folder")
    _refuse_other_config(cfg, run_dir)  # at once: before the model's shape, the data or the lock
    models = study_models(cfg)
    preflight_data(cfg)  # every photo and corpus read once, before the model or the run directory
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise (storage_error(e, run_dir) or VheadsError(f"cannot make the run folder {run_dir} ({e.strerror or e})")) from None
    with RunLock(run_dir):
        return _run_locked(cfg, run_dir, models, progress, report, skip_doctor)


def study_models(cfg: StudyConfig) -> list[tuple[str, StudyConfig, dict]]:
    """``(name, that model's single-model config, its shape)`` per model of the study —
    ``[("", cfg, shape)]`` for a single-model study — each checked (loadable, supported,
    ``k`` within its heads) without loading weights."""
    entries = model_entries(cfg)
    if not entries:
        shape = preflight_model(cfg)
        validate_for_model(cfg, shape["n_layers"], shape["n_heads"], shape["attention_layers"])
        return [("", cfg, shape)]
    out = []
    for i, e in enumerate(entries):
        mcfg = model_config(cfg, e)
        shape = preflight_model(mcfg, f"'models[{i}]' ({e.name!r})")
        try:
            validate_for_model(mcfg, shape["n_layers"], shape["n_heads"], shape["attention_layers"])
        except VheadsError as err:
            raise VheadsError(f"{err} (for models[{i}], {e.name!r})") from None
        out.append((e.name, mcfg, shape))
    return out


def _refuse_other_config(cfg: StudyConfig, run_dir: Path) -> None:
    """A run folder holding units of another configuration is refused before any work, the
    error naming the keys that differ (:func:`_claim` checks again under the lock)."""
    if not (run_dir / STORE_NAME).is_file():
        return
    store = Store(run_dir, readonly=True)
    try:
        have = store.get_meta("config_hash")
        if have is not None and have != cfg.science_hash() and store.query("SELECT 1 FROM main.units LIMIT 1"):
            raise changed_config_error(run_dir, store.get_meta("config"), cfg)
    finally:
        store.close()


def _claim(store: Store, cfg: StudyConfig, run_dir: Path, **meta) -> None:
    """Refuse a store that holds a run of another configuration; record ``cfg`` (and
    ``meta``) in a new one."""
    have = store.get_meta("config_hash")
    if have is not None and have != cfg.science_hash() and not store.query("SELECT 1 FROM main.units LIMIT 1"):
        # a run that stopped before its first unit holds nothing but its claim: the corrected
        # configuration takes the folder over instead of being refused
        with store.transaction() as db:
            db.execute("DELETE FROM main.meta")
        have = None
    if have is not None and have != cfg.science_hash():
        error = changed_config_error(run_dir, store.get_meta("config"), cfg)
        store.close()
        raise error
    if have is None:
        store.set_meta(config=json.dumps(cfg.to_dict()), config_hash=cfg.science_hash(), vheads_version=__version__,
                       **meta)


def _model_meta(cfg: StudyConfig, shape: dict) -> dict[str, str]:
    return {"model_id": cfg.model, "n_layers": str(shape["n_layers"]), "n_heads": str(shape["n_heads"]),
            "attention_layers": json.dumps(list(shape["attention_layers"])), "prompts": json.dumps(shape.get("prompts", {})),
            "model_fingerprint": _fingerprint(cfg)}


def _fingerprint(cfg: StudyConfig) -> str:
    """The model's fingerprint as :func:`vheads.models.load_model` computes it (a local folder's
    weight files hashed, a hub model's id and revision), so the head-set files the report
    writes (``RUN/headsets/``) load in ``vheads evaluate`` without ``--force``."""
    import os

    from vheads.models import resolve_model_path, weights_fingerprint

    path = resolve_model_path(cfg.model)
    return weights_fingerprint(Path(path)) if os.path.isdir(path) else f"hub:{cfg.model}@{cfg.revision or 'main'}"


def _run_locked(cfg: StudyConfig, run_dir: Path, models: list[tuple[str, StudyConfig, dict]], progress: bool,
                report: bool, skip_doctor: bool = False) -> StudyResult:
    """Every model's stages in turn (one store; a model's rows scoped by its name), then the report."""
    secs: dict[str, float] = {}
    n_computed = 0
    if models[0][0]:  # a multi-model run: the run's own rows name its models
        top = Store(run_dir)
        _claim(top, cfg, run_dir, models=json.dumps([{"name": n, **_model_meta(m, sh)} for n, m, sh in models]))
        top.close()
    for name, mcfg, shape in models:
        store = Store(run_dir, model=name)
        _claim(store, mcfg, run_dir, **_model_meta(mcfg, shape))
        n_computed += _run_model(store, mcfg, run_dir, shape, progress, secs, skip_doctor)
    report_path = None
    if report:
        t = time.time()
        _log(run_dir, "start report")
        report_path = build_report_if_available(run_dir)
        secs["report"] = time.time() - t
    return StudyResult(run_dir, report_path, secs, n_computed)


def _doctor_stage(store: Store, cfg: StudyConfig, run_dir: Path, backend, skip: bool) -> None:
    """The doctor's fast checks on the backend's replica, once per run (a unit), before the
    first other unit; a failed invariant is a :class:`VheadsError` naming it (nothing is
    committed, so the next run checks again). ``skip``: recorded in the store's meta instead."""
    if "doctor" in store.done_units():
        return
    if skip:
        store.set_meta(doctor=json.dumps({"skipped": True}))
        _log(run_dir, f"skip {_logged(store, 'doctor')} (--skip-doctor)")
        return
    (res,) = list(backend.run([{"unit_id": "doctor", "kind": "doctor"}], on_start=lambda u: _log(run_dir, f"start {_logged(store, 'doctor')}")))
    failed = res["rows"]["doctor"]["failed"]
    if failed:
        first = next(c for c in res["rows"]["doctor"]["checks"] if c["name"] == failed[0])
        raise VheadsError(f"vheads doctor: invariant(s) {', '.join(failed)} failed on {cfg.model!r} ({first['summary']}); "
                          f"run `vheads doctor --model {cfg.model}` for the details, or pass --skip-doctor to run anyway "
                          "(recorded in the run)")
    _commit(store, run_dir, res)


def _run_model(store: Store, cfg: StudyConfig, run_dir: Path, shape: dict, progress: bool, secs: dict[str, float],
               skip_doctor: bool = False) -> int:
    """One model's stages into its (scoped) ``store``, on a backend of its own: each replica
    loads the model once. Adds each stage's seconds to ``secs``; closes ``store``."""
    n_computed = 0

    def timed(stage, t):
        secs[stage] = secs.get(stage, 0.0) + time.time() - t

    backend = make_backend(cfg.to_dict())
    try:
        t = time.time()
        _doctor_stage(store, cfg, run_dir, backend, skip_doctor)
        timed("doctor", t)
        t = time.time()
        # the score points first: a selection that keeps no head stops the run before the grid's work
        disc = score_units(cfg) + [{"unit_id": f"discovery/{c}/{q}", "kind": "discovery", "corpus": c, "query": q}
                                   for c in cfg.corpora for q in cfg.queries]
        n_computed += _run_units(store, run_dir, backend, disc, "discovery", progress)
        timed("discovery", t)
        t = time.time()
        n_computed += _run_units(store, run_dir, backend, [{"unit_id": "image-mass", "kind": "image-mass"}], "attention", progress)
        _overlap_stage(store, cfg, shape["attention_layers"])
        timed("overlap", t)
        t = time.time()
        stability_stage(store, cfg, shape["attention_layers"])
        timed("stability", t)
        t = time.time()
        from vheads.study._causal import causal_map_units

        n_computed += _run_units(store, run_dir, backend, causal_map_units(cfg), "causal map", progress)
        timed("causal map", t)
        t = time.time()
        _headset_stage(store, cfg, (shape["n_layers"], shape["n_heads"]), shape["attention_layers"])
        timed("controls", t)
        t = time.time()
        n_computed += _run_units(store, run_dir, backend, _beta_sweep_units(store, cfg), "beta sweep", progress)
        beta = headline_beta(store, cfg)  # from the sweep's controls alone (beta_rule), before any CERS of S at it
        n_computed += _evaluation_rounds(store, cfg, run_dir, backend, beta, progress)
        timed("evaluation", t)
        t = time.time()
        n_computed += _run_units(store, run_dir, backend, [{"unit_id": "audit", "kind": "audit"}], "audit", progress)
        timed("audit", t)
        if cfg.ood_tasks:
            t = time.time()
            n_computed += _run_units(store, run_dir, backend, _ood_units(store, cfg, beta), "pointing suite", progress)
            timed("ood", t)
    finally:
        backend.close()
        store.close()
    return n_computed


def run_finished(store: Store, cfg: StudyConfig) -> bool:
    """Whether every stage of ``cfg``'s study is in ``store`` (the audit runs after the
    evaluation; the pointing suite, where configured, last)."""
    done = store.done_units()
    return "audit" in done and all(u["unit_id"] in done for u in _ood_units(store, cfg))
