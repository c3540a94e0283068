"""The study's sequential controls: Besag & Clifford's rank p (:mod:`vheads.evaluation._sequential`)
wired into the evaluation stage.

With ``controls_h = h ≥ 1`` (the default), every *exchangeable* random control of a setting
(``layer-matched``, ``any-layer``, ``random-n`` of |S| heads: :func:`vheads.evaluation.is_exchangeable`)
runs in rounds of ``controls_batch`` draws, in draw order; its ``[controls]`` R is R_max:

- round 0 of a (setting, test) runs S, every other control whole (attention-matched, sinks,
  …, the k sweep's and the head-set algebra's own draws) and draws ``[0, b)`` of each
  exchangeable control — the unit ``eval/<setting>/<test>/<lo>-<hi>`` of a fixed-R study;
- round r ≥ 1 runs draws ``[r·b, (r+1)·b)`` of each exchangeable control that is still
  *undecided* for that (setting, test) — units ``eval/<setting>/<test>/<lo>-<hi>/r<r>``.

A control is undecided while, in some *cell* of its (setting, test) — each stored test id
the unit writes (``cers`` and ``cers-sym``; ``ncs-<group>`` and ``ncs-<group>@ablation=A``;
…) under each metric (p4, logprob, logit-diff) — fewer than h of its draws ``[0, r·b)``
reach T_S and fewer than R_max draws ran. The statistic is the report's: a head-set's mean
over items of its stored per-item outcomes (:mod:`vheads.report._data`). Round r's units are
a function of the draws of rounds < r alone (read back from the store), so a resumed run
plans the same units, and a unit stays idempotent. R_max of a control for a setting is the
number of its draws (R, or the whole pool when it holds at most 2R, or fewer where the pool
is smaller).

After the last round, :func:`record_stops` writes the store's meta ``sequential_stops``:
where each comparison (setting, test id, metric, control) stopped, how many draws ran and
its p. ``controls_h = 0`` runs every control whole in round 0, as before.
"""

from __future__ import annotations


import json
from collections import defaultdict

from vheads._ids import BETA_SWEEP_GLOB, K_SWEEP_GLOB, control_label, parse_headset_id
from vheads.evaluation import METRICS, is_exchangeable, sequential_params

#: the meta key of where each comparison stopped (:func:`record_stops`)
STOPS_META = "sequential_stops"
_COLUMNS = {"p4": "value", "logprob": "logprob", "logit-diff": "logit_diff"}  # vheads.store.METRIC_COLUMNS


def sequential_controls(cfg) -> list[str]:
    """The ``[controls]`` names of ``cfg`` compared sequentially (``controls_h ≥ 1``): the
    exchangeable ones (a ``random-n@N`` is checked against |S| per setting when it runs)."""
    if not cfg.controls_h:
        return []
    return [name for name in cfg.controls if is_exchangeable(control_label(name))]



def setting_draws(store, cfg) -> dict[str, dict[str, list[str]]]:
    """``setting -> label -> head-set ids in draw order`` of every sequential control of every
    (non-algebra) setting; a random-n whose head count is not |S| is left out (descriptive)."""
    labels = {control_label(n) for n in sequential_controls(cfg)}
    if not labels:
        return {}
    sizes = {sid: len(json.loads(h)) for sid, h in store.query("SELECT setting, heads FROM headsets WHERE control='S'")}
    out: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for sid, hid, control in store.query("SELECT setting, headset_id, control FROM headsets WHERE setting NOT LIKE '%&%' "
                                         "ORDER BY setting, control, draw"):
        if control in labels and is_exchangeable(control, [None] * sizes.get(sid, 0)):
            out[sid].setdefault(control, []).append(hid)
    return dict(out)


def test_R(cfg, setting: str, test: str, label: str, pools: dict | None = None) -> int | None:
    """How many of the draws stored under ``label`` ``test`` compares for ``setting``: its R
    there (its scope's ``[test_controls]``, else ``[controls]``) where that is fewer than the
    setting drew for its other tests; None (all of them) otherwise, for a label that is no
    ``[controls]`` entry, and where the whole pool was drawn and holds at most 2R (a test of
    that R alone would compare it whole too). ``pools``: the store's meta ``control_pools``."""
    c = cfg.for_setting(setting)
    for name in c.controls:
        if control_label(name) == label:
            R = c.control_R(test, name)
            if R >= c.drawn_R(name):
                return None
            rec = (pools or {}).get(setting, {}).get(label, {})
            if rec.get("mode") == "exact" and isinstance(rec.get("pool"), int) and rec["pool"] <= 2 * R:
                return None
            return R
    return None


