"""``evaluate_headsets``: test head-set files against random controls (the ``vheads evaluate`` command).

For each head-set S and test, the controls are drawn (recorded seeds): distinct head-sets,
the whole pool when it holds at most twice R (:func:`vheads.evaluation.draw_controls`). S
and all of them run in the same batched forwards over the same items, and the summary gives
T_S with its 95% t-interval, each control family's mean, SD and z, the rank p over the n
head-sets compared (floor 1/(n + 1)) and — over the family of head-sets tested together —
Holm-adjusted p, its floor and the verdict: yes, no, or cannot tell with these controls
(:func:`vheads.evaluation.verdict`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from vheads._ids import headset_id
from vheads._errors import VheadsError
from vheads._seeds import derived_seed
from vheads.evaluation._ablation import check_ablation
from vheads.evaluation._controls import draw_controls, get_control, is_exchangeable
from vheads.evaluation._grounding import GroundingRule, capture_maps, grounding
from vheads.evaluation._sequential import control_rank_p
from vheads._headset import HeadSet
from vheads.evaluation._metrics import Outcomes, cers, head_attention_mass, ncs, ncs_grid, text_arm
from vheads.evaluation._probe import ProbeMemo
from vheads.evaluation._request import TEST_REGISTRY, TEST_SETS, check_request, item_sets, reference_sets
from vheads.evaluation._stats import (
    MIN_BOOTSTRAP_N, bca_diff_ci, bootstrap_diff_ci, holm, holm_floors, member_required_n, rank_p, t_interval, verdict,
    welch_interval, z_score,
)


@dataclass
class HeadsetResult:
    name: str  # setting id or file stem
    test: str
    t_s: float
    ci: tuple[float, float]
    #: name -> mean, sd, z, rank_p, holm_p (over the distinct head-sets compared), R asked, distinct (n compared),
    #: mode, pool, seed, fallbacks; holm_floor, verdict (yes / no / cannot tell), family {m, members}, n_needed
    controls: dict[str, dict] = field(default_factory=dict)
    outcomes: Outcomes | None = None
    headset_ids: list[str] = field(default_factory=list)
    ci_method: str = "t"  # "t" (one sample over items) or "welch" (NCS: two independent arms)
    ci_bootstrap: tuple[float, float] | None = None  # NCS: percentile bootstrap, both arms resampled
    ci_bca: tuple[float, float] | None = None  # NCS with fewer than MIN_BOOTSTRAP_N items per arm: BCa beside it
    bootstrap_seed: int | None = None  # derived from (run seed, head-set, test)
    ablation: str = "attention"  # what hiding S meant (ABLATIONS)
    reference: dict | None = None  # the mean ablation's reference items ({kind: ids}, seed) / the resample seed

    def to_records(self) -> list[dict]:
        """One flat row per control kind: the head-set's T_S and 95% interval (``ci_method``:
        t over items, or Welch over NCS's two arms) beside that control's mean, SD, z, rank p
        and Holm p over its distinct draws (what ``vheads evaluate`` prints)."""
        lead = {"headset": self.name, "test": self.test, "T_S": self.t_s, "ci_lo": self.ci[0], "ci_hi": self.ci[1],
                "ci_method": self.ci_method}
        return [{**lead, "control": name, "mean": c.get("mean"), "sd": c.get("sd"), "z": c.get("z"),
                 "rank_p": c.get("rank_p"), "holm_p": c.get("holm_p"), "draws": c.get("distinct")}
                for name, c in self.controls.items()] or [lead]

    def to_frame(self):
        """:meth:`to_records` as a pandas DataFrame (where pandas is installed)."""
        from vheads._table import frame

        return frame(self.to_records())

    def __repr__(self) -> str:
        from vheads._table import text_table

        n = "" if self.outcomes is None else f", {len(self.outcomes.item_ids)} items"
        return text_table(self.to_records(), f"HeadsetResult {self.name} {self.test}{n}; to_records(), to_frame(), "
                                             "to_dict(per_item=True) for the rest")

    def to_dict(self, per_item: bool = False) -> dict:
        d = {"headset": self.name, "test": self.test, "T_S": self.t_s, "ci95": list(self.ci),
             "ci95_method": self.ci_method, "controls": self.controls, "ablation": self.ablation}
        if self.reference is not None:
            d["ablation_reference"] = self.reference
        if self.ci_bootstrap is not None:
            d["ci95_bootstrap"] = list(self.ci_bootstrap)
            d["bootstrap_seed"] = self.bootstrap_seed
        if self.ci_bca is not None:
            d["ci95_bca"] = list(self.ci_bca)
        if per_item and self.outcomes is not None:
            d["per_item"] = {
                "item_ids": self.outcomes.item_ids,
                "values": {hid: self.outcomes.values[j].tolist() for j, hid in enumerate(self.headset_ids)},
            }
            if "drop_matched" in self.outcomes.detail:
                d["per_item"]["arms"] = {
                    arm: {hid: self.outcomes.detail[f"drop_{arm}"][j].tolist() for j, hid in enumerate(self.headset_ids)}
                    for arm in ("matched", "mismatched")}
        return d


def headset_interval(out: Outcomes, j: int = 0, seed: int = 0):
    """The 95% interval of head-set ``j``'s statistic: NCS (a difference of two independent
    arm means) gets a Welch interval and a percentile bootstrap resampling both arms (from
    ``seed``), and, with fewer than :data:`MIN_BOOTSTRAP_N` items in an arm (where the
    percentile bootstrap may undercover), the BCa interval beside it; every other test a
    t-interval over its per-item values. Returns (method, interval, bootstrap or None, BCa or None)."""
    if "drop_matched" in out.detail:
        m, mm = out.detail["drop_matched"][j], out.detail["drop_mismatched"][j]
        w, b = welch_interval(m, mm), bootstrap_diff_ci(m, mm, seed=seed)
        bca = bca_diff_ci(m, mm, seed=seed) if min(len(m), len(mm)) < MIN_BOOTSTRAP_N else None
        return "welch", (w.low, w.high), (b.low, b.high), None if bca is None else (bca.low, bca.high)
    ci = t_interval(out.values[j])
    return "t", (ci.low, ci.high), None, None


def _summary(name: str, test_id: str, out: Outcomes, ids: list[str], requests, meta: dict, bseed: int, ablation: str,
             recorded, S: HeadSet | None = None, controls_h: int = 0) -> HeadsetResult:
    """Head-set 0's statistic T_S with its interval, and per control family the mean, SD, z and
    rank p over the distinct head-sets compared (``ids[j]``: ``S`` or ``<label>#<i>``); with
    ``controls_h`` ≥ 1 an exchangeable control's rank p is the sequential one in draw order."""
    T = out.means()
    method, ci, boot, bca = headset_interval(out, 0, bseed)
    res = HeadsetResult(name, test_id, float(T[0]), ci, outcomes=out, headset_ids=ids, ci_method=method, ci_bootstrap=boot,
                        ci_bca=bca, bootstrap_seed=bseed if boot is not None else None, ablation=ablation, reference=recorded)
    for req in requests:
        idx = [j for j, h in enumerate(ids) if h.startswith(req.label + "#")]
        # rank p, mean, SD and z over the distinct head-sets compared (draw_controls repeats none)
        td = T[idx]
        seq = bool(controls_h) and is_exchangeable(req.label, S)
        rp = control_rank_p(T[0], td, controls_h, len(td)) if seq else rank_p(T[0], td)
        z = z_score(T[0], td) if len(td) > 1 else None
        res.controls[req.label] = {**meta[req.label], "distinct": len(td), "mean": float(td.mean()),
                                  "sd": float(td.std(ddof=1)) if len(td) > 1 else float("nan"),
                                  "z": None if z is None else float(z.z), "rank_p": float(rp.p)}
        if seq:
            res.controls[req.label]["sequential"] = rp.to_dict()
    return res


def run_test(engine, test: str, sets: dict, headsets: list[HeadSet], beta: float, rows: str, seed: int, batch_size: int,
             progress: bool = False, cache: dict | None = None, memo: ProbeMemo | None = None, ablation: str = "attention",
             reference: dict | None = None, grounding_rule: GroundingRule | None = None) -> Outcomes:
    """Run ``test`` on ``sets`` (``{kind: items}``, kinds as in :data:`TEST_SETS`); ``memo``:
    rows already run (:class:`vheads.evaluation.ProbeMemo`). ``ablation``: what hiding S
    means (:data:`ABLATIONS`; NCS and the text arm take every one, CERS and NCS_grid only
    ``attention``); ``reference``: the ``mean`` ablation's ``{kind: items}``
    (:func:`reference_sets`). ``grounding``: its keys are ``grounding_rule`` (default
    :class:`GroundingRule`), and ``cache`` keeps its one capture per item, so the next
    head-sets on the same items run no forward."""
    entry = TEST_REGISTRY.get(test)
    abl = check_ablation(ablation, [test])
    run = entry.run
    if isinstance(run, str):  # "module:function", imported on first use (the registry is torch-free)
        mod, _, fn = run.partition(":")
        run = getattr(importlib.import_module(mod), fn)
    if run is None:
        raise VheadsError(f"test {test!r} is registered without a run function")
    return run(engine, test, sets, headsets, beta=beta, rows=rows, seed=seed, batch_size=batch_size, progress=progress,
               cache=cache, memo=memo, ablation=abl, reference=reference, grounding_rule=grounding_rule)


# ---- the built-in tests' run functions (EvaluationTest.run): (engine, test, sets, head-sets, **request) ----

def _head_output(kw: dict) -> dict:
    """The ablation arguments of a head-output ablation (none for the attention mask)."""
    a = kw["ablation"]
    return {"ablation": a.name, "reference": kw["reference"], "seed": kw["seed"]} if a.head_output else {}


def run_cers(engine, test, sets, headsets, **kw) -> Outcomes:
    return cers(engine, sets["grid-neutral"], headsets, kw["beta"], kw["rows"], symmetric=test == "cers-sym", seed=kw["seed"],
                batch_size=kw["batch_size"], progress=kw["progress"], memo=kw["memo"])


def run_ncs(engine, test, sets, headsets, **kw) -> Outcomes:
    return ncs(engine, sets["class-matched"], sets["class-mismatched"], headsets, rows=kw["rows"], batch_size=kw["batch_size"],
               progress=kw["progress"], cache=kw["cache"], memo=kw["memo"], **_head_output(kw))


def run_ncs_grid(engine, test, sets, headsets, **kw) -> Outcomes:
    return ncs_grid(engine, sets["grid-oracle"], headsets, kw["rows"], seed=kw["seed"], batch_size=kw["batch_size"],
                    progress=kw["progress"], memo=kw["memo"])


def run_text(engine, test, sets, headsets, **kw) -> Outcomes:
    return text_arm(engine, sets["text"], headsets, batch_size=kw["batch_size"], progress=kw["progress"], memo=kw["memo"],
                    **_head_output(kw))


def run_grounding(engine, test, sets, headsets, **kw) -> Outcomes:
    rule, cache = kw["grounding_rule"] or GroundingRule(), kw["cache"]
    items = sets["grid-oracle"]
    key = ("grounding-maps", rule.rows, rule.aggregation, tuple(it.id for it in items))
    if cache is not None and key not in cache:
        cache[key] = capture_maps(engine, items, rule)
    return grounding(engine, items, headsets, rule, captured=None if cache is None else cache[key])


def evaluate_headsets(engine, headsets: dict[str, HeadSet], tests: list[str], controls: str = "layer-matched:100,any-layer:100",
                      n: int = 24, beta: float = 1e4, rows: str = "all", seed: int = 0, batch_size: int = 128,
                      progress: bool = True, steer_rows: str = "all", source=None, templates=None, ablation: str = "attention",
                      reference_n: int | None = None, grounding_rule: GroundingRule | None = None,
                      grounding_items: list | None = None, controls_h: int = 0) -> list[HeadsetResult]:
    """Test each named head-set with each test against the requested controls.

    ``ablation`` (DESIGN.md "Ablation types"; :mod:`vheads.evaluation._ablation`): what
    hiding S means in NCS and the text arm (CERS and NCS_grid take ``attention`` only);
    ``mean`` replaces S's outputs by their mean over ``reference_n`` (default ``n``)
    reference items of each kind, generated from their own seed and recorded in the results.

    ``rows``: where masks act (NCS, NCS_grid); ``steer_rows``: where CERS steers (default
    ``all``, the common practice of public steering code). ``source``: a
    :class:`vheads.data.builders.RealItems` to test on real photos (default: the synthetic
    items). ``templates``: the questions (default: the model's, :func:`vheads.data.default_templates`).

    ``grounding`` (:mod:`vheads.evaluation._grounding`, keys ``grounding_rule``) runs on the
    synthetic ``grid-oracle`` items (the referred cell's box), or on ``grounding_items`` (a
    real corpus's referring items, :mod:`vheads.data.refcoco`); one capture per item serves
    every head-set and control. It gives three results, each against the same controls:
    ``grounding`` (T = pointing accuracy), ``grounding-iou`` (mean IoU of the box rule's box)
    and ``grounding-acc50`` (Acc@0.5).
    ``controls_h = h ≥ 1``: the rank p against an exchangeable control is Besag and Clifford's
    sequential p over its draws in draw order, R_max = its draws
    (:func:`vheads.evaluation.control_rank_p`; every draw still runs, those past the stop
    enter mean, SD and z only); its record ``sequential`` says where it stopped. 0: the
    fixed-R rank p.

    All arguments are checked before any forward pass: unknown tests, a bad control spec
    (unknown name, R = 0), a non-finite β, a head-set of another model shape.
    """
    from vheads.data import default_templates

    requests = check_request(tests, controls, beta, rows, steer_rows=steer_rows, ablation=ablation, reference_n=reference_n)
    if "grounding" in tests and grounding_rule is not None and grounding_rule.rows == "out":
        raise VheadsError("grounding rows 'out' need the model's answers: evaluate grounds from rows 'last' or 'qspan' "
                          "(vheads.evaluation.capture_maps takes answers for 'out')")
    templates = templates or default_templates(engine.lm.model_id)
    L, H = engine.shape
    for name, S in headsets.items():
        if (S.n_layers, S.n_heads) != (L, H):
            raise ValueError(f"head-set {name!r} is for a {S.n_layers}x{S.n_heads} model; this model is {L}x{H}")
    # the model's own heads: a head in a linear-attention layer is refused here, and the
    # controls are drawn among the softmax layers' heads only
    headsets = {name: HeadSet(S.heads, L, H, engine.lm.attention_layers) for name, S in headsets.items()}
    inputs: dict = {}
    if any(get_control(req.name).needs for req in requests):
        # attention-matched / sinks / text-heavy: baseline attention per head on the CERS grids
        inputs = head_attention_mass(engine, item_sets(["grid-neutral"], n, lambda kind: seed, templates=templates)["grid-neutral"])
    results: list[HeadsetResult] = []
    memo = ProbeMemo()  # head-sets tested together share many control draws
    all_sets = {test: item_sets(TEST_SETS[test], n, lambda kind: seed, source, templates)
                if test != "grounding" or grounding_items is None else {"grid-oracle": list(grounding_items)}
                for test in tests}  # every image opened first
    grounding_cache: dict = {}  # the grounding test's one capture per item, shared by every head-set
    reference, recorded = None, None
    replacement = check_ablation(ablation).replacement
    if replacement == "mean":
        reference = reference_sets([k for t in tests for k in TEST_SETS[t]], reference_n or n, seed, source, templates)
        recorded = {"items": {k: [it.id for it in v] for k, v in reference.items()}, "seed": seed, "n": reference_n or n}
    elif replacement == "donor":
        recorded = {"pairing_seed": seed}
    for test in tests:
        sets = all_sets[test]
        for name, S in headsets.items():
            ids, hs, meta = ["S"], [S], {}
            for req in requests:
                cseed = derived_seed(seed, "control", name, req.label)
                draws = draw_controls(req.name, S, req.R, cseed, **({"n": req.n} if req.n else {}), **inputs)
                meta[req.label] = {"R": req.R, "seed": cseed, "mode": draws.mode, "pool": draws.pool,
                                   "fallbacks": [str(f) for f in draws.fallbacks]}
                for i, d in enumerate(draws):
                    ids.append(headset_id(req.label, i))
                    hs.append(d)
            out = run_test(engine, test, sets, hs, beta, steer_rows if test.startswith("cers") else rows, seed, batch_size,
                           progress, memo=memo, ablation=ablation, reference=reference,
                           cache=grounding_cache if test == "grounding" else None, grounding_rule=grounding_rule)
            if test == "grounding":  # three measures of the same maps, each against the same controls
                named = [("grounding", out), *((f"grounding-{m}", Outcomes("grounding", out.detail[m], out.item_ids, {}))
                                                 for m in ("iou", "acc50"))]
            else:
                named = [(test if test != "ncs" else f"ncs-{rows}", out)]
            for test_id, o in named:
                bseed = derived_seed(seed, "bootstrap", name, test_id if test == "grounding" else test)  # each resamples on its own
                results.append(_summary(name, test_id, o, ids, requests, meta, bseed, ablation, recorded, S, controls_h))
    # Holm over the family of head-sets tested together, per test and control (one ablation per call),
    # and each one's verdict: yes / no / cannot tell (its floor, given every member's n, above 0.05)
    for test in {r.test for r in results}:
        fam = [r for r in results if r.test == test]
        for req in requests:
            add_verdicts([r.controls[req.label] for r in fam], f"{len(fam)} head-set(s) tested together: "
                         f"{', '.join(r.name for r in fam)} ({test}, {req.label})")
            for r in fam:  # a control not exchangeable with S describes; its p decides nothing
                if not is_exchangeable(req.label, headsets[r.name]):
                    r.controls[req.label]["verdict"] = "descriptive"
                    r.controls[req.label].pop("n_needed", None)
    return results


def add_verdicts(entries: list[dict], family: str, alpha: float = 0.05) -> None:
    """Holm over ``entries`` (control entries of one test and control type, each with
    ``rank_p`` and ``distinct``): adds ``holm_p``, ``holm_floor`` (the smallest adjusted p the
    member's n and the others' allow, :func:`holm_floors`), ``verdict`` (:func:`verdict`:
    yes, no, or cannot tell where the floor is above ``alpha``), ``family`` (what was adjusted
    over, its size m) and, where it cannot tell, ``n_needed`` (:func:`member_required_n`)."""
    ns = [e["distinct"] for e in entries]
    adj = holm([e["rank_p"] for e in entries], alpha=alpha)
    floors = holm_floors(ns)
    for i, (e, p, floor) in enumerate(zip(entries, adj.p_adjusted, floors)):
        e["holm_p"], e["holm_floor"] = float(p), float(floor)
        e["verdict"] = verdict(float(p), float(floor), alpha)
        e["family"] = {"m": len(entries), "members": family}
        if e["verdict"] == "cannot tell":
            e["n_needed"] = member_required_n(ns, i, alpha)
