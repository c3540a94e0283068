"""Published methods vs the seed's settings: the report's tables of the study's score points.

Each score setting (``scores = [...]``: the presets gaze, localization, vrh, sparsemm, or a
custom point; :mod:`vheads.study._scores`) is set beside the grid's settings:

- :func:`methods_overlap_table` / :func:`methods_overlap_figure` — ``|S_p ∩ S_s|``, the heads
  the point's head-set shares with each grid setting's, and where both scored the same items
  the half-size overlap as a fraction of their geometric-mean noise ceiling (as Table 20);
- :func:`sink_twins_table` — each sink-aware point (``sinks=drop``, e.g. ``gaze_nosink``) beside
  its sink-blind twin (the same point with sinks kept, on the same corpus and query): the
  heads they share and their Jaccard index, the sink rule and how many tokens it dropped;
- :func:`methods_tests_table` — each point's NCS and CERS against its own layer-matched
  controls (drawn as for any setting): ``T_S`` with its interval, the controls' mean ± SD,
  z, the rank p and the Holm-adjusted p over the family of the study's score settings (one
  family per test; the grid's Table 3 keeps its own family of the grid's settings).

Everything is read from the store (:class:`RunData`) and computed with the functions the
seed's tables use (:func:`vheads.report._tables.compare`, :func:`vheads.evaluation.holm`).
"""

from __future__ import annotations

import numpy as np

from vheads._ids import is_ablation_test, without_ablation
from vheads.report._data import RunData, fallback_note, identical_to
from vheads.report._doc import Figure, Table
from vheads.report._tables import ALPHA, TEST_NAMES, adjust_family, compare, fmt, fmt_ci, fmt_p, fmt_verdict, s_interval

CONTROL = "layer-matched"
AXIS_ORDER = ("rows", "region", "norm", "keys", "across", "select", "k", "sinks", "sink_layer", "sink_factor")
#: the keys of a point's record that make up the sink rule (absent: sinks kept)
SINK_KEYS = ("sinks", "sink_layer", "sink_factor")

HOW = ("Each score point is a published method's definition of a visual head (presets: gaze = last-token mass on "
       "the queried panel; localization = elbow and spatial-entropy selection frequency of the last token's image "
       "mass; vrh = the model's own answer tokens' mass on the target, top-k; sparsemm = argmax hits of the answer "
       "tokens on the target), discovered on the same items as the grid and tested exactly as a grid setting: the "
       "same tests, layer-matched controls drawn the same way. The overlap table says which of the seed's settings "
       "a method reproduces; the test table whether its heads beat random heads of the same layers. The Holm family "
       "here is the score points (the seed's Table 3 keeps the grid's settings as its family).")


def point_text(point: dict) -> str:
    """A point's axes on one line: ``rows=out region=target … k=3`` (k 'auto': scaled)."""
    return " ".join(f"{a}={point.get(a) if point.get(a) is not None else 'auto'}" for a in AXIS_ORDER if a in point)


def _heads(run: RunData, s: str) -> set[tuple[int, int]]:
    return {tuple(h) for h in run.discovery[s]["headset"]}


def overlap_counts(run: RunData) -> tuple[list[str], list[str], np.ndarray] | None:
    """``(score settings, grid settings, M)`` with ``M[i, j] = |S_i ∩ S_j|``."""
    rows = [s for s in run.score_settings if s in run.discovery]
    cols = [s for s in run.settings if s in run.discovery]
    if not rows or not cols:
        return None
    return rows, cols, np.array([[len(_heads(run, a) & _heads(run, b)) for b in cols] for a in rows])


def _fractions(run: RunData) -> dict[frozenset, float]:
    """The half-size overlap / geo-mean ceiling of each stored pair on the same items."""
    return {frozenset((r["a"], r["b"])): r["fraction"] for r in run.score_overlap
            if r.get("same_items") and r.get("fraction") is not None and np.isfinite(r["fraction"])}


def methods_overlap_table(run: RunData) -> Table | None:
    got = overlap_counts(run)
    if got is None:
        return None
    rows_s, cols, m = got
    frac = _fractions(run)
    L, H = run.shape
    n_heads = (len(run.attention_layers) if run.attention_layers is not None else (L or 0)) * (H or 0)
    same = identical_to(run)
    rows = []
    for i, s in enumerate(rows_s):
        row = [s, point_text(run.score_points.get(s, {})), ", ".join(same.get(s, [])) or "–", str(len(_heads(run, s)))]
        for j, c in enumerate(cols):
            f = frac.get(frozenset((s, c)))
            row.append(f"{m[i, j]}" + (f" ({fmt(f, 2)})" if f is not None else ""))
        rows.append(row)
    chance = (f" A random head-set shares |S_p|·|S_s| / {n_heads} heads with a setting on average." if n_heads else "")
    return Table("Published methods vs the seed's settings: shared heads",
                 ["Score setting", "Point", "Identical S", "|S|", *cols], rows,
                 "|S_p ∩ S_s|: heads the score point's head-set shares with each grid setting's (discovered on all "
                 "items). In parentheses, where both scored the same items: the overlap at half size as a fraction of "
                 "the two split-half noise ceilings' geometric mean (as the seed's Table 20; near 1 = the same heads up "
                 "to sampling noise; a ratio of noisy overlaps, it can exceed 1). Identical S: the settings (grid or "
                 "score points) whose head-set holds exactly the same heads: their tests measure one head-set again."
                 + chance, text_cols=3)


