"""A run's config and its store's ``meta`` rows as the report reads them: a config key under
any spelling (:func:`cfg_get`), the meta JSON-decoded, and what it records of the controls (how
each was chosen, which draws fell back) with the caption sentence that names those fallbacks.
"""

from __future__ import annotations

import json
from typing import Any

from vheads.store import Store


def cfg_get(config: Any, *names: str, default: Any = None) -> Any:
    """The first value found under any of ``names`` in a (possibly nested) config dict.

    Keys compare with ``-``, ``_`` and spaces treated alike, top level first, then
    breadth-first through nested tables, so ``n_items`` finds ``[evaluation] n-items``.
    """
    want = {_norm(n) for n in names}
    queue = [config]
    while queue:
        nxt = []
        for d in queue:
            if not isinstance(d, dict):
                continue
            for k, v in d.items():
                if _norm(k) in want:
                    return v
            nxt.extend(v for v in d.values() if isinstance(v, dict))
        queue = nxt
    return default


def _norm(key: str) -> str:
    return str(key).lower().replace("-", "_").replace(" ", "_")


def _json(value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


def control_pools(meta: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """How each control's head-sets were chosen, ``{setting: {label: {mode, pool, n, R}}}``
    (:func:`vheads.evaluation.draw_controls`; meta ``control_pools``); ``{}`` for a run from
    before wave 4, whose draws may repeat a head-set."""
    v = meta.get("control_pools")
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return {}
    return v if isinstance(v, dict) else {}


def control_fallbacks(meta: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """``setting -> control label -> fallbacks`` of every control draw of the run, from
    a run's ``meta['control_fallbacks']`` (:mod:`vheads.store`; ``meta`` as JSON-decoded
    values, like :attr:`RunData.meta`). Labels: ``layer-matched`` (the
    main draws, reused by the row groups, the β sweep and the pointing suite),
    ``layer-matched@k=K`` (a k-sweep point), ``<part>/layer-matched`` (head-set algebra; the
    setting is ``A&B``). A store of an older run recorded only the main draws, as a list per
    setting: they come back under ``layer-matched``. Any other meta key naming
    'fallback' is read the same way."""
    out: dict[str, dict[str, list[str]]] = {}
    for key, value in meta.items():
        if "fallback" not in key.lower() or not isinstance(value, (dict, list)):
            continue
        if isinstance(value, list):
            value = {"": value}
        for setting, v in value.items():
            by_label = v if isinstance(v, dict) else {"layer-matched": v}
            for label, fbs in by_label.items():
                items = [str(x) for x in (fbs if isinstance(fbs, list) else [fbs]) if x not in (None, "")]
                if items:
                    out.setdefault(str(setting), {}).setdefault(str(label), []).extend(items)
    return out


def store_meta(store: Store) -> dict[str, Any]:
    """A store's ``meta`` rows, JSON-decoded (as :attr:`RunData.meta`)."""
    return {k: _json(v) for k, v in store.query("SELECT key, value FROM meta")}


def fallback_note(meta: dict[str, Any], labels, settings=None) -> str:
    """A caption sentence naming, by setting, the control draws of ``labels`` (a label, a
    list of labels, or a predicate on a label) that fell back, so do not keep S's per-layer
    counts; '' if none. ``settings``: only these settings (default: all)."""
    match = labels if callable(labels) else (lambda lab, want=tuple([labels] if isinstance(labels, str) else labels): lab in want)
    hits = [f"{s} ({label})" for s, by in control_fallbacks(meta).items() if settings is None or s in settings
            for label in by if match(label)]
    if not hits:
        return ""
    return (f" Layer-matched fallback (S fills a layer, so those draws borrow heads from nearby layers and do not keep "
            f"S's per-layer counts; see the protocol section): {', '.join(hits)}.")
