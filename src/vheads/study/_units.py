"""Work units of a study and the code that computes one.

A unit is a plain, JSON-serialisable dict (``unit_id``, ``kind`` and its parameters), so
the same unit runs in-process or on a Ray actor; :class:`UnitComputer` holds one model
replica and turns a unit into store rows. Items are rebuilt from (kind, n, seed) by the
computer: generation is deterministic, so nothing large travels.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from vheads._ids import beta_test_id, is_k_sweep
from vheads._seeds import derived_seed
from vheads.evaluation import METRICS, TEST_SETS, HeadSet, Outcomes, ProbeMemo, audit_sets, item_sets, run_test
from vheads.study._ablation import ablation_rows
from vheads.study._config import StudyConfig
from vheads.study._data import eval_seed
from vheads.study._scores import compute_score_unit

ALL_HEADS = "all-heads"  # head-set id of every head (the maximum attainable NCS_grid)
K_SWEEP_TESTS = ("cers", "ncs")  # tests the k sweep's head-sets run in
STRIP_FIGURE_ITEMS = 3  # strips per setting whose top heads' attention is stored for figures
STRIP_FIGURE_HEADS = 4


class UnitComputer:
    """Computes units on one model replica (built lazily, so it can live on a Ray actor)."""

    def __init__(self, cfg: dict[str, Any]):
        from vheads.study._config import config_from_dict

        from vheads.study._data import eval_source

        self.cfg: StudyConfig = config_from_dict({k: v for k, v in cfg.items()})
        self.source = eval_source(self.cfg)  # None: synthetic items
        self.templates = self.cfg.question_templates
        self._ood: dict[str, dict] = {}  # pointing-suite items by task spec, built once per replica
        self._engine = None
        self.memo = None  # rows already run on this replica (vheads.evaluation.ProbeMemo), made with the engine

    @property
    def engine(self):
        if self._engine is None:
            import torch

            from vheads.engine import Batching, Engine
            from vheads.models import load_model

            # on every device (a GPU replica still runs its image processing and host-side
            # work on the CPU); the same thread count on every backend gives the same float
            # reductions on CPU (per-item results then differ only where a replica's probe
            # memo served a row from another batch: ≤ 1e-5). A Ray replica gets its cores here.
            torch.set_num_threads(self.cfg.run.torch_threads or os.cpu_count() or 1)
            cfg = self.cfg
            lm = load_model(cfg.model, cfg.revision or None, cfg.dtype, cfg.device, device_map=cfg.device_map or None,
                            quantization=cfg.quantization or None, trust_remote_code=cfg.trust_remote_code,
                            system_prompt=cfg.system_prompt or None, chat_template=cfg.chat_template or None)
            run = self.cfg.run
            self._engine = Engine(lm, Batching(cross_item=run.cross_item, max_rows=run.batch_size, token_budget=run.token_budget))
            # every setting's tests run the same items, and their controls share many head-sets
            # (VHEADS_PROBE_MEMO=0: run every row)
            self.memo = ProbeMemo() if os.environ.get("VHEADS_PROBE_MEMO", "1") != "0" else None
        return self._engine

    def compute(self, unit: dict[str, Any]) -> dict[str, Any]:
        from vheads.evaluation import ROWS_RUN

        t0, before = time.time(), dict(ROWS_RUN)
        fn = {"discovery": self._discovery, "eval": self._eval, "audit": self._audit, "image-mass": self._image_mass,
              "ood-audit": self._ood_audit, "ood-eval": self._ood_eval, "doctor": self._doctor,
              "scores": lambda u: compute_score_unit(self, u), "causal-map": self._causal_map}[unit["kind"]]
        rows = fn(unit)
        return {"unit_id": unit["unit_id"], "kind": unit["kind"], "rows": rows, "seconds": time.time() - t0,
                "forward_rows": {k: ROWS_RUN[k] - before[k] for k in ROWS_RUN}}

    # ---- discovery -------------------------------------------------------------------------
    def _discovery(self, unit):
        import torch

        from vheads.discovery import load_corpus, resolve_k, score_settings, select_heads
        from vheads.engine import positions_mask

        cfg, eng = self.cfg, self.engine
        lm = eng.lm
        corpus = load_corpus(unit["corpus"], unit["query"], cfg.n_discovery, derived_seed(cfg.seed, "discovery", unit["corpus"], unit["query"]),
                             templates=self.templates)
        scores = score_settings(lm, {(corpus.name, corpus.query): corpus.items}, cfg.sources,
                                corpus_abbrev={corpus.name: corpus.abbrev}, progress=False, engine=eng)
        k = resolve_k(len(lm.attention_layers), lm.n_heads, cfg.k or None, cfg.selection)
        rows: dict[str, list[tuple]] = {"discovery": [], "item_scores": [], "strip_attention": []}
        strips = {}
        for sid, sc in scores.items():
            S = select_heads(sc.scores, k, cfg.selection, lm.attention_layers)
            rows["discovery"].append((sid, sc.setting.query, sc.setting.source, corpus.name, sc.n_items, k,
                                      _json(sc.scores.tolist()), _json([list(h) for h in S.heads])))
            rows["item_scores"] += [(sid, iid, _json(m.tolist())) for iid, m in zip(sc.item_ids, sc.per_item)]
            # attention of the setting's top heads over the six panels of a few strips
            top = sorted(S.heads, key=lambda h: -sc.scores[h])[:STRIP_FIGURE_HEADS]
            span = {"last": "last", "qspan": "query", "out": "answer"}[sc.setting.source]
            requests, shown = [], []
            for item, answer in list(zip(corpus.items, sc.answers))[:STRIP_FIGURE_ITEMS]:
                pr = lm.adapter.build(item, lm.processor, answer_text=answer or None) if sc.setting.source == "out" else lm.adapter.build(item, lm.processor)
                if sc.setting.source == "out" and not answer:
                    continue
                T = pr.layout.n_tokens
                groups = torch.stack([positions_mask(T, pr.layout.regions[n].positions) for n in sorted(item.regions)])  # [panels, T]
                requests.append((pr, {"capture": positions_mask(T, pr.layout.spans[span])}, groups))
                shown.append(item)
            for item, res in zip(shown, eng.capture_many(requests)):
                m = res["capture"].numpy()  # [L, H, panels]
                for (l, h) in top:
                    rows["strip_attention"].append((sid, item.id, l, h, _json(m[l, h].tolist())))
                strips[item.id] = item
        return {"rows": rows, "strips": {k: _png(v.image) for k, v in strips.items()},
                "strip_meta": {k: {"question": v.question, "target": v.target, "answer": v.answer} for k, v in strips.items()}}

    # ---- evaluation ------------------------------------------------------------------------
    def _eval(self, unit):
        cfg, eng = self.cfg, self.engine
        L, H = eng.shape
        ids = unit["headset_ids"]
        layers = eng.lm.attention_layers  # a hybrid model's softmax layers (all layers otherwise)
        hsets = [HeadSet([tuple(h) for h in heads], L, H, layers) for heads in unit["headsets"]]
        lo, hi = unit["shard"]
        test = unit["test"]
        if test not in TEST_SETS and test != "beta-sweep":
            raise ValueError(f"unknown test {test!r}")
        sets = {k: v[lo:hi] for k, v in item_sets(TEST_SETS["cers" if test == "beta-sweep" else test], cfg.n_eval, eval_seed(cfg.seed), self.source, self.templates).items()}
        bs = cfg.run.batch_size
        out: dict[str, list[tuple]] = {"outcomes": [], "arms": []}
        uid, setting = unit["unit_id"], unit["setting"]

        def put(test_id, res, which):
            """Rows of ``res`` (one per entry of ``which``, indices into ``ids``), each with its
            value under every metric (p4, logprob, logit-diff: the store's metric columns)."""
            vals = [res.under(m).values for m in METRICS]
            for jj, j in enumerate(which):
                for i, iid in enumerate(res.item_ids):
                    out["outcomes"].append((uid, setting, test_id, ids[j], iid, *(float(v[jj, i]) for v in vals)))

        if test == "beta-sweep":
            return self._beta_sweep(sets, ids, hsets, put, out)
        if test == "ncs-grid" and "S" in ids:
            # the maximum attainable NCS_grid of the item set: every head hidden from the cell
            ids, hsets = [*ids, ALL_HEADS], [*hsets, HeadSet([(l, h) for l in layers for h in range(H)], L, H, layers)]
        # the k sweep's sets (S@k=K and its layer-matched@k=K controls) run in CERS and NCS
        # at all rows only (seed Tables 14 and 18)
        every = [j for j, h in enumerate(ids) if not is_k_sweep(h) or test in unit.get("k_sweep_tests", K_SWEEP_TESTS)]
        if test == "grounding":  # one capture per shard serves every setting (vheads.study._grounding)
            from vheads.study._grounding import grounding_rows

            return grounding_rows(self, unit, sets, ids, [hsets[j] for j in every], every, out)
        if test == "ncs":
            cache: dict = {}  # prompts and unmasked baselines, shared by the row groups
            groups = unit["cells"]["row_groups"] if "cells" in unit else unit.get("row_groups") or cfg.row_groups
            for g in groups:
                # per-row-group NCS (beyond the default all-row mask) runs S against the
                # row_group_controls only: it locates the effect, Table 3 tests it
                keep = every if g == "all" else [
                    j for j, h in enumerate(ids) if h == "S" or h.split("#")[0] in cfg.row_group_controls]
                if not keep:  # a later round of controls (vheads.study._sequential) this row group does not run
                    continue
                res = run_test(eng, "ncs", sets, [hsets[j] for j in keep], cfg.beta, g, cfg.seed, bs, cache=cache, memo=self.memo)
                put(f"ncs-{g}", res, keep)
                for jj, j in enumerate(keep):
                    for arm, key in (("matched", "drop_matched"), ("mismatched", "drop_mismatched")):
                        drops = [res.under(m).detail[key] for m in METRICS]
                        for i, it in enumerate(sets[f"class-{arm}"]):
                            out["arms"].append((uid, setting, f"ncs-{g}", ids[j], it.id, arm, *(float(d[jj, i]) for d in drops)))
            if "&" not in setting:  # the head-output ablations (vheads.study._ablation)
                ablation_rows(self, unit, sets, ids, hsets, cache, out)
            return {"rows": out}
        beta = unit.get("beta", cfg.beta)  # the headline β (vheads.study._headline)
        res = run_test(eng, test, sets, [hsets[j] for j in every], beta, cfg.steer_rows if test.startswith("cers") else "all",
                       cfg.seed, bs, memo=self.memo)
        put(test, res, every)
        for other in ("cers", "cers-sym"):  # CERS and symmetric CERS come from the same forwards
            if other in res.detail and other not in cfg.tests:
                put(other, Outcomes(other, res.detail[other], res.item_ids, {},
                                    {m: Outcomes(other, o.detail[other], o.item_ids, {}) for m, o in res.metrics.items()}), every)
        return {"rows": out}

    def _beta_sweep(self, sets, ids, hsets, put, out):
        """CERS at every β of the sweep (``cers@beta=B``) of one setting's S and its first
        ``beta_sweep_controls`` layer-matched draws, before any other evaluation: the
        headline β is chosen from these controls (:mod:`vheads.study._headline`)."""
        cfg = self.cfg
        for b in cfg.beta_sweep:
            put(beta_test_id(b), run_test(self.engine, "cers", sets, hsets, b, cfg.steer_rows, cfg.seed, cfg.run.batch_size,
                                             memo=self.memo), range(len(ids)))
        return {"rows": out}

    # ---- causal map -------------------------------------------------------------------------
    def _causal_map(self, unit):
        """One shard of the exact causal map (:mod:`vheads.study._causal`): every head alone and
        every whole layer, per item, both NCS arms; its AtP estimate on the same items; and, with
        ``causal_subsets``, the regression map over a random design (per-item coefficients)."""
        from vheads.causal import atp_causal_maps, causal_item_sets, draw_design, exact_causal_map, regression_causal_maps
        from vheads.evaluation import HEAD_OUTPUT_TESTS
        from vheads.study._causal import causal_seed

        cfg = self.cfg
        lo, hi = unit["shard"]
        sets = {k: v[lo:hi] for k, v in causal_item_sets(cfg.causal_tests, cfg.n_eval, causal_seed(cfg.seed), self.source,
                                                         self.templates).items()}
        rows = []
        for ablation in cfg.ablation:  # every ablation the run uses, where a one-head map is defined (no mean: no reference set)
            tests = cfg.causal_tests if ablation == "attention" else [t for t in cfg.causal_tests if t in HEAD_OUTPUT_TESTS]
            if ablation == "mean" or not tests:
                continue
            maps = exact_causal_map(self.engine, sets, tests, ablation=ablation, seed=cfg.seed, batch_size=cfg.run.batch_size,
                                    memo=self.memo)
            # the AtP estimate of the same map on the same items (attention: AtP*, zero: AtP; heads only, p4)
            maps |= atp_causal_maps(self.engine, sets, tests, ablation, batch_size=min(8, cfg.run.batch_size),
                                    token_budget=min(1 << 15, cfg.run.token_budget))
            if cfg.causal_subsets:  # head attribution: one design for every shard, so each item's coefficients are its own
                L, H = self.engine.shape
                design = draw_design(L, H, cfg.causal_subsets, seed=cfg.seed, attention_layers=self.engine.lm.attention_layers)
                maps |= regression_causal_maps(self.engine, sets, tests, design, ablation=ablation, seed=cfg.seed,
                                               batch_size=cfg.run.batch_size, memo=self.memo)
            rows += [r for m in maps.values() for r in m.store_rows(unit["unit_id"])]
        return {"rows": {"causal_map": rows}}

    # ---- baseline attention per head --------------------------------------------------------
    def _image_mass(self, unit):
        """Per-head baseline attention from the last prompt row on the CERS grids (see
        :func:`vheads.evaluation.head_attention_mass`)."""
        from vheads.evaluation import head_attention_mass

        items = item_sets(["grid-neutral"], self.cfg.n_eval, eval_seed(self.cfg.seed), self.source, self.templates)["grid-neutral"]
        mass = head_attention_mass(self.engine, items)
        return {"rows": {"meta": [(key, _json(v.tolist())) for key, v in mass.items()]}}

    # ---- audit -----------------------------------------------------------------------------
    def _audit(self, unit):
        from vheads.evaluation import baseline_audit

        sets = audit_sets(self.cfg.n_eval, eval_seed(self.cfg.seed), self.source, self.templates)
        rep = baseline_audit(self.engine, sets)
        return {"rows": {"audit": [(n, r["n"], r["mean_p_key"], r["expected"][0], r["expected"][1], int(r["ok"])) for n, r in rep.items()]}}


    # ---- doctor -----------------------------------------------------------------------------
    def _doctor(self, unit):
        """The doctor's fast checks on this replica's model (:func:`vheads.doctor.fast_checks`);
        the driver refuses to start the study when an invariant fails."""
        from vheads.doctor import fast_checks

        rep = fast_checks(self.engine.lm, self.engine, self.templates, self.cfg.seed).to_dict()
        return {"rows": {"meta": [("doctor", _json(rep))]}, "doctor": rep}

    # ---- pointing suite ----------------------------------------------------------------------
    def _ood_sets(self, spec):
        from vheads.study._data import ood_sets

        if spec not in self._ood:
            self._ood[spec] = ood_sets(self.cfg, spec)
        return self._ood[spec]

    def _ood_audit(self, unit):
        """The baseline audit of one task (seed Table 22): oracle, floor, matched, mismatched, leak."""
        from vheads.evaluation import baseline_audit

        sets = self._ood_sets(unit["spec"])
        rep = baseline_audit(self.engine, {k: sets[k] for k in ("oracle", "floor", "matched", "mismatched")})
        rows = [(unit["task"], n, r["n"], r["mean_p_key"], r["expected"][0], r["expected"][1], int(r["ok"])) for n, r in rep.items()]
        return {"rows": {"ood_audit": rows}}

    def _ood_eval(self, unit):
        """CERS (steer S onto the keyed cell vs a distractor) and NCS (all image tokens hidden
        at all rows, matched minus mismatched) of S and its controls on one task's shard."""
        eng = self.engine
        L, H = eng.shape
        ids = unit["headset_ids"]
        hsets = [HeadSet([tuple(h) for h in heads], L, H) for heads in unit["headsets"]]
        lo, hi = unit["shard"]
        sets = {k: v[lo:hi] for k, v in self._ood_sets(unit["spec"]).items()}
        key = (unit["unit_id"], unit["task"], unit["setting"])
        rows = []
        if unit["test"] == "cers":
            res = run_test(eng, "cers", {"grid-neutral": sets["cers"]}, hsets, unit.get("beta", self.cfg.beta), "all", self.cfg.seed, self.cfg.run.batch_size,
                           memo=self.memo)
            detail = {"cers": [res.under(m).values for m in METRICS]}
        else:
            res = run_test(eng, "ncs", {"class-matched": sets["matched"], "class-mismatched": sets["mismatched"]}, hsets,
                           self.cfg.beta, "all", self.cfg.seed, self.cfg.run.batch_size, memo=self.memo)
            detail = {f"ncs-{arm}": [res.under(m).detail[f"drop_{arm}"] for m in METRICS] for arm in ("matched", "mismatched")}
        for test, values in detail.items():  # each value under every metric (the store's metric columns)
            items = sets["cers"] if test == "cers" else sets[test.split("-")[1]]
            for j, hid in enumerate(ids):
                rows += [(*key, test, hid, it.id, *(float(v[j, i]) for v in values)) for i, it in enumerate(items)]
        return {"rows": {"ood_outcomes": rows}}


def _json(x) -> str:
    import json

    return json.dumps(x)


def _png(img) -> bytes:
    import io

    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