def store_pools(store) -> dict:
    """The store's meta ``control_pools`` (how each setting's draws were chosen), or {}."""
    raw = store.get_meta("control_pools")
    return json.loads(raw) if raw else {}


def test_ids(cfg, setting: str, test: str, ids: list[str], pools: dict | None = None) -> list[str]:
    """``ids`` less the draws ``test`` does not compare: a ``[controls]`` entry's draws past its
    R in that test (``[test_controls]``; a setting draws the most any of its tests compares)."""
    caps: dict[str, int | None] = {}
    out = []
    for h in ids:
        hid = parse_headset_id(h)
        if hid.draw is None or hid.is_s:
            out.append(h)
            continue
        if hid.label not in caps:
            caps[hid.label] = test_R(cfg, setting, test, hid.label, pools)
        if caps[hid.label] is None or hid.draw < caps[hid.label]:
            out.append(h)
    return out


def unit_test(unit_id: str, setting: str) -> str | None:
    """The test of an evaluation unit ``eval/<setting>/<test>/<lo>-<hi>[/r<round>]`` (None otherwise)."""
    head = f"eval/{setting}/"
    return unit_id[len(head):].split("/")[0] if unit_id.startswith(head) else None


def cell_means(store, settings) -> dict[tuple[str, str], dict[tuple[str, str], dict[str, float]]]:
    """``(setting, unit test) -> (test id, metric) -> head-set id -> T`` (the mean over items of
    its finite stored outcomes, as the report takes it) for the main head-sets of ``settings``."""
    want = set(settings)
    finite = "abs({c}) < 1e308"
    aggs = ", ".join(f"AVG(CASE WHEN {finite.format(c=c)} THEN {c} END)" for c in _COLUMNS.values())
    out: dict = defaultdict(lambda: defaultdict(dict))
    for setting, test, hid, uid, *means in store.query(
            f"SELECT setting, test, headset_id, MIN(unit_id), {aggs} FROM outcomes WHERE setting NOT LIKE '%&%' "
            f"AND test NOT GLOB '{BETA_SWEEP_GLOB}' AND headset_id NOT GLOB '{K_SWEEP_GLOB}' GROUP BY setting, test, headset_id"):
        if setting not in want:
            continue
        ut = unit_test(uid, setting)
        if ut is None:
            continue
        for metric, mean in zip(_COLUMNS, means):
            if mean is not None and metric in METRICS:
                out[(setting, ut)][(test, metric)][hid] = float(mean)
    return out


def comparisons(store, cfg, upto: int | None = None, draws: dict | None = None) -> list[dict]:
    """Every sequential comparison (setting, unit test, test id, metric, control) over the draws
    ``[0, upto)`` (default: every draw stored), with its p (:func:`vheads.evaluation.control_rank_p`)
    and ``decided``: h draws reached T_S, or R_max (every draw of the control) compared."""
    from vheads.evaluation import control_rank_p

    draws = setting_draws(store, cfg) if draws is None else draws
    pools = store_pools(store) if (cfg.test_controls or any("test_controls" in sc for sc in cfg.scope)) else {}
    rows, seqs = [], []
    for (setting, ut), cells in sorted(cell_means(store, draws).items()):
        for (test, metric), by_id in sorted(cells.items()):
            t_s = by_id.get("S")
            if t_s is None:
                continue
            for label, ids in sorted(draws[setting].items()):
                R_max = min(len(ids), test_R(cfg, setting, ut, label, pools) or len(ids))  # this test's R
                seen = ids[:R_max if upto is None else min(upto, R_max)]
                t = [by_id[h] for h in seen if h in by_id]
                if not t:  # this control is not run in this cell (a row group's controls)
                    continue
                rp = control_rank_p(t_s, t, cfg.controls_h, R_max)
                decided = rp.stopped == "h" or len(t) >= R_max  # draws that ran: a settled cell's stop fewer
                rows.append({"setting": setting, "unit_test": ut, "test": test, "metric": metric, "control": label,
                             **rp.to_dict(), "decided": decided})
                seqs.append((t_s, t, R_max))
    if cfg.controls_h:
        _settle(store, cfg, rows, seqs)
    return rows


