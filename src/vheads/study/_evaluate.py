"""``vheads evaluate`` as one library call: :func:`evaluate_heads` checks every argument and
head-set file, loads the model, chooses β by the asked rule, tests the head-sets against their
random controls and returns what the command prints (:class:`HeadsEvaluation`: its
:meth:`~HeadsEvaluation.document` for ``--json`` and ``--out``, its :meth:`~HeadsEvaluation.text`).

It sits in the study package because it joins discovery (head-set files) and evaluation (the
tests) with the study's β rule; the discovery and evaluation packages stay apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

#: why ``vheads evaluate`` steers at a fixed β unless asked for the study's rule (said under its table)
BETA_FIXED_WHY = ("fixed (--beta-rule fixed, the default: the seed study's beta; `vheads study` chooses beta by its "
                  "controls rule, which first sweeps beta over random heads: pass --beta-rule controls to apply it here)")


@dataclass
class HeadsEvaluation:
    """One ``vheads evaluate`` run: the model's id and fingerprint, the head-sets tested (by name),
    a :class:`~vheads.evaluation.HeadsetResult` per head-set and test, the run's record (model,
    β and its rule, n, seed, the controls, rows, source), whether a CERS test ran, the
    ablation and the ``--out`` file written (or None)."""

    model_id: str
    fingerprint: str
    headsets: dict
    results: list
    run: dict
    steering: bool
    ablation: str = "attention"
    out: Path | None = None

    def document(self) -> list[dict]:
        """The ``--json`` document: per result its per-item outcomes, its heads and the run's record."""
        return [{**r.to_dict(per_item=True), "heads": [list(h) for h in self.headsets[r.name].heads], **self.run}
                for r in self.results]

    def json(self) -> str:
        """:meth:`document` as the JSON ``--json`` prints and ``--out`` holds (NaN as null)."""
        from vheads._io import json_safe

        return json.dumps(json_safe(self.document()), indent=1, allow_nan=False)

    def text(self) -> str:
        """The table ``vheads evaluate`` prints: per head-set, test and control its T_S and CI, the
        controls' mean ± sd, z, rank p, Holm p and its floor, the verdict and the draws compared."""
        run = self.run
        beta, record = run["beta"], run["beta_rule"]
        lines = [f"model {self.model_id} ({self.fingerprint}); n = {run['n']} items per set, seed {run['seed']}"]
        if self.steering:
            why = BETA_FIXED_WHY if record["rule"] == "fixed" else (
                f"by the study's rule {record['rule']} (CERS RMS of random layer-matched heads by beta: "
                + ", ".join(f"{b}: {r:.3f}" for b, r in record["rms"].items())
                + ("" if record["met"] else "; no beta met the tolerance: the one of smallest RMS") + ")")
            lines.append(f"beta = {beta:g}: {why}")
        if self.ablation != "attention":
            lines.append(f"ablation: {self.ablation} (S's head outputs replaced at the row group, not its attention masked)")
        lines.append(f"{'head-set':<14} {'test':<10} {'T_S':>8} {'95% CI':>19}  control          mean ± sd        z     "
                     "rank p   Holm p  floor  verdict      draws")
        lines.append("(95% CI: t over items; NCS: Welch over its two arms, bootstrap below — see --json; mean ± sd and z "
                     "and rank p over the n distinct head-sets compared: the whole pool when it holds at most 2R, floor 1/(n+1); "
                     "Holm over the head-sets tested together, per test and control; floor: the smallest Holm p this n and the "
                     "family's allow; verdict: yes, no, or cannot tell where the floor is above 0.05)")
        for r in self.results:
            for i, (cname, c) in enumerate(r.controls.items()):
                lead = f"{r.name:<14} {r.test:<10} {r.t_s:8.4f} [{r.ci[0]:8.4f},{r.ci[1]:8.4f}]" if i == 0 else " " * 48
                z = "nan" if c["z"] is None else f"{c['z']:.2f}"
                lines.append(f"{lead}  {cname:<15} {c['mean']:7.4f} ± {c['sd']:.4f} {z:>6} {c['rank_p']:8.4f} "
                             f"{c['holm_p']:8.4f} {c['holm_floor']:6.4f}  {c['verdict']:<11}  n={c['distinct']} {_compared(c)}")
                if c["verdict"] == "cannot tell":
                    lines.append(f"{'':<50}cannot tell with these controls: Holm over {c['family']['m']} cannot fall below "
                                 f"{c['holm_floor']:.4f} with n={c['distinct']}; it needs n ≥ {c['n_needed']} distinct head-sets "
                                 + ("(the pool is the limit: a larger k or model)"
                                    if c.get("mode") == "exact" and c["pool"] < c["n_needed"] else f"(--controls {cname}:{c['n_needed']})"))
            if r.ci_bootstrap is not None:
                bca = (f"; fewer than 30 items per arm: may undercover, BCa [{r.ci_bca[0]:8.4f},{r.ci_bca[1]:8.4f}]"
                       if r.ci_bca is not None else "")
                lines.append(f"{'':<25} bootstrap [{r.ci_bootstrap[0]:8.4f},{r.ci_bootstrap[1]:8.4f}] "
                             f"(both arms resampled, 2000{bca})")
        if self.out is not None:
            lines.append(f"results: {self.out}")
        return "\n".join(lines)


def _compared(c: dict) -> str:
    """How the n control head-sets of one row were chosen, for its last column."""
    if c.get("mode") == "exact":
        return f"(the whole pool, R={c['R']} asked)"
    return f"(distinct of R={c['R']}" + (f", pool {c['pool']:,})" if c.get("pool") else ")")


