"""The study's plan: the forward rows every stage will run, counted from the config alone.

One plan, read by ``vheads plan``, the doctor's time projection
(:func:`vheads.study.study_rows`, which `vheads doctor` hands to the doctor) and ``benchmarks/gpu_check.py``.
Each stage counts its own rows beside its units and their compute (:attr:`vheads.study._stage.Stage.rows`,
:mod:`vheads.study.stages`); :func:`study_plan` collects them. It counts *batch rows* — one head-set on one item in one forward — by stage:

- ``full`` rows compute the whole prompt (an intervention at all or image rows, steering,
  NCS_grid, capture); ``suffix`` rows only what follows a prefix shared by the rows of one
  item (system prompt and image: masks at the question or last rows, the text arm, which
  hides the text keys, and unmasked baselines), as the engine's prefix reuse runs them;
- rows the probe memo serves again are counted once: a k-sweep point at the main k (its
  S is S), the β sweep's rows at the main β, the unmasked baselines and NCS_grid's
  all-heads bound (every setting runs the same items), CERS and symmetric CERS (one forward);
- control head-sets per setting: the distinct head-sets compared (the whole pool where it
  holds at most ``EXACT_POOL_FACTOR`` · R, else R: :func:`compared_per_setting`) — an upper
  bound where two settings draw the same head-sets; ``shared_draws`` counts the union of the
  settings' draws instead (its expected size, :func:`expected_union`), as the doctor does
  for a model with small pools.

Without the model's weights: the model's shape and prompt lengths come from a
:class:`Layout` (a built-in name or a JSON file), the GPU and CPU rates from a rates file
(:func:`load_rates`). A rate is a function of the prompt's length: a least-squares line
through the measured points (through the origin while one point is measured), in ms per row.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vheads._errors import VheadsError
from vheads.study._rows import (  # noqa: F401 (re-exported: the layouts and the rows a stage counts)
    LAYOUTS, OUT_ROWS, RATES_FILE, ROWS_PER_ITEM, SUFFIX_GROUPS, Layout, PlanStage, grid_ids as _grid_ids, load_layout,
)

def layout_of_config(cfg) -> Layout:
    """The layout of ``cfg.model`` without weights: the built-in tiny model's, or the model
    config's shape (transformers' ``AutoConfig``) with the 8B layout's prompt lengths."""
    if cfg.model == "tiny":
        return load_layout("tiny")
    from vheads.study._runner import preflight_model

    shape = preflight_model(cfg)
    base = LAYOUTS["qwen3-vl-8b"]
    return Layout(cfg.model, len(shape["attention_layers"]), shape["n_heads"], base["prompt_tokens"], base["suffix_tokens"],
                  base["strip_tokens"], note="shape from the model's config; prompt lengths of the 8B point")


# ---- control pools ----------------------------------------------------------------------------


def compared_per_setting(pool: int | None, R: int) -> int:
    """Distinct head-sets one setting's control of R compares S with (the rule of
    :func:`vheads.evaluation.draw_controls`): the whole pool when it holds at most
    ``EXACT_POOL_FACTOR`` · R, else R."""
    from vheads.evaluation import EXACT_POOL_FACTOR

    return pool if pool is not None and pool <= EXACT_POOL_FACTOR * R else R


def expected_union(pool: int | None, per: float, sets: int) -> float:
    """Expected size of the union of ``sets`` independent uniform ``per``-subsets of a pool of
    ``pool`` members: each member is in one subset with probability per / N, so
    ``N (1 − (1 − per/N)^sets)``, computed as ``−N · expm1(sets · log1p(−per/N))`` so that a
    huge pool (1e121 layer-matched head-sets of an 8B model) does not round the power to 1;
    ``sets · per`` for an unknown pool."""
    if pool is None:
        return float(sets * per)
    if pool <= 0 or per <= 0:
        return 0.0
    q = min(per, pool) / pool
    if q >= 1:
        return float(pool)
    return float(-pool * math.expm1(sets * math.log1p(-q)))


