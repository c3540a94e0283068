"""``vheads causal-map`` as one library call: :func:`run_causal_map` checks the request, loads the
model, computes every asked method's map (and the backup scan), writes ``causal_map.json`` and
returns what the command prints (:class:`CausalMapRun`, its :meth:`~CausalMapRun.text`); the command adds
the figures (:func:`vheads.report.write_causal_figures`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vheads._errors import VheadsError, check_output_path, check_range, make_output_folder

METRIC_NAMES = ("p4", "logprob", "logit-diff")


@dataclass
class CausalMapRun:
    """One causal-map run: the model's record, the methods asked, every map (by key), the
    regression fits, the backup scans (by test), the agreement between methods, the top-k
    it used and the file written."""

    model: dict
    methods: list[str]
    maps: dict
    fits: dict
    scans: dict
    agreement: list[dict]
    k: int
    path: Path
    out: Path
    metric: str = "p4"
    files: list[Path] = field(default_factory=list)

    def to_dict(self, top: int = 10) -> dict:
        """The ``vheads.causal-maps/1`` document ``vheads causal-map --json`` prints."""
        return {"format": "vheads.causal-maps/1", "model": self.model, "metric": self.metric, "k": self.k,
                "maps": {key: x.to_dict() for key, x in self.maps.items() if x.method in self.methods},
                "regression": {key: f.to_dict(self.metric) for key, f in self.fits.items()},
                "backups": {scan.test: scan.pairs(self.metric, top=top) for scan in self.scans.values()},
                "agreement": self.agreement, "files": [str(self.path), *map(str, self.files)]}

    def text(self, top: int = 10) -> str:
        """What ``vheads causal-map`` prints: per map the ``top`` heads of largest effect (AtP by
        p4, its one metric; NaN left out), the agreement between methods, the backup pairs and
        the files written."""
        lines = []
        for key, x in self.maps.items():
            if x.method not in self.methods:
                continue
            metric = self.metric if x.method != "atp" else "p4"
            e = x.head_map(metric).ravel()
            order = [i for i in (-e).argsort(kind="stable") if e[i] == e[i]][:top]
            lines.append(f"{key}: top heads by effect ({metric}): "
                         + ", ".join(f"L{i // x.n_heads}H{i % x.n_heads} {e[i]:+.4f}" for i in order))
        for a in self.agreement:
            lines.append(f"{a['test']}{'' if a['ablation'] == 'attention' else '@' + a['ablation']}: {a['a']} vs {a['b']}: "
                         f"Spearman rho {a['spearman']:+.3f} (p {a['spearman_p']:.2g}), top-{a['k']} recall {a['top_k_recall']:.2f}")
        for scan in self.scans.values():
            for r in scan.pairs(self.metric, top=3):
                lines.append(f"{scan.test}: with L{r['hidden'][0]}H{r['hidden'][1]} hidden, L{r['head'][0]}H{r['head'][1]}'s "
                             f"effect {r['with_hidden']:+.4f} against {r['alone']:+.4f} alone (gain {r['gain']:+.4f})")
        lines.append(f"causal map: {self.path}")
        lines += [f"figure: {f}" for f in self.files]
        return "\n".join(lines)


def check_causal_map_request(tests, methods, n: int, rows: str, ablation: str, subsets: int, q, m, backups: int,
                             k: int | None, seed: int, batch_size: int, metric: str, top: int, out: Path) -> tuple[list[str], Path]:
    """Every check that needs no model, before any work: ``(methods, out)``."""
    from vheads.causal._map import check_causal_request
    from vheads.causal._methods import check_methods

    check_causal_request(tests, rows, n=n, batch_size=batch_size, seed=seed, ablation=ablation)
    methods = check_methods(methods)
    check_range("--top", top, 0, 1_000_000)
    check_range("--backups", backups, 0, 1_000_000)
    if k is not None:
        check_range("--k", k, 1, 1_000_000)
    if metric not in METRIC_NAMES:
        raise VheadsError(f"--metric {metric!r}: choose from {', '.join(METRIC_NAMES)}")
    if "regression" in methods:
        from vheads.causal._regression import check_design

        check_design(subsets, None, q, m)  # what needs no model; the number of heads is checked once it is loaded
    out = check_output_path(out)
    if out.exists() and not out.is_dir():
        raise VheadsError(f"--out {out} is a file, not a folder")
    return methods, out


def run_causal_map(model: str = "tiny", tests=("ncs", "ncs-grid", "text"), methods=("exact",), n: int = 16,
                   rows: str = "all", ablation: str = "attention", layers: bool = True, subsets: int = 256,
                   q: float | None = None, m: int | None = None, backups: int = 0, k: int | None = None, seed: int = 0,
                   batch_size: int = 128, out: str | Path = "causal_map", device: str = "cpu", dtype: str = "auto",
                   metric: str = "p4", top: int = 10, quiet: bool = False) -> CausalMapRun:
    """The causal map of every head by each of ``methods`` (exact, atp, regression), with the
    backup scan of the ``backups`` top heads, written to ``out/causal_map.json``."""
    from vheads._quiet import quiet_libraries
    from vheads.causal._backup import backup_heads
    from vheads.causal._map import causal_item_sets, save_causal_map
    from vheads.causal._methods import agreement, causal_maps_by_method
    from vheads.causal._regression import draw_design
    from vheads.data import default_templates
    from vheads.engine import Engine
    from vheads.evaluation import default_k
    from vheads.models import load_model

    tests = list(tests)
    methods, out = check_causal_map_request(tests, list(methods), n, rows, ablation, subsets, q, m, backups, k, seed,
                                            batch_size, metric, top, Path(out))
    sets = causal_item_sets(tests, n, lambda kind: seed, templates=default_templates(model))
    with quiet_libraries(quiet):
        lm = load_model(model, dtype=dtype, device=device)
        att = list(lm.attention_layers)
        # the design is drawn (and a bad one refused) before any forward
        design = draw_design(lm.n_layers, lm.n_heads, subsets, q, m, seed, att) if "regression" in methods else None
        k = k if k is not None else default_k(len(att), lm.n_heads)
        if k > len(att) * lm.n_heads:
            raise VheadsError(f"--k {k}: the model has {len(att) * lm.n_heads} heads")
        engine = Engine(lm)
        maps, fits = causal_maps_by_method(engine, sets, methods, tests, rows=rows, ablation=ablation, layers=layers, seed=seed,
                                           batch_size=batch_size, design=design, progress=not quiet)
        scans = {t: backup_heads(engine, sets, t, top=backups, rows=rows, ablation=ablation, metric=metric, seed=seed,
                                 batch_size=batch_size, progress=not quiet) for t in tests} if backups else {}
    out = make_output_folder(out)
    for scan in scans.values():
        maps |= scan.causal_maps()
    record = {"id": model, "n_layers": lm.n_layers, "n_heads": lm.n_heads}
    path = save_causal_map(maps, out / "causal_map.json", record)
    agree = agreement({key: x for key, x in maps.items() if x.method in methods}, k, metric)
    return CausalMapRun(record, methods, maps, fits, scans, agree, k, path, out, metric)
