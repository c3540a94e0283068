"""Each setting's heads as text, and as head-set files in the run folder.

:func:`write_headset_files` writes every discovered setting's S (the grid's and the score
points') as a ``vheads.headset/1`` file, ``<out>/headsets/<setting>.json``, from the results
store alone (:func:`vheads.discovery.save_headset_dict`): the discovery scores, k, the
corpus and the model as the run recorded them, so ``vheads evaluate --headset`` can test the
heads again. A setting id is read from the store: it becomes a file name only when it matches
:data:`SAFE_ID` (lower-case letters, digits, ``-``, ``_``, ``+``; no path separator, no dot),
and the path is checked to lie inside the folder. The causal setting is not a discovery
setting (no corpus, no query type) and gets no file, nor does a score point whose axes the
store lacks; their heads are listed in the report.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from vheads._errors import path_inside
from vheads.report._data import RunData, cfg_get

#: a setting id that may name a file: the grid's ``cm-ord-qsp`` and the score points' ``cm-ord-gaze_nosink``
SAFE_ID = re.compile(r"[a-z0-9][a-z0-9_+-]{0,95}")
HEADSET_DIR = "headsets"
#: the score axes of a head-set file's ``setting.score`` (vheads/schemas/headset.schema.json)
_SCORE_KEYS = ("name", "rows", "region", "norm", "keys", "across", "select", "k", "sinks", "sink_layer", "sink_factor")


def ranked_heads(run: RunData, setting: str) -> list[tuple[int, int]]:
    """S's heads by descending discovery score, ties by (layer, head) (as a head-set file
    lists them); the causal setting's in the order the store holds them."""
    d = run.discovery.get(setting)
    if d and d["headset"]:
        heads = [tuple(int(x) for x in h) for h in d["headset"]]
        scores = d.get("scores")
        if scores is not None and getattr(scores, "ndim", 0) == 2:
            return sorted(heads, key=lambda lh: (-float(scores[lh]), lh))
        return sorted(heads)
    key = run.heads_of.get((setting, "S"))
    return [tuple(int(x) for x in h) for h in json.loads(key)] if key else []


def heads_text(heads: list[tuple[int, int]]) -> str:
    """``L1H3, L2H5, …``."""
    return ", ".join(f"L{l}H{h}" for l, h in heads)


def headset_file_name(run: RunData, setting: str) -> str | None:
    """``<setting>.json`` for a discovered setting whose id is a safe file name, else None."""
    d = run.discovery.get(setting)
    if not d or not d["headset"] or not SAFE_ID.fullmatch(setting) or d.get("scores") is None:
        return None
    if d["source"] == "score" and not all(k in run.score_points.get(setting, {}) for k in _SCORE_KEYS[1:7]):
        return None  # a score point whose axes the run did not record: no valid file can be written
    return f"{setting}.json"


def headset_dict(run: RunData, setting: str) -> dict:
    """The ``vheads.headset/1`` record of ``setting``'s S, from the store."""
    import vheads
    from vheads.discovery import SCHEMA

    d = run.discovery[setting]
    scores = np.asarray(d["scores"], dtype=float)
    heads = ranked_heads(run, setting)
    L, H = scores.shape
    corpus_abbrev = setting.split("-", 1)[0]
    point = run.score_points.get(setting) if d["source"] == "score" else None
    if point is not None:
        record = {"id": setting, "corpus": d["corpus"], "corpus_abbrev": corpus_abbrev, "query": d["query"],
                  "source": "score", "score": {k: point[k] for k in _SCORE_KEYS if k in point}}
        record["score"].setdefault("name", setting.split("-", 2)[-1])
        record["score"].setdefault("k", None)
        mode = record["score"].get("select", "flat")
    else:
        record = {"id": setting, "corpus": d["corpus"], "corpus_abbrev": corpus_abbrev, "query": d["query"],
                  "source": d["source"]}
        mode = cfg_get(run.config, "selection", default="flat")
        mode = mode if mode in ("flat", "per-layer") else "flat"
    model = {"id": run.model_id, "revision": cfg_get(run.config, "revision") or None,
             "fingerprint": str(run.meta.get("model_fingerprint") or "unrecorded (a run from before vheads recorded it)"),
             "n_layers": int(L), "n_heads": int(H)}
    if run.attention_layers is not None and len(run.attention_layers) < L:
        model["attention_layers"] = run.attention_layers
    seed = cfg_get(run.config, "seed", default=0)
    seed = seed if isinstance(seed, int) else 0
    k = d.get("k")
    return {
        "schema": SCHEMA, "vheads_version": str(run.meta.get("vheads_version") or vheads.__version__),
        "setting": record, "model": model,
        "corpus": {"id": str(d["corpus"]), "n_items": int(d["n_items"] or 0), "seed": seed},
        "seed": seed,
        "selection": {"mode": mode, "k": int(k) if isinstance(k, int) and k >= 1 else len(heads)},
        "heads": [[int(l), int(h)] for l, h in heads],
        "head_scores": [float(scores[l, h]) for l, h in heads],
        "scores": [[float(v) for v in row] for row in scores],
        "per_item_file": None,
    }


def write_headset_files(run: RunData, out: str | Path) -> list[Path]:
    """Write ``out/headsets/<setting>.json`` for every discovered setting with a safe id
    (see the module docstring); returns the paths written."""
    from vheads.discovery import save_headset_dict

    written = []
    for s in [*run.settings, *run.score_settings]:
        name = headset_file_name(run, s)
        if name is None:
            continue
        folder = path_inside(out, HEADSET_DIR)
        folder.mkdir(exist_ok=True)
        written.append(save_headset_dict(headset_dict(run, s), path_inside(folder, name)))
    return written