def sink_twins(run: RunData) -> list[tuple[str, str]]:
    """``(sink-aware setting, its sink-blind twin)`` pairs among the run's score settings: the
    twin has the same corpus and query and the same point on every axis but the sink rule."""
    def axes(s: str) -> dict:
        return {a: run.score_points.get(s, {}).get(a) for a in AXIS_ORDER if a not in SINK_KEYS}

    def drops(s: str) -> bool:
        return run.score_points.get(s, {}).get("sinks") == "drop"

    scored = [s for s in run.score_settings if s in run.discovery]
    pairs = []
    for s in scored:
        if drops(s):
            twins = [t for t in scored if not drops(t) and t.rsplit("-", 1)[0] == s.rsplit("-", 1)[0] and axes(t) == axes(s)]
            pairs += [(s, t) for t in twins[:1]]
    return pairs


def sink_twins_table(run: RunData) -> Table | None:
    """Each sink-aware head-set against its sink-blind twin: ``|S ∩ S'|`` and Jaccard
    ``|S ∩ S'| / |S ∪ S'|``, with the rule's layer and factor and the tokens it dropped."""
    pairs = sink_twins(run)
    if not pairs:
        return None
    rows = []
    for s, t in pairs:
        a, b = _heads(run, s), _heads(run, t)
        union = len(a | b)
        pt = run.score_points.get(s, {})
        dropped = pt.get("sinks_dropped") or {}
        n_items = len(dropped.get("items", [])) if dropped else None
        where = (f"{dropped.get('n_items_with_sinks', 0)}/{n_items} items, {dropped.get('n_dropped', 0)} tokens"
                 if dropped else "–")
        rows.append([s, t, f"layer {pt.get('sink_layer')}, > {fmt(pt.get('sink_factor'), 1)} × median", where,
                     str(len(a)), str(len(b)), str(len(a & b)), fmt(len(a & b) / union, 2) if union else "–"])
    return Table("Published methods vs the seed's settings: sinks left out",
                 ["Sink-aware setting", "Sink-blind twin", "Sink rule", "Sinks dropped", "|S|", "|S'|", "|S ∩ S'|", "Jaccard"],
                 rows,
                 "A sink-aware point leaves out of the key region every image token whose hidden-state L2 norm (at the "
                 "rule's layer: 0 = input embeddings, l = output of decoder layer l-1) exceeds the factor × its item's "
                 "median image-token norm (massive activations: attention parked on such a token is not looking at the "
                 "region). Its twin is the same point with sinks kept, on the same items. Jaccard = |S ∩ S'| / |S ∪ S'| "
                 "(1: the sinks change no head; low: the sink-blind head-set was partly sink heads).", text_cols=4)


def methods_tests(run: RunData, test: str, alpha: float = ALPHA) -> dict[str, object]:
    """Each score setting's :class:`~vheads.report._tables.TestStat` for ``test``, the rank p
    against :data:`CONTROL` Holm-adjusted over the score settings that have it."""
    stats = {s: compare(run.cells[(s, test)], s, test, s_interval(run, s, test, run.cells[(s, test)].s))
             for s in run.score_settings if (s, test) in run.cells}
    members = [st for st in stats.values() if CONTROL in st.controls and st.controls[CONTROL].rank is not None]
    adjust_family([st.controls[CONTROL] for st in members], "score point", alpha)
    return stats


def methods_tested(run: RunData) -> list[str]:
    """The tests the score points store: the seed's two first, then symmetric CERS and the ablations."""
    ncs = "ncs-all" if any((s, "ncs-all") in run.cells for s in run.score_settings) else "ncs"
    stored = {t for (s, t) in run.cells if s in run.score_settings}
    return [t for t in ("cers", ncs, "cers-sym") if t in stored] + sorted(t for t in stored if is_ablation_test(t))


def _test_name(test: str) -> str:
    """``ncs-all@ablation=zero`` → "NCS (necessity), zero ablation"; other ids as Table 3 names them."""
    base, abl = without_ablation(test)
    return f"{TEST_NAMES.get(base, base)}, {abl} ablation" if abl else TEST_NAMES.get(test, test)