def holm_groups(store, rows: list[dict]) -> dict[tuple, list[int]]:
    """Comparisons (indices into ``rows``) that the report adjusts in one Holm family, or in
    families that hold them all: per (test id, metric, control), the grid settings (every
    setting but the score points and the causal setting: :func:`vheads.report._tables.holm_family`);
    the score points against ``layer-matched`` (:func:`vheads.report._methods.methods_tests`);
    any other comparison on its own (read unadjusted, or in a family the report may draw
    smaller)."""
    from vheads.causal import CAUSAL_SETTING

    scored = {sid for (sid,) in store.query("SELECT setting FROM discovery WHERE source = 'score'")}
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, c in enumerate(rows):
        if c["setting"] == CAUSAL_SETTING or (c["setting"] in scored and c["control"] != "layer-matched"):
            kind = ("alone", c["setting"], c["unit_test"])
        else:
            kind = ("score" if c["setting"] in scored else "grid",)
        groups[(*kind, c["test"], c["metric"], c["control"])].append(i)
    return dict(groups)


def _settle(store, cfg, rows: list[dict], seqs: list[tuple]) -> None:
    """Stop the open comparisons whose Holm verdict is settled (no, whatever their remaining
    draws: :func:`vheads.evaluation.settled_no` over each :func:`holm_groups` family, open
    members at their least possible p); such a comparison's p is the largest it could still
    have become (``stopped`` ``"decided"``, :func:`vheads.evaluation.control_rank_p`)."""
    from vheads.evaluation import control_rank_p, p_bounds, settled_no

    h = cfg.controls_h
    for members in holm_groups(store, rows).values():
        if all(rows[i]["decided"] for i in members):
            continue
        lo = [rows[i]["p"] if rows[i]["decided"] else p_bounds(seqs[i][0], seqs[i][1], h, seqs[i][2])[0] for i in members]
        for i, no in zip(members, settled_no(lo)):
            if no and not rows[i]["decided"]:
                t_s, t, R_max = seqs[i]
                rows[i].update(control_rank_p(t_s, t, h, R_max, settled=True).to_dict(), decided=True)


def round_plan(store, cfg, rnd: int, draws: dict | None = None) -> dict[tuple[str, str], tuple[list[str], set[str]]]:
    """``(setting, unit test) -> (head-set ids, undecided test ids)`` of round ``rnd ≥ 1``: the
    next batch of each control still undecided in some cell of that (setting, unit test), and
    the stored test ids (``ncs-image``, ``ncs-all@ablation=zero``, …) with an undecided cell.
    A unit runs only those test ids' forwards (NCS: its row groups and ablations); a cell's p
    reads its own draws in draw order, so what another cell stops at leaves it valid."""
    b = cfg.controls_batch
    lo, hi = rnd * b, (rnd + 1) * b
    undecided: dict[tuple[str, str], set[str]] = defaultdict(set)
    tests: dict[tuple[str, str], set[str]] = defaultdict(set)
    draws = setting_draws(store, cfg) if draws is None else draws  # read once a round
    pools = store_pools(store) if (cfg.test_controls or any("test_controls" in sc for sc in cfg.scope)) else {}
    for c in comparisons(store, cfg, upto=lo, draws=draws):
        if not c["decided"]:
            undecided[(c["setting"], c["unit_test"])].add(c["control"])
            tests[(c["setting"], c["unit_test"])].add(c["test"])
    out = {}
    for (setting, ut), labels in sorted(undecided.items()):
        ids = [h for label in sorted(labels)
               for h in draws[setting][label][:test_R(cfg, setting, ut, label, pools) or None][lo:hi]]
        if ids:
            out[(setting, ut)] = (ids, tests[(setting, ut)])
    return out


def record_stops(store, cfg) -> None:
    """Write the meta ``sequential_stops``: ``{"h", "batch", "comparisons": [...]}``, one entry
    per (setting, test id, metric, control) with L (``compared``), the draws that ran, R_max,
    the stop reason (``h`` | ``R_max`` | ``all``) and p."""
    rows = [{k: v for k, v in c.items() if k != "decided"} for c in comparisons(store, cfg)]
    store.set_meta(**{STOPS_META: json.dumps({"h": cfg.controls_h, "batch": cfg.controls_batch, "comparisons": rows})})
