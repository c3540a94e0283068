"""The report's figures, each drawn with matplotlib (Agg) and returned as PNG bytes.

- :func:`random_band_figure` — the seed's Figure 3: each setting's S (red diamond) against
  the distribution of its control draws (dots, with a mean ± SD bar), one panel per test;
- :func:`sweep_figure` — S against its controls over β or k: one heat-map panel per test (settings × sweep values);
- :func:`strip_figure` — a setting's top heads: their attention mass from the source rows
  on each of a strip's six panels, drawn as bars under the strip image;
- :func:`score_map_figure` — the layer × head map of discovery scores, S's heads ringed;
- :func:`overlap_figure` — the seed's Figure 2 (via ``vheads.discovery``'s heatmap).
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from vheads.report._data import Cell, RunData, cfg_get, parse_test_id, sweep_points
from vheads.report._tables import MAIN_CONTROLS, TEST_NAMES, fmt

DPI = 110
S_COLOR = "#c0392b"
CONTROL_COLORS = {"layer-matched": "#2e6fb7", "any-layer": "#7f8c8d"}
_OTHER_COLORS = ["#27ae60", "#8e44ad", "#d68910", "#16a085", "#a04000"]


def _control_color(name: str, i: int = 0) -> str:
    return CONTROL_COLORS.get(name, _OTHER_COLORS[i % len(_OTHER_COLORS)])


def _png(fig) -> bytes:
    """PNG bytes of a figure already laid out (tight_layout), then closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


# ---- Figure 3: S against its random band ----------------------------------------------------


def random_band_figure(run: RunData, tests: list[str]) -> bytes | None:
    return band_figure(run.settings, run.cells, tests)


def band_figure(settings: list[str], cells: dict[tuple[str, str], Cell], tests: list[str],
                shown: tuple[str, ...] = MAIN_CONTROLS, row_label: str = "setting") -> bytes | None:
    """Each row's S against the draws of its ``shown`` controls, one panel per test; rows
    are ``settings`` (a run's settings, or model · setting labels: ``row_label`` names
    them), ``cells`` keyed ``(row, test)``."""
    tests = [t for t in tests if any((s, t) in cells for s in settings)]
    if not tests:
        return None
    settings = [s for s in settings if any((s, t) in cells for t in tests)]
    controls = [c for c in shown if any(c in cells[(s, t)].controls
                                        for t in tests for s in settings if (s, t) in cells)]
    n = len(settings)
    # constrained layout makes room for the titles, labels and the legend below at any n
    # (a tight layout fails on one row: "Tight layout not applied")
    fig, axes = plt.subplots(1, len(tests), figsize=(5.2 * len(tests), 1.5 + 0.42 * n), squeeze=False, sharey=True,
                             layout="constrained")
    rng = np.random.default_rng(0)  # jitter only
    offsets = {c: (i - (len(controls) - 1) / 2) * 0.28 for i, c in enumerate(controls)}
    for ax, t in zip(axes[0], tests):
        for y, s in enumerate(settings):
            cell = cells.get((s, t))
            if cell is None:
                continue
            for c in controls:
                v = cell.controls.get(c)
                if v is None or not len(v):
                    continue
                yy = y + offsets[c]
                col = _control_color(c)
                ax.scatter(v, yy + rng.uniform(-0.07, 0.07, len(v)), s=7, color=col, alpha=0.35, lw=0)
                sd = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
                ax.plot([v.mean() - sd, v.mean() + sd], [yy, yy], color=col, lw=3.5, alpha=0.9, solid_capstyle="butt")
                ax.plot([v.mean()], [yy], "|", color="black", ms=9)
            if cell.s is not None:
                ax.scatter([cell.s.mean()], [y], marker="D", s=42, color=S_COLOR, zorder=5, edgecolor="white", lw=0.6)
        ax.axvline(0, color="#999", lw=0.8, ls=":")
        ax.set_title(TEST_NAMES.get(t, t), fontsize=10)
        ax.set_xlabel("statistic T (mean over items)", fontsize=9)
        ax.grid(axis="x", alpha=0.25)
        ax.tick_params(labelsize=8)
    axes[0][0].set_yticks(range(n), settings, fontsize=8.5, family="monospace")
    axes[0][0].set_ylim(n - 0.5, -0.5)
    axes[0][0].set_ylabel(row_label, fontsize=9)
    handles = [plt.Line2D([], [], marker="D", ls="", color=S_COLOR, label="discovered S")]
    handles += [plt.Line2D([], [], color=_control_color(c), lw=3.5, label=f"{c}: draws, mean ± SD") for c in controls]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8.5, frameon=False)
    return _png(fig)