def spread(k: int, n_layers: int, n_heads: int, selection: str = "flat") -> list[int]:
    """Heads per layer of a head-set of size ``k`` spread as evenly as the layers allow
    (``per-layer``: ``k`` in every layer)."""
    if selection == "per-layer":
        return [min(k, n_heads)] * n_layers
    k = min(k, n_layers * n_heads)
    return [k // n_layers + (1 if i < k % n_layers else 0) for i in range(n_layers)]


def control_pool(name: str, counts: list[int], n_heads: int) -> int | None:
    """Distinct head-sets control ``name`` can draw for an S with ``counts`` heads per layer
    (the counts of :func:`vheads.evaluation.control_pool_size`): ``layer-matched``
    ``Π_l C(H, s_l) − 1`` (every other head-set of the pattern); ``any-layer`` ``C(L·H, k) − 1``;
    ``random-n@n`` ``C(L·H, n)`` (less S when n = k); the S-disjoint ones (and
    ``attention-matched``, matched on fewer heads: at most as many) ``Π_l C(H − s_l, s_l)`` and
    ``C(L·H − k, k)``; a deterministic control one; ``None`` for a name not known here."""
    from vheads.evaluation import get_control, split_control_name

    base, n = split_control_name(name)
    k, total = sum(counts), len(counts) * n_heads
    if not get_control(base).random:
        return 1
    if base == "layer-matched":
        return math.prod(math.comb(n_heads, s) for s in counts) - 1
    if base in ("layer-matched-disjoint", "attention-matched"):
        return math.prod(math.comb(n_heads - s, s) for s in counts)
    if base == "any-layer":
        return math.comb(total, k) - 1
    if base == "any-layer-disjoint":
        return math.comb(total - k, k)
    if base == "random-n":
        n = n if n is not None else k
        return math.comb(total, n) - (n == k)
    return None


# ---- the plan -----------------------------------------------------------------------------------


@dataclass
class Plan:
    layout: Layout
    settings: int
    main_k: int
    stages: list[PlanStage] = field(default_factory=list)

    def stage(self, name: str) -> PlanStage:
        return next(s for s in self.stages if s.name == name)

    @property
    def full(self) -> int:
        return sum(s.full for s in self.stages)

    @property
    def suffix(self) -> int:
        return sum(s.suffix for s in self.stages)

    def hours(self, rates: dict, device: str) -> dict[str, float] | None:
        """Hours per stage on ``device`` ('gpu' | 'cpu') at ``rates`` (:func:`load_rates`);
        None where the rates hold no figure for it."""
        rate = rates.get(device)
        if not rate:
            return None
        # a rate is measured per row at a prompt's length (a suffix row: of a prompt whose
        # prefix is shared), so both kinds are read at the prompt's tokens
        out = {s.name: (s.full * row_ms(rate["full"], s.tokens_full) + s.suffix * row_ms(rate["suffix"], s.tokens_full))
               / 3.6e6 for s in self.stages}
        out["total"] = sum(out.values())
        return out

    def to_dict(self, rates: dict | None = None) -> dict:
        d = {"layout": asdict(self.layout), "settings": self.settings, "main_k": self.main_k,
             "stages": {s.name: {**asdict(s), "rows": s.rows} for s in self.stages},
             "full_rows": self.full, "suffix_rows": self.suffix}
        if rates is not None:
            for dev in ("gpu", "cpu"):
                h = self.hours(rates, dev)
                d[f"{dev}_hours"] = h
                d[f"{dev}_device"] = (rates.get(dev) or {}).get("device")
            d["rates"] = rates.get("source", "")
        return d


def row_ms(points: list[list[float]], tokens: int) -> float:
    """ms per row at a prompt of ``tokens`` from measured ``[tokens, ms]`` points: the
    least-squares line through them, through the origin while one point is measured."""
    if not points:
        raise ValueError("no measured points")
    if len(points) == 1 or len({t for t, _ in points}) == 1:
        a = sum(ms * t for t, ms in points) / sum(t * t for t, _ in points)
        return a * tokens
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mm = sum(ms for _, ms in points) / n
    b = sum((t - mt) * (ms - mm) for t, ms in points) / sum((t - mt) ** 2 for t, _ in points)
    return max(0.0, mm + b * (tokens - mt))


def load_rates(layout: Layout, path: str | Path | None = None) -> dict:
    """The rates of ``layout`` (``{"gpu": {"device", "full": [[tokens, ms]], "suffix": ...},
    "cpu": ...}``) from ``path`` (default: the shipped :data:`RATES_FILE`). A file for
    another layout is refused, naming ``rates.layout``."""
    p = Path(path) if path is not None else RATES_FILE
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise VheadsError(f"--rates {p}: cannot read it ({e})") from None
    layouts = data.get("layouts", {data.get("layout"): data} if "layout" in data else {})
    if layout.rates_key not in layouts:
        have = ", ".join(k for k in layouts if k) or "none"
        raise VheadsError(f"rates.layout: {p} holds rates for {have}, not for the layout {layout.rates_key!r}; "
                          "give --rates for this layout or --model-layout one of those")
    out = dict(layouts[layout.rates_key])
    out["source"] = data.get("source", str(p))
    return out


#: the share of a sequential control's comparisons :func:`expected_compared` assumes S sits inside
#: its controls (P(T_r ≥ T_S) = 1/2); the rest run to R_max
INSIDE_SHARE = 1.0
#: P(T_r ≥ T_S) of a control where S sits inside its controls (S a typical head-set)
P_INSIDE = 0.5


def expected_compared(R_max: int, h: int, batch: int, inside: float = INSIDE_SHARE, p: float = P_INSIDE) -> float:
    """Expected draws a sequential control (``controls_h = h``) runs for one setting: where S
    sits inside its controls, the h-th draw reaching T_S comes at about ``h / p`` (p =
    P(T_r ≥ T_S) = 1/2: 2h draws), rounded up to whole rounds of ``batch``; a share
    ``1 − inside`` of comparisons (S beats its controls) runs to R_max."""
    if not h:
        return float(R_max)
    early = min(R_max, math.ceil(h / p / batch) * batch)
    return inside * early + (1 - inside) * R_max


@dataclass
class PlanContext:
    """What a stage's :attr:`vheads.study._stage.Stage.rows` reads: the config, the layout and
    its shape ``L`` × ``H``, the head-set size ``k``, the number of settings, and
    ``compared(name, R, size, main=False)``: the distinct head-sets of control ``name`` (R
    asked) one setting of ``size`` heads is compared with (:func:`study_plan`)."""

    cfg: object
    layout: Layout
    k: int
    settings: int
    compared: object

    @property
    def L(self) -> int:
        return self.layout.n_layers

    @property
    def H(self) -> int:
        return self.layout.n_heads


def study_plan(cfg, layout: Layout, main_k: int | None = None, shared_draws: bool = False, sequential: bool = False,
               inside: float = INSIDE_SHARE) -> Plan:
    """The :class:`Plan` of ``cfg`` on ``layout`` (module docstring): each stage's rows
    (:attr:`vheads.study._stage.Stage.rows`, in stage order). ``main_k``: the head-set size
    (default: ``cfg.k``, or the study's k scaled to the layout). ``sequential``: each
    exchangeable control of ``controls_h ≥ 1`` counted at its expected draws
    (:func:`expected_compared`, a share ``inside`` of settings with S inside its controls)
    instead of R_max (the upper bound)."""
    from vheads.discovery import resolve_k
    from vheads.evaluation import COMMON_DRAWS
    from vheads.study._config import setting_ids
    from vheads.study._sequential import sequential_controls
    from vheads.study._stage import registered_stages

    L, H = layout.n_layers, layout.n_heads
    k = main_k if main_k is not None else resolve_k(L, H, cfg.k or None, cfg.selection)
    settings = len(setting_ids(cfg))
    seq_names = set(sequential_controls(cfg)) if sequential else set()

    def compared(name: str, R: int, size: int, main: bool = False) -> float:
        """Distinct head-sets of control ``name`` (R asked) one setting is compared with, or,
        with ``shared_draws``, the settings' union divided among them; a main sequential
        control at its expected draws."""
        pool = control_pool(name, spread(size, L, H, cfg.selection), H)
        per = compared_per_setting(pool, R)
        if main and name in seq_names:
            per = expected_compared(per, cfg.controls_h, cfg.controls_batch, inside)
        if not shared_draws:
            return float(per)
        if name in COMMON_DRAWS and pool is not None and per < pool:
            every = math.comb(L * H, size)
            return min(float(settings * per), per * every / pool, float(every)) / settings
        return expected_union(pool, per, settings) / settings

    plan = Plan(layout, settings, k)
    ctx = PlanContext(cfg, layout, k, settings, compared)
    for stage in registered_stages():
        if stage.rows is not None:
            plan.stages += stage.rows(ctx)
    return plan


def evaluation_stages() -> tuple[str, ...]:
    """The stages whose rows run through the evaluation's probes (what a run records)."""
    return ("causal map", "beta sweep", "cers", "ncs", "ncs-grid", "text", "algebra", "audit", "pointing suite")


def plan_study(cfg, model_layout: str | None = None, rates: str | Path | None = None) -> dict:
    """``vheads plan``: the plan of ``cfg`` (a :class:`vheads.study.StudyConfig`) on
    ``model_layout`` (a built-in name or JSON file; default: the config's model, shape from
    its config file) with GPU- and CPU-hours at ``rates`` (default: the shipped rates of
    that layout, where it has any). No weights are loaded."""
    layout = load_layout(model_layout) if model_layout else layout_of_config(cfg)
    plan = study_plan(cfg, layout, shared_draws=True)  # the memo's distinct head-sets (= per setting on a large model)
    upper = study_plan(cfg, layout)
    try:
        r = load_rates(layout, rates)
    except VheadsError:
        if rates is not None:  # a rates file given for another layout: the user's mistake
            raise
        r = {"source": f"no shipped rates for the layout {layout.rates_key!r}"}
    d = plan.to_dict(r)
    d["n_eval"] = cfg.n_eval
    d["upper_bound"] = {"full_rows": upper.full, "suffix_rows": upper.suffix, "gpu_hours": (upper.hours(r, "gpu") or {}).get("total"),
                        "note": "every setting's control draws counted as its own (no draw shared between settings)"}
    if cfg.controls_h:  # the plan above counts R_max; the expected run stops early
        from vheads.study._sequential import sequential_controls

        exp = study_plan(cfg, layout, shared_draws=True, sequential=True)
        d["expected_sequential"] = {
            "full_rows": exp.full, "suffix_rows": exp.suffix, "gpu_hours": (exp.hours(r, "gpu") or {}).get("total"),
            "cpu_hours": (exp.hours(r, "cpu") or {}).get("total"), "h": cfg.controls_h, "batch": cfg.controls_batch,
            "assumption": (f"every exchangeable control ({', '.join(sequential_controls(cfg))}) of every setting and test "
                           f"stops at its h-th draw reaching S, about h / P(T >= T_S) = {cfg.controls_h} / {P_INSIDE} draws "
                           f"(S inside its controls in {INSIDE_SHARE:.0%} of cells), rounded up to whole rounds of "
                           f"{cfg.controls_batch}; a cell where S beats its controls runs to R_max (the plan's figures, "
                           "an upper bound)")}
    d["rate_model"] = ("ms per row linear in the prompt's tokens: a least-squares line through the measured "
                       "[tokens, ms] points, through the origin while one point is measured")
    return d


def plan_text(d: dict) -> str:
    """The plan of :func:`plan_study` as a table, one line per stage."""
    lay = d["layout"]
    lines = [f"plan: {d['settings']} settings, k = {d['main_k']}, n_eval = {d['n_eval']} on {lay['name']} "
             f"({lay['n_layers']} x {lay['n_heads']} heads; {lay['prompt_tokens']}-token prompts, {lay['suffix_tokens']} after the prefix)",
             f"{'stage':<15} {'full rows':>12} {'suffix rows':>12} {'tok/full':>8} {'items':>6} {'head-sets':>9} {'GPU-h':>8} {'CPU-h':>8}"]
    gpu, cpu = d.get("gpu_hours") or {}, d.get("cpu_hours") or {}
    fmt = lambda h, s: f"{h[s]:8.2f}" if s in h else f"{'-':>8}"  # noqa: E731
    for name, s in d["stages"].items():
        lines.append(f"{name:<15} {s['full']:>12,} {s['suffix']:>12,} {s['tokens_full']:>8} {s['items']:>6} {s['head_sets']:>9} "
                     f"{fmt(gpu, name)} {fmt(cpu, name)}")
    lines.append(f"{'total':<15} {d['full_rows']:>12,} {d['suffix_rows']:>12,} {'':>8} {'':>6} {'':>9} {fmt(gpu, 'total')} {fmt(cpu, 'total')}")
    if d.get("gpu_device"):
        lines.append(f"GPU: {d['gpu_device']}; " + d["rate_model"])
    if d.get("expected_sequential"):
        e = d["expected_sequential"]
        h = f"; {e['gpu_hours']:.2f} GPU-h" if e.get("gpu_hours") is not None else ""
        c = f", {e['cpu_hours']:.2f} CPU-h" if e.get("cpu_hours") is not None else ""
        lines.append(f"sequential controls (controls_h = {e['h']}): the rows above are the upper bound (R_max); expected "
                     f"{e['full_rows']:,} full + {e['suffix_rows']:,} suffix rows{h}{c}, assuming {e['assumption']}")
    lines.append(f"rates: {d.get('rates', '')}")
    return "\n".join(lines)