def methods_tests_table(run: RunData, tests: list[str] | None = None) -> Table | None:
    """The score points' tests (``tests``, default every one of :func:`methods_tested`) on one table."""
    tests = methods_tested(run) if tests is None else tests
    if not tests:
        return None
    per = {t: methods_tests(run, t) for t in tests}
    columns, groups = ["Score setting"], [("", 1)]
    for t in tests:
        Rs = [st.controls[CONTROL].R for st in per[t].values() if CONTROL in st.controls]
        m = max((st.controls[CONTROL].family_m for st in per[t].values() if CONTROL in st.controls), default=0)
        columns += ["S [95% CI]", f"{CONTROL} (R={max(Rs) if Rs else 0}) mean ± SD [distinct]", "z",
                    f"p (Holm over {m})", "verdict"]
        groups.append((_test_name(t), 5))
    rows, undecided = [], []
    for s in run.score_settings:
        row = [s]
        for t in tests:
            st = per[t].get(s)
            cs = st.controls.get(CONTROL) if st is not None else None
            if cs is None:
                row += [fmt_ci(st.interval, st.s) if st is not None else "–", "–", "–", "–", "–"]
                continue
            ph = fmt_p(cs.p_holm) if cs.p_holm is not None else "n/a"
            row += [fmt_ci(st.interval, st.s) + ("*" if cs.verdict == "yes" else ""), cs.summary(), fmt(cs.z, 1),
                    f"{fmt_p(cs.rank.p)} (**{ph}**)" if cs.reject else f"{fmt_p(cs.rank.p)} ({ph})", fmt_verdict(cs.verdict)]
            if cs.verdict == "cannot tell":
                undecided.append(f"{s} (floor {cs.holm_floor:.3f})")
        rows.append(row)
    note = fallback_note(run.meta, CONTROL, run.score_settings)
    title = ("Published methods vs the seed's settings: necessity and steerability" if len(tests) > 1 else
             f"Published methods vs the seed's settings: {_test_name(tests[0])}")
    return Table(title, columns, rows,
                 "Each score point's head-set S against its own layer-matched controls (same per-layer counts as S, "
                 "uniform within each layer, S excluded), as the grid's settings in Table 3. S: mean over items with "
                 "its 95% interval (NCS: Welch over the two arms). p: one-sided rank p (1 + #{controls ≥ S}) / (n + 1) over "
                 "the n distinct head-sets compared; "
                 "in parentheses Holm-adjusted over the score settings of this run (one family per test; bold ≤ 0.05; "
                 "*: verdict yes). verdict as in Table 3: yes, no, or cannot tell (the smallest adjusted p this point's n "
                 "and its family's allow is above 0.05). A score point with the same heads as a grid setting gets its "
                 "verdict in this family, the grid setting in the grid's: the same p can read differently."
                 + (f" Cannot tell: {', '.join(undecided)}." if undecided else "") + note, groups)


def methods_overlap_figure(run: RunData) -> bytes | None:
    """Heat map score settings × grid settings: colour = ``|S_p ∩ S_s| / min(|S_p|, |S_s|)``
    (1: the smaller set lies inside the other), each cell annotated with the count."""
    got = overlap_counts(run)
    if got is None:
        return None
    import matplotlib.pyplot as plt

    from vheads.report._figures import _png

    rows, cols, m = got
    size = np.array([[min(len(_heads(run, a)), len(_heads(run, b))) for b in cols] for a in rows], dtype=float)
    share = np.divide(m, size, out=np.zeros(m.shape), where=size > 0)
    fig, ax = plt.subplots(figsize=(max(3.6, 2.2 + 0.45 * len(cols)), max(2.2, 1.4 + 0.42 * len(rows))), layout="constrained")
    im = ax.imshow(share, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            ax.text(j, i, str(m[i, j]), ha="center", va="center", fontsize=8, color="white" if share[i, j] < 0.6 else "black")
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right", fontsize=8, family="monospace")
    ax.set_yticks(range(len(rows)), rows, fontsize=8, family="monospace")
    cb = fig.colorbar(im, ax=ax, shrink=0.9)
    cb.set_label("shared / smaller set", fontsize=8)
    cb.ax.tick_params(labelsize=8)
    return _png(fig)


def methods_blocks(run: RunData) -> list:
    """The section's tables and figure (empty when the run has no score settings), and a line
    per default score point left out (its selection kept no head on the run's items)."""
    left_out = [(k.split(":", 1)[1], v.get("reason", "")) for k, v in sorted(run.meta.items())
                if k.startswith("score-left-out:") and isinstance(v, dict)]
    notes: list = [f"Left out: {sid} — {why}." for sid, why in left_out]  # paragraphs
    if not run.score_settings:
        return notes
    blocks: list = notes + [t for t in (methods_overlap_table(run), sink_twins_table(run)) if t]
    png = methods_overlap_figure(run)
    if png:
        blocks.append(Figure("methods_overlap", png, "Heads each score point shares with each grid setting (number), "
                             "as a share of the smaller of the two head-sets (colour).", max_width=820))
    for test in methods_tested(run):  # one table per test: each fits the page
        blocks.append(methods_tests_table(run, [test]))
    return blocks