# ---- sweeps ---------------------------------------------------------------------------------


def sweep_figure(run: RunData, param: str) -> bytes | None:
    """One heat-map panel per test (at most a handful, whatever the number of settings):
    rows are the settings with a sweep (the same rows in every panel, labelled once), columns
    the sweep's values (β or k); a cell's colour
    is S − the mean of that point's first main control (layer-matched where drawn), its text
    that gap, ``*`` where S is above every draw of that control (rank p at its floor);
    grey: a point without that control (or that the setting does not have)."""
    pts = sweep_points(run, param)
    if not pts:
        return None
    bases = list(dict.fromkeys(base for _, base in sorted(pts, key=lambda k: k[1])))
    order = {s: i for i, s in enumerate(run.settings)}
    panels = []
    rows = sorted({s for s, _ in pts}, key=lambda s: (order.get(s, len(order)), s))  # every panel: the same rows
    for base in bases:
        xs = sorted({x for s in rows for x in pts.get((s, base), {})})
        gap = np.full((len(rows), len(xs)), np.nan)  # [settings, sweep values]
        top = np.zeros(gap.shape, dtype=bool)
        for i, s in enumerate(rows):
            for j, x in enumerate(xs):
                cell = pts.get((s, base), {}).get(x)
                c = next((c for c in MAIN_CONTROLS if cell is not None and c in cell.controls and len(cell.controls[c])), None)
                if c is None or cell.s is None or not len(cell.s):
                    continue
                t_s, draws = float(cell.s.mean()), cell.controls[c]
                gap[i, j] = t_s - float(draws.mean())
                top[i, j] = bool((draws < t_s).all())
        panels.append((base, rows, xs, gap, top))
    vmax = max((float(np.nanmax(np.abs(g))) for *_, g, _ in panels if np.isfinite(g).any()), default=0.0) or 1.0
    # geometry in inches: the panels' cells, the setting labels left of the first panel only (every
    # panel has the same rows), the colour bar on the right; the figure stays within the page's
    # width where the sweep allows it, so its text is shown at the size drawn
    widths = [0.55 * len(xs) for _, _, xs, _, _ in panels]
    left, right, space = 0.5 + 0.07 * max(len(r) for r in rows), 1.3, 0.3  # monospace 8 pt: about 0.067 in a character
    n_rows = len(rows)
    fig, axes = plt.subplots(1, len(panels), figsize=(left + sum(widths) + space * (len(panels) - 1) + right,
                                                      max(2.2, 1.3 + 0.3 * n_rows)), squeeze=False, width_ratios=widths)
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="#d9d9d9")
    im = None
    for ax, (base, rows, xs, gap, top) in zip(axes[0], panels):
        im = ax.imshow(np.ma.masked_invalid(gap), cmap=cmap, vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest")
        for i in range(len(rows)):
            for j in range(len(xs)):
                if np.isfinite(gap[i, j]):
                    ax.text(j, i, fmt(float(gap[i, j]), 2) + ("*" if top[i, j] else ""), ha="center", va="center", fontsize=8,
                            color="white" if abs(gap[i, j]) > 0.6 * vmax else "black")
        ax.set_xticks(range(len(xs)), [f"{x:g}" for x in xs], fontsize=8)
        ax.set_xlabel("β" if param == "beta" else "k (heads)", fontsize=9)
        if ax is not axes[0][0]:
            ax.set_yticks(range(len(rows)), [""] * len(rows))
        else:
            ax.set_yticks(range(len(rows)), rows, fontsize=8, family="monospace")
            ax.set_ylabel("setting", fontsize=9)
        ax.set_title(TEST_NAMES.get(base, base), fontsize=9)
    # fixed margins (inches) for the labels and the colour bar: no layout engine to run
    w, h = fig.get_figwidth(), fig.get_figheight()
    fig.subplots_adjust(left=left / w, right=1 - right / w, top=1 - 0.35 / h, bottom=0.55 / h,
                        wspace=space / (sum(widths) / len(panels)))
    cb = fig.colorbar(im, cax=fig.add_axes((1 - 1.1 / w, 0.55 / h, 0.15 / w, 1 - 0.9 / h)))
    cb.set_label("S − control mean", fontsize=8)
    cb.ax.tick_params(labelsize=8)
    return _png(fig)


# ---- attention over strips -----------------------------------------------------------------


def top_strip_heads(run: RunData, setting: str, n_heads: int) -> list[tuple[int, int]]:
    """The setting's heads with stored strip attention, best discovery score first."""
    heads = list(run.strip_attention.get(setting, {}))
    scores = run.discovery.get(setting, {}).get("scores")
    if scores is not None and scores.ndim == 2:
        heads.sort(key=lambda lh: -scores[lh] if lh[0] < scores.shape[0] and lh[1] < scores.shape[1] else 0)
    return heads[:n_heads]


def strip_figure(run: RunData, setting: str, n_heads: int = 3, n_items: int = 2) -> bytes | None:
    """For up to ``n_items`` strips: the strip image (or six empty panels where
    ``strips/<item>.png`` is missing) and, under it, one row of six bars per top head — the
    head's attention mass from the source rows on each panel, aligned with the panels
    (red: the panel with the most mass; a black frame marks the panel the question asks
    about, where ``strips/<item>.json`` records it). Drawn on one axes in data coordinates: item j
    spans x ∈ [7j, 7j + 6], one unit per panel."""
    heads = top_strip_heads(run, setting, n_heads)
    if not heads:
        return None
    by_head = run.strip_attention[setting]
    items = [i for i in sorted(by_head[heads[0]]) if all(i in by_head[h] for h in heads)][:n_items]
    if not items:
        return None
    scores = run.discovery.get(setting, {}).get("scores")
    ymax = max(max(by_head[h][i], default=0.0) for h in heads for i in items) or 1.0
    row_h, gap, img_h = 1.0, 0.35, 1.0  # bar-row height, gap between rows, strip height (panel = 1 x 1)
    lab = 3.4  # data units left of the first strip for the head labels ("L3 H2  s=0.199", 7.5 pt: about 1 in)
    fig, ax = plt.subplots(figsize=(0.3 * (7 * len(items) - 0.8 + lab) + 0.3, 0.3 * (img_h + 1.0 + len(heads) * (row_h + gap)) + 0.4))
    for j, item in enumerate(items):
        x0 = 7 * j
        png = run.strip_png(item)
        if png is not None:
            ax.imshow(plt.imread(png), extent=(x0, x0 + 6, 0, img_h), interpolation="nearest", zorder=1)
        else:
            for p in range(6):
                ax.add_patch(plt.Rectangle((x0 + p + 0.04, 0.04), 0.92, img_h - 0.08, fc="#eee", ec="#bbb"))
        for p in range(6):
            ax.text(x0 + p + 0.5, img_h + 0.12, str(p + 1), ha="center", va="bottom", fontsize=7.5, color="#555")
        meta = run.strip_meta(item)
        label = meta["question"] if meta else _short(item)
        ax.text(x0 + 3, img_h + 0.55, label if png is not None else f"{label} (no image)", ha="center", va="bottom",
                fontsize=7.5, family="monospace")
        target = meta.get("target") if meta else None
        if target and target.startswith("panel") and target[5:].isdigit():  # outline the asked panel
            p = int(target[5:]) - 1
            ax.add_patch(plt.Rectangle((x0 + p, 0), 1, img_h, fill=False, ec="#111", lw=2.2, zorder=3))
        for i, h in enumerate(heads):
            base = -(i + 1) * (row_h + gap)
            m = np.asarray(by_head[h][item], dtype=float)
            best = int(np.argmax(m)) if len(m) else -1
            ax.add_patch(plt.Rectangle((x0, base), 6, row_h, fc="#f7f8fa", ec="#dde1e6", lw=0.6, zorder=0))
            ax.bar(x0 + np.arange(len(m)) + 0.5, m / ymax * row_h, width=0.78, bottom=base,
                   color=["#c0392b" if p == best else "#5d8fc9" for p in range(len(m))], zorder=2)
            if j == 0:
                sc = f"  s={scores[h]:.3f}" if scores is not None and scores.ndim == 2 else ""
                ax.text(-0.25, base + row_h / 2, f"L{h[0]} H{h[1]}{sc}", ha="right", va="center", fontsize=7.5)
    ax.set_xlim(-lab, 7 * len(items) - 0.8)
    ax.set_ylim(-len(heads) * (row_h + gap) - 0.1, img_h + 1.0)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{setting}: top heads' attention on each panel (bar height: mass, scale max {ymax:.3f})",
                 fontsize=8.5, loc="left")
    fig.tight_layout(pad=0.3)
    return _png(fig)


