"""Necessity per item kind (the study's ``necessity by kind`` stage, table ``kind_necessity``):
S's mean necessity value on each item kind beside its layer-matched controls' means.

Every number printed is taken from the stored rows (:mod:`vheads.study.stages.kinds`): S's
mean, t-interval and bootstrap interval as stored; the controls' mean, 2.5–97.5 percentile
band and the rank ``p = (1 + #{controls with mean ≥ S's mean}) / (R + 1)`` over the R stored
control rows of that kind."""

from __future__ import annotations

import numpy as np

from vheads.evaluation import rank_p
from vheads.report._data import RunData
from vheads.report._doc import Table
from vheads.report._figures import S_COLOR, _control_color, _png, plt
from vheads.report._format import fmt, fmt_p
from vheads.report._registry import figure, section
from vheads.store import Store

TABLE = "kind_necessity"
KIND_ORDER = ("class-matched", "class-mismatched", "grid-oracle", "text")

HOW = (
    "NCS is one number per setting: the mean matched drop minus the mean mismatched drop. Here each kind of item "
    "the necessity tests ask is read alone — the class question on an image of the keyed class (class-matched) "
    "and of an excluded class (class-mismatched, generic damage), the grid question that names a cell (grid-oracle, "
    "NCS_grid's contrast) and the text-solvable question (text) — with S's mean beside the means of its "
    "layer-matched controls on the same items. Visual heads should stand out on class-matched and grid-oracle, "
    "and not on class-mismatched or text; a set that stands out on text as well is generically important. The "
    "rank p is per kind and unadjusted: a description of where the effect lives, not a verdict."
)


def kind_cells(run_dir, model: str, metric: str) -> dict[tuple[str, str], dict]:
    """``{(setting, kind): {test, n, mean, t_lo, t_hi, boot_lo, boot_hi, controls}}`` of the
    stored ``kind_necessity`` rows in ``metric`` (``controls``: the control rows' means);
    empty for a run without the table."""
    store = Store(run_dir, readonly=True, model=model)
    try:
        if not store.query("SELECT 1 FROM main.sqlite_master WHERE name = ?", TABLE):
            return {}
        got = store.query(f"SELECT setting, kind, test, control, n, mean, t_lo, t_hi, boot_lo, boot_hi FROM {TABLE} "
                          "WHERE metric = ? ORDER BY setting, kind, headset_id", metric)
    finally:
        store.close()
    cells: dict[tuple[str, str], dict] = {}
    for setting, kind, test, control, n, mean, t_lo, t_hi, b_lo, b_hi in got:
        c = cells.setdefault((setting, kind), {"test": test, "controls": []})
        if control == "S":
            c.update(n=n, mean=mean, t_lo=t_lo, t_hi=t_hi, boot_lo=b_lo, boot_hi=b_hi)
        elif mean is not None:
            c["controls"].append(mean)
    return {key: c for key, c in cells.items() if c.get("mean") is not None}  # S with a mean there


def kind_rank_p(s_mean: float, controls: list[float]) -> float | None:
    """One-sided rank p of S's mean among the controls' (:func:`vheads.evaluation.rank_p`; None without controls)."""
    return rank_p(s_mean, controls).p if controls else None


def _order(run: RunData, cells) -> tuple[list[str], list[str]]:
    """The settings (the report's order, score points after the study's settings) and kinds of ``cells``."""
    stored = {s for s, _ in cells}
    known = run.settings + run.score_settings
    settings = [s for s in known if s in stored] + sorted(stored - set(known))
    kinds = {k for _, k in cells}
    return settings, [k for k in KIND_ORDER if k in kinds] + sorted(kinds - set(KIND_ORDER))