def evaluate_heads(headset: list[str | Path] = (), heads: list[str] = (), test: list[str] = ("cers", "ncs"),
                   controls: str = "layer-matched:100,any-layer:100", n: int = 24, beta: float = 1e4,
                   beta_rule: str = "fixed", rows: str = "all", steer_rows: str = "all", seed: int = 0,
                   model: str | None = None, revision: str | None = None, device: str = "cpu", dtype: str = "auto",
                   device_map: str | None = None, quantize: str | None = None, trust_remote_code: bool = False,
                   force: bool = False, batch_size: int = 128, out: str | Path | None = None, source: str | None = None,
                   cell: int = 224, system_prompt: str | None = None, chat_template: str | Path | None = None,
                   ablation: str = "attention", reference_n: int | None = None, grounding_rows: str = "last",
                   aggregation: str = "mean-norm", box_threshold: float = 0.5, connectivity: int = 8,
                   refer: str | None = None, controls_h: int = 0, quiet: bool = False,
                   progress: bool = True) -> HeadsEvaluation:
    """Test head-sets — ``headset`` files (from ``vheads discover``, or plain head lists) and
    ``heads`` lists (``"L1H0,L2H3"``, with ``model``) — by each of ``test`` against ``controls``.

    Every argument, head-set file, photo and benchmark row is checked before the model (or
    torch) loads. ``model`` defaults to the one the first head-set file names. β is ``beta``
    under ``beta_rule="fixed"``, else chosen by the study's rule (:func:`beta_by_rule`).
    ``out``: also write :meth:`HeadsEvaluation.document` there (a rerun overwrites it)."""
    from vheads._errors import VheadsError
    from vheads._options import check_load_flags
    from vheads.discovery import load_headset, model_to_load, parse_heads, read_head_list
    from vheads.evaluation import GroundingRule, check_request
    from vheads.study._headline import parse_beta_rule

    headset, heads, test = list(headset), list(heads), list(test)
    if not headset and not heads:
        raise VheadsError("name the heads to test: --headset FILE (from `vheads discover`, or a JSON list of [layer, head] "
                          "pairs) or --heads L1H0,L2H3 with --model")
    if controls_h < 0:
        raise VheadsError(f"--controls-h must be 0 (fixed R) or h >= 1, got {controls_h}")
    check_request(test, controls, beta, rows, n=n, batch_size=batch_size, steer_rows=steer_rows, seed=seed,
                  ablation=ablation, reference_n=reference_n)
    try:
        parse_beta_rule(beta_rule)
    except ValueError as e:
        raise VheadsError(f"--beta-rule: {e}") from None
    rule = GroundingRule(grounding_rows, aggregation, box_threshold, connectivity)
    lists = {(f"heads-{i + 1}" if len(heads) > 1 else "heads"): parse_heads(h) for i, h in enumerate(heads)}
    records = [load_headset(p) for p in headset if read_head_list(p) is None]
    referring = None
    if refer is not None:  # every row and image checked before the model loads
        from vheads.data.refcoco import open_referring

        if "grounding" not in test:
            raise VheadsError("--refer gives referring items, which only the grounding test reads; add --test grounding")
        referring = open_referring(refer, n, seed)
    if out is not None:
        from vheads._errors import check_output_file

        out = check_output_file(out, "--out")  # a rerun overwrites it
    check_load_flags(device, device_map, quantize)
    real = None
    if source is not None:  # every photo or benchmark row read (and checked) before the model loads
        from vheads.data.ood import open_item_source
        from vheads.evaluation import TEST_SETS, item_sets

        real = open_item_source(source, cell)
        item_sets([k for t in test for k in TEST_SETS[t]], n, lambda kind: seed, real)
    if model is None:
        if not records:
            raise VheadsError("--heads and plain head lists need --model: the model the heads belong to ('tiny', a folder or a hub id)")
        model, recorded_revision = model_to_load(records[0])
        revision = revision or recorded_revision
    from vheads._quiet import quiet_libraries
    from vheads.discovery import load_headset_files
    from vheads.engine import Engine
    from vheads.evaluation import evaluate_headsets
    from vheads.models import load_model
    from vheads.study._headline import beta_by_rule

    with quiet_libraries(quiet):
        lm = load_model(model, revision=revision, dtype=dtype, device=device, device_map=device_map, quantization=quantize,
                        trust_remote_code=trust_remote_code, system_prompt=system_prompt, chat_template=chat_template)
        hs = load_headset_files(headset, lm, force, heads=lists)
        engine = Engine(lm)
        steering = any(t.startswith("cers") for t in test)
        beta, beta_record = (beta_by_rule(engine, hs, beta_rule, beta, n, seed, steer_rows=steer_rows, source=real,
                                          batch_size=batch_size, progress=progress)
                             if steering else (beta, {"rule": "unused (no CERS test)", "beta": beta}))
        results = evaluate_headsets(engine, hs, test, controls, n, beta, rows, seed, batch_size, progress, steer_rows, real,
                                    ablation=ablation, reference_n=reference_n, grounding_rule=rule,
                                    grounding_items=referring, controls_h=controls_h)
    run = {"model": lm.record(), "beta": beta, "beta_rule": beta_record, "n": n, "seed": seed, "controls_spec": controls,
           "rows": rows, "steer_rows": steer_rows, "source": source}
    res = HeadsEvaluation(lm.model_id, lm.fingerprint, hs, results, run, steering, ablation, out)
    if out is not None:
        from vheads._io import atomic_write

        text = res.json()
        atomic_write(out, lambda fh: fh.write(text + "\n"))
    return res