# ---- layer × head score map ------------------------------------------------------------------


def score_map_figure(run: RunData) -> bytes | None:
    settings = [s for s in run.settings if run.discovery.get(s, {}).get("scores") is not None
                and run.discovery[s]["scores"].ndim == 2]
    if not settings:
        return None
    vmax = max(float(np.max(run.discovery[s]["scores"])) for s in settings) or 1.0
    ncol = min(4, len(settings))
    nrow = -(-len(settings) // ncol)
    L, H = run.discovery[settings[0]]["scores"].shape
    w = max(3.2 * ncol, 3.8)  # one panel: room for the colour bar and its label
    h = max(2.2, nrow * (0.8 + 3.0 * min(1.6, L / max(H, 1)) * 0.6))
    # a ring fills about 60% of a cell (6–13 pt across), whatever the model's size
    cell_pt = 72 * min(min(3.2, w - 0.6) * 0.75 / max(H, 1), (h / nrow - 0.8) / max(L, 1))
    ring = float(np.clip(0.6 * cell_pt, 6, 13))
    fig, axes = plt.subplots(nrow, ncol, figsize=(w, h), squeeze=False, layout="constrained")
    for ax in axes.flat[len(settings):]:
        ax.set_visible(False)
    im = None
    cmap = plt.get_cmap("magma").with_extremes(bad="#d9d9d9")  # grey: layers with no heads (hybrid models)
    no_heads = [l for l in range(L) if run.attention_layers is not None and l not in run.attention_layers]
    for ax, s in zip(axes.flat, settings):
        sc = np.array(run.discovery[s]["scores"], dtype=float)
        sc[no_heads] = np.nan
        im = ax.imshow(sc, cmap=cmap, vmin=0, vmax=vmax, aspect="auto", interpolation="nearest")
        hs = run.discovery[s]["headset"]
        if hs:  # a bright ring on a dark one: visible on the dark and on the light end of the map
            xy = ([h for _, h in hs], [l for l, _ in hs])
            ax.scatter(*xy, s=ring ** 2, facecolor="none", edgecolor="#0b2e13", lw=2.6)
            ax.scatter(*xy, s=ring ** 2, facecolor="none", edgecolor="#3dff7a", lw=1.4)
        ax.set_title(f"{s}", fontsize=8.5, family="monospace")
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        ax.tick_params(labelsize=8)
    label = "discovery score\n(region mass)" + ("\ngrey: linear-attention\nlayers, no heads" if no_heads else "")
    cb = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8)
    cb.set_label(label, fontsize=8.5)
    cb.ax.tick_params(labelsize=8)
    return _png(fig)


# ---- Figure 2: overlap heatmap -------------------------------------------------------------


def overlap_figure(run: RunData, labels: list[str], matrix: np.ndarray, k: int | None) -> bytes:
    from vheads.discovery import Ceiling, plot_overlap_heatmap

    ceilings = None
    if all(s in run.ceilings for s in labels):
        ceilings = [Ceiling(run.ceilings[s]["mean"], run.ceilings[s]["lo"], run.ceilings[s]["hi"], np.array([]),
                            run.ceilings[s]["k"]) for s in labels]
    with tempfile.TemporaryDirectory() as d:
        path = plot_overlap_heatmap(np.nan_to_num(matrix), labels, Path(d) / "overlap.png", k=k, ceilings=ceilings)
        return path.read_bytes()


def _short(item_id: str, width: int = 26) -> str:
    """An item id short enough to sit above its strip (the tail is the distinctive part)."""
    return item_id if len(item_id) <= width else "…" + item_id[-(width - 1):]