def kinds_table(run: RunData, cells) -> Table | None:
    settings, kinds = _order(run, cells)
    rows = []
    for s in settings:
        for k in kinds:
            c = cells.get((s, k))
            if c is None:
                continue
            ctl = np.asarray(c["controls"], dtype=float)
            band = (f"{fmt(float(ctl.mean()))} [{fmt(float(np.percentile(ctl, 2.5)))}, {fmt(float(np.percentile(ctl, 97.5)))}]"
                    if len(ctl) else "–")
            t_ci = f"{fmt(c['mean'])} [{fmt(c['t_lo'])}, {fmt(c['t_hi'])}]" if c["t_lo"] is not None else fmt(c["mean"])
            boot = f"[{fmt(c['boot_lo'])}, {fmt(c['boot_hi'])}]" if c["boot_lo"] is not None else "–"
            rows.append([s, k, c["test"], str(c["n"]), t_ci, boot, band, str(len(ctl)), fmt_p(kind_rank_p(c["mean"], c["controls"]))])
    if not rows:
        return None
    return Table("Necessity per item kind", ["Setting", "Kind", "Test", "n", "S mean [t 95% CI]", "S bootstrap 95% CI",
                                             "layer-matched mean [2.5–97.5%]", "R", "rank p"], rows,
                 f"Per-item values in {run.metric}: the drop of the key at baseline minus masked (class-matched, "
                 "class-mismatched: NCS's arms; text: the text arm), NCS_grid's contrast (grid-oracle). S: mean with its "
                 "t-interval and percentile bootstrap (2,000 resamples, seed stored). Controls: the mean and 2.5–97.5 "
                 "percentiles of the R layer-matched head-sets' means on the same items; rank p = (1 + #{controls ≥ S}) "
                 "/ (R + 1), one-sided, per kind, no Holm adjustment (descriptive).", text_cols=3)


MAX_PANELS = 16  # docs/reporting.md: at most 16 panels a figure (the table holds every setting)


def kinds_figure(run: RunData, cells) -> bytes | None:
    """One panel per setting (the study's settings before the score points, at most
    :data:`MAX_PANELS`): per kind, the controls' 2.5–97.5 percentile band (blue bar) and mean
    (blue tick) beside S (red diamond, its t-interval) — the numbers of :func:`kinds_table`."""
    settings, kinds = _order(run, cells)
    settings = settings[:MAX_PANELS]
    if not settings:
        return None
    ncol = min(4, len(settings))
    nrow = -(-len(settings) // ncol)
    blue = _control_color("layer-matched")
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.0 * ncol, 2.7 * nrow), squeeze=False)
    for ax, s in zip(axes.flat, settings):
        for x, k in enumerate(kinds):
            c = cells.get((s, k))
            if c is None:
                continue
            ctl = np.asarray(c["controls"], dtype=float)
            if len(ctl):
                lo, hi = np.percentile(ctl, [2.5, 97.5])
                ax.plot([x - 0.12, x - 0.12], [lo, hi], color=blue, lw=5, alpha=0.35, solid_capstyle="butt")
                ax.plot([x - 0.22, x - 0.02], [ctl.mean()] * 2, color=blue, lw=2)
            if c["t_lo"] is not None:
                ax.errorbar(x + 0.12, c["mean"], yerr=[[c["mean"] - c["t_lo"]], [c["t_hi"] - c["mean"]]], fmt="none",
                            ecolor=S_COLOR, lw=1, capsize=2)
            ax.scatter(x + 0.12, c["mean"], marker="D", s=26, color=S_COLOR, zorder=3)
        ax.axhline(0, color="#999", lw=0.7, ls=":")
        ax.set_xticks(range(len(kinds)), kinds, rotation=30, ha="right", fontsize=8)
        ax.set_xlim(-0.5, len(kinds) - 0.5)
        ax.set_title(s, fontsize=9.5)
        ax.set_ylabel(f"necessity ({run.metric})", fontsize=9)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(settings):]:
        ax.axis("off")
    fig.tight_layout()
    return _png(fig)


@section("kinds", "Necessity per item kind", HOW, order=72, needs=(TABLE,), tables=("Necessity per item kind",),
         figures=("kind_necessity",))
def kinds(run: RunData) -> list:
    cells = kind_cells(run.run_dir, run.model, run.metric)
    if not cells:
        return []
    n = len(_order(run, cells)[0])
    caption = ("Necessity per item kind, one panel per setting: S (red diamond, t 95% interval) beside its layer-matched "
               "controls on the same items (blue: the 2.5–97.5 percentiles of their means, tick: the mean of their means)."
               + (f" The first {MAX_PANELS} settings; the table holds every one." if n > MAX_PANELS else ""))
    return [figure("kind_necessity", kinds_figure(run, cells), caption, wide=n > 2), kinds_table(run, cells)]
