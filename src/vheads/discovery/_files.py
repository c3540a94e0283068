"""Head-set files: one JSON per discovered head-set, with its provenance.

Schema ``vheads.headset/1`` (all keys required unless marked optional)::

    {
      "schema": "vheads.headset/1",
      "vheads_version": "0.1.0",
      "setting":   {"id": "cm-ref-qsp", "corpus": "comics", "corpus_abbrev": "cm",
                    "query": "referring", "source": "qspan"},
                   # or a score point (vheads discover --score): "source": "score" and
                   # "score": {"name": "vrh", "rows": "out", "region": "target", "norm": "raw",
                   #           "keys": "mass", "across": "mean", "select": "flat", "k": 20}
      "model":     {"id": "tiny", "revision": null, "fingerprint": "sha256:…",
                    "n_layers": 4, "n_heads": 8,
                    "path": "/abs/folder",           # optional: a local folder, resolved
                    "attention_layers": [1, 3]},     # optional: hybrid models only
      "corpus":    {"id": "synthetic:comics", "n_items": 64, "seed": 0},
      "seed": 0,
      "selection": {"mode": "flat" | "per-layer", "k": 3},   # a score point: its select rule
                                                                # (also elbow, entropy)
      "heads":       [[layer, head], …],     # by descending score, ties by (layer, head)
      "head_scores": [s, …],                 # s[l,h] of each head, same order
      "scores":      [[s[0,0], …], …],       # the full [L, H] discovery score
      "per_item_file": "cm-ref-qsp.items.npz" | null,  # optional: per-item mass [N, L, H]
      "sinks": {"layer": 2, "factor": 10.0, "rule": "…", "n_items_with_sinks": 1, "n_dropped": 1,
                "items": [{"item": "…", "threshold": 41.3, "dropped": [17]}, …]}
                 # optional: a score point with sinks "drop" (its score record then also has
                 # "sinks": "drop", "sink_layer", "sink_factor"); "dropped" indexes the item's
                 # image tokens in position order
    }

The same structure is shipped as a JSON Schema, ``vheads/schemas/headset.schema.json``
(see :mod:`vheads.discovery._schema`); files are checked against it on write and read.

Floats are written with Python's shortest round-trip repr, so a file read back gives the
same float64 scores bit for bit; no timestamps, so the same run writes the same bytes.
Every write is atomic (temp file in the same folder + ``os.replace``): a failure never
leaves a partial file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import vheads
from vheads._errors import VheadsError, check_output_path
from vheads._io import atomic_write, read_json
from vheads.discovery._schema import validate_headset_json
from vheads.discovery._selection import MODES, ranked_heads
from vheads.discovery._source_setting import Setting
from vheads._headset import HeadSet

SCHEMA = "vheads.headset/1"


@dataclass
class HeadSetRecord:
    """A discovered head-set with everything needed to trust and reuse it."""

    headset: HeadSet
    setting: Setting  # or a vheads.discovery._point_setting.ScoreSetting (a score point's head-set)
    scores: np.ndarray  # [L, H] float64
    model: dict[str, Any]  # id, revision, fingerprint, n_layers, n_heads; a local folder's resolved path (LoadedModel.record)
    corpus: dict[str, Any]  # id, n_items, seed
    seed: int
    k: int
    mode: str
    vheads_version: str = vheads.__version__
    per_item_file: str | None = None
    path: Path | None = None  # where it was read from / written to
    #: a score point that drops sinks: its rule and, per item, the threshold and the image
    #: tokens dropped (:func:`vheads.discovery._score_space.sink_record`); None otherwise
    sinks: dict[str, Any] | None = None

    @property
    def ranked(self) -> list[tuple[int, int]]:
        return ranked_heads(self.scores, self.headset)

    def to_dict(self) -> dict[str, Any]:
        ranked = self.ranked
        return {
            "schema": SCHEMA,
            "vheads_version": self.vheads_version,
            "setting": self.setting.to_dict(),
            "model": dict(self.model),
            "corpus": dict(self.corpus),
            "seed": int(self.seed),
            "selection": {"mode": self.mode, "k": int(self.k)},
            "heads": [[int(l), int(h)] for l, h in ranked],
            "head_scores": [float(self.scores[l, h]) for l, h in ranked],
            "scores": [[float(v) for v in row] for row in self.scores],
            "per_item_file": self.per_item_file,
            **({"sinks": self.sinks} if self.sinks is not None else {}),
        }


def save_headset(record: HeadSetRecord, path: str | Path) -> Path:
    """Write ``record`` as a ``vheads.headset/1`` JSON file (atomically; validated first)."""
    _validate(record.to_dict(), "the record to write")
    text = _dumps(record.to_dict())
    out = atomic_write(Path(path), lambda fh: fh.write(text))
    record.path = out
    return out


def save_headset_dict(d: dict[str, Any], path: str | Path) -> Path:
    """Write a head-set file from its dict (the layout of :meth:`HeadSetRecord.to_dict`),
    atomically, checked first against the shipped JSON Schema and the heads' range: what the
    report writes from a run's results store (``RUN/headsets/<setting>.json``). The reader,
    :func:`load_headset`, runs every check of :func:`save_headset` on it; this writer skips
    only the score axes' check, which loads torch (the report never does)."""
    validate_headset_json(d, "the head-set to write")
    m = d["model"]
    HeadSet(d["heads"], m["n_layers"], m["n_heads"], m.get("attention_layers"))  # range, duplicate and layer checks
    if len(d["heads"]) != len(d["head_scores"]):
        raise ValueError(f"the head-set to write has {len(d['heads'])} heads but {len(d['head_scores'])} head scores")
    text = _dumps(d)
    return atomic_write(Path(path), lambda fh: fh.write(text))


def _dumps(d: dict[str, Any]) -> str:
    """One line per key (the score matrix one line per layer): readable and diffable."""
    lines = []
    for key, v in d.items():
        if key == "scores":
            rows = ",\n  ".join(json.dumps(r, allow_nan=False) for r in v)
            lines.append(f' "{key}": [\n  {rows}\n ]')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(v, allow_nan=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def save_per_item(path: str | Path, per_item: np.ndarray, item_ids: list[str], fingerprint: str) -> Path:
    """Per-item region mass ``[N, L, H]`` (for noise ceilings) as ``.npz``, atomically."""
    arr = np.asarray(per_item, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[0] != len(item_ids):
        raise ValueError(f"per-item scores must be [N, L, H] with N = {len(item_ids)} item ids, got {arr.shape}")
    return atomic_write(
        Path(path),
        lambda fh: np.savez(fh, per_item=arr, item_ids=np.array(item_ids, dtype=str), fingerprint=np.array(fingerprint)),
        mode="wb",
    )


def load_per_item(record: HeadSetRecord, with_ids: bool = False):
    """The per-item mass ``[N, L, H]`` saved next to a head-set file (and, with
    ``with_ids``, the item ids of its rows: ``(per_item, ids)``)."""
    if not record.per_item_file or record.path is None:
        raise ValueError(
            f"head-set {record.setting.id} has no per-item scores file; re-run `vheads discover` to get one "
            "(noise ceilings need the per-item region mass)"
        )
    p = record.path.parent / record.per_item_file
    if not p.exists():
        raise FileNotFoundError(f"per-item scores {p} named by head-set file {record.path} is missing")
    with np.load(p) as z:
        arr = z["per_item"]
        fp = str(z["fingerprint"])
        ids = [str(i) for i in z["item_ids"]] if "item_ids" in z else None
    if fp != record.model.get("fingerprint"):
        raise ValueError(f"per-item scores {p} are from model {fp}, the head-set from {record.model.get('fingerprint')}")
    L, H = record.scores.shape
    if arr.ndim != 3 or arr.shape[1:] != (L, H) or arr.shape[0] != record.corpus.get("n_items"):
        raise ValueError(f"per-item scores {p} have shape {arr.shape}; the head-set needs [{record.corpus.get('n_items')}, {L}, {H}]")
    return (arr, ids) if with_ids else arr


def _validate(d: dict[str, Any], where: str) -> None:
    if not isinstance(d, dict):
        raise ValueError(f"{where}: a head-set file holds a JSON object, got {type(d).__name__}")
    schema = d.get("schema")
    if schema != SCHEMA:
        raise ValueError(f"{where}: schema {schema!r} is not {SCHEMA!r} (not a vheads head-set file, or another version)")
    validate_headset_json(d, where)  # the shipped JSON Schema (vheads/schemas/headset.schema.json)
    missing = [k for k in ("setting", "model", "corpus", "seed", "selection", "heads", "head_scores", "scores") if k not in d]
    if missing:
        raise ValueError(f"{where}: missing keys {missing}")
    for k in ("id", "fingerprint", "n_layers", "n_heads"):
        if k not in d["model"]:
            raise ValueError(f"{where}: model record lacks {k!r}")
    scores = np.asarray(d["scores"], dtype=float)
    L, H = d["model"]["n_layers"], d["model"]["n_heads"]
    if scores.shape != (L, H):
        raise ValueError(f"{where}: scores have shape {scores.shape}, the model record says {L} x {H}")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"{where}: scores hold non-finite values")
    from vheads.discovery._score_space import AXES  # loads torch: only once a file is read

    modes = AXES["select"] if d["setting"].get("source") == "score" else MODES  # a score point's own rule
    if d["selection"].get("mode") not in modes:
        raise ValueError(f"{where}: selection mode {d['selection'].get('mode')!r} is not one of {modes}")
    if d["setting"].get("source") == "score" and d["selection"]["mode"] != d["setting"]["score"].get("select"):
        raise ValueError(f"{where}: selection mode {d['selection']['mode']!r} is not the score point's select "
                         f"{d['setting']['score'].get('select')!r}")
    if len(d["heads"]) != len(d["head_scores"]):
        raise ValueError(f"{where}: {len(d['heads'])} heads but {len(d['head_scores'])} head scores")
    HeadSet(d["heads"], L, H, d["model"].get("attention_layers"))  # range, duplicate and layer checks


def load_headset(path: str | Path, lm=None, force: bool = False) -> HeadSetRecord:
    """Read a head-set file. With ``lm`` (a :class:`~vheads.models.LoadedModel`), refuse a
    head-set discovered on another model (different fingerprint) unless ``force``; a
    head-set for another model *shape* is refused even when forced."""
    path = Path(path)
    d = read_json(path, f"head-set file {path}")
    from vheads.discovery._point_setting import setting_from_dict  # loads torch: only once the file is read

    try:
        _validate(d, f"head-set file {path}")
        m = d["model"]
        hs = HeadSet(d["heads"], m["n_layers"], m["n_heads"], m.get("attention_layers"))
        rec = HeadSetRecord(
            headset=hs, setting=setting_from_dict(d["setting"]), scores=np.asarray(d["scores"], dtype=np.float64),
            model=m, corpus=d["corpus"], seed=d["seed"], k=d["selection"]["k"], mode=d["selection"]["mode"],
            vheads_version=d.get("vheads_version", "?"), per_item_file=d.get("per_item_file"), path=path,
            sinks=d.get("sinks"),
        )
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # a hand-edited or foreign file
        msg = str(e) if isinstance(e, ValueError) else f"malformed ({type(e).__name__} {e})"
        raise VheadsError(msg if str(path) in msg else f"head-set file {path}: {msg}") from None
    if lm is not None:
        check_model(rec, lm, force)
    return rec


def check_model(rec: HeadSetRecord, lm, force: bool = False) -> None:
    """Raise ``ValueError`` if ``rec`` was discovered on another model than ``lm``."""
    hs_fp, lm_fp = rec.model["fingerprint"], lm.fingerprint
    where = f" ({rec.path})" if rec.path else ""
    if (rec.model["n_layers"], rec.model["n_heads"]) != (lm.n_layers, lm.n_heads):
        raise ValueError(
            f"head-set {rec.setting.id}{where} is for a model with {rec.model['n_layers']} layers x "
            f"{rec.model['n_heads']} heads ({hs_fp}); {lm.model_id} has {lm.n_layers} x {lm.n_heads} ({lm_fp}): "
            "it cannot be used even with force"
        )
    if hs_fp != lm_fp and not force:
        raise ValueError(
            f"head-set {rec.setting.id}{where} was discovered on model {rec.model['id']} ({hs_fp}), not on "
            f"{lm.model_id} ({lm_fp}); discover heads on this model, or pass force=True / --force to use it anyway"
        )


def model_to_load(rec: HeadSetRecord) -> tuple[str, str | None]:
    """``(model, revision)`` that loads the model ``rec`` was discovered on, from any working
    folder: ``tiny``; a local folder by its recorded resolved ``path`` (else its ``id``, when
    that is a folder from here); a hub id with its revision. A local folder that is found
    nowhere is refused in one line (never tried on the hub: its fingerprint says it was a
    folder). Whether what loads is the same model is checked by its fingerprint
    (:func:`check_model`)."""
    m = rec.model
    mid, path, fp = str(m["id"]), m.get("path"), str(m.get("fingerprint", ""))
    if mid == "tiny":
        return "tiny", None
    for cand in (path, mid):
        if cand and Path(cand).is_dir():
            return str(cand), None
    if path is not None or fp.startswith("sha256:"):
        where = f"{path!r} (given as {mid!r})" if path and path != mid else repr(path or mid)
        raise VheadsError(f"head-set file {rec.path}: its model, the local folder {where}, is not found from "
                          f"{Path.cwd()}; pass --model FOLDER (the folder's weights must match fingerprint {fp})")
    return mid, m.get("revision")


def read_head_list(path: str | Path) -> list[tuple[int, int]] | None:
    """The heads of a plain head-list file, or None for a ``vheads.headset/1`` file.

    A head list is what an interpretability notebook has: ``[[1, 0], [2, 3]]`` (a JSON list
    of ``[layer, head]`` pairs, e.g. ``json.dump([(1, 0), (2, 3)], f)``) or
    ``{"heads": [[1, 0], [2, 3]]}`` (an object without a ``schema`` key). Its heads are
    checked against the model once it is loaded (:func:`load_headset_files`)."""
    path = Path(path)
    d = read_json(path, f"head-set file {path}")
    if isinstance(d, dict) and ("schema" in d or {"setting", "scores", "selection"} & d.keys()):
        return None  # a vheads.headset/1 file (a damaged one is load_headset's to explain)
    heads = d.get("heads") if isinstance(d, dict) else d
    if isinstance(heads, list) and not heads:
        raise VheadsError(f"head-set file {path} holds an empty head list; list at least one [layer, head] pair")
    if not isinstance(heads, list):
        raise VheadsError(f"head-set file {path}: expected a vheads.headset/1 file (a JSON object), a JSON list of "
                          f'[layer, head] pairs, or {{"heads": [[layer, head], ...]}}; got {repr(d)[:60]}')
    return [check_head_pair(h, f"head-set file {path}: head {i}") for i, h in enumerate(heads)]


def check_head_pair(h: object, where: str) -> tuple[int, int]:
    """A ``[layer, head]`` pair of non-negative integers (the range is the model's to check)."""
    if not (isinstance(h, (list, tuple)) and len(h) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in h)):
        raise VheadsError(f"{where} is {h!r}; a head is [layer, head], two integers from 0 (0-based, as transformers counts layers)")
    return int(h[0]), int(h[1])


def parse_heads(text: str, flag: str = "--heads") -> list[tuple[int, int]]:
    """``"L1H0,L2H3"`` (also ``1:0,2:3``) as ``[(1, 0), (2, 3)]``; 0-based, as the head-set
    files and transformers count."""
    import re

    heads = []
    for part in [p.strip() for p in str(text).split(",") if p.strip()]:
        m = re.fullmatch(r"[Ll](\d+)[Hh](\d+)|(\d+):(\d+)", part)
        if m is None:
            raise VheadsError(f"{flag} {text!r}: {part!r} is not a head; write L<layer>H<head> pairs, comma-separated "
                              "and 0-based, e.g. L1H0,L2H3")
        a, b = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
        heads.append((int(a), int(b)))
    if not heads:
        raise VheadsError(f"{flag} {text!r} names no head; write L<layer>H<head> pairs, e.g. L1H0,L2H3")
    return heads


def load_headset_files(paths: list[str | Path], lm, force: bool = False,
                       heads: dict[str, list[tuple[int, int]]] | None = None) -> dict[str, HeadSet]:
    """Read head-set files for ``lm`` as ``{setting id: HeadSet}`` (another model's files are
    refused unless ``force``; a second file of the same setting is keyed by its file stem).
    A plain head-list file (:func:`read_head_list`) is keyed by its file stem; ``heads``
    (``{name: [(layer, head), ...]}``, e.g. from ``--heads``) are added as given. Both are
    checked against ``lm``'s layers and heads."""
    out = {}
    for p in paths:
        pairs = read_head_list(p)
        if pairs is not None:
            out[_unique(Path(p).stem, out)] = _model_heads(pairs, lm, f"head-set file {p}")
            continue
        rec = load_headset(p, lm=lm, force=force)
        out[rec.setting.id if rec.setting.id not in out else Path(p).stem] = rec.headset
    for name, pairs in (heads or {}).items():
        out[_unique(name, out)] = _model_heads(pairs, lm, name)
    return out


def _unique(name: str, taken: dict) -> str:
    i, key = 2, name
    while key in taken:
        key, i = f"{name}-{i}", i + 1
    return key


def _model_heads(pairs, lm, where: str) -> HeadSet:
    try:
        return HeadSet(pairs, lm.n_layers, lm.n_heads, lm.attention_layers)
    except ValueError as e:
        raise VheadsError(f"{where}: {e}") from None


def ids_hash(items) -> str:
    """A corpus's item ids as one hash (a head-set file's ``corpus.item_ids``)."""
    return "sha256:" + hashlib.sha256("\n".join(it.id for it in items).encode()).hexdigest()[:16]


def check_out_folder(out: str | Path, force: bool = False) -> Path:
    """``out`` may receive head-set files: not a file, and (unless ``force``) holding no
    head-set files (``*.json``, ``*.items.npz``) of another run. Checked before any work."""
    out = check_output_path(Path(out))
    if out.exists() and not out.is_dir():
        raise VheadsError(f"--out {out} is a file, not a folder; pass a folder for the head-set files")
    if out.is_dir() and not force:
        old = sorted(p.name for p in out.iterdir() if p.name.endswith((".json", ".items.npz")))
        if old:
            raise VheadsError(f"--out {out} already holds head-set files ({', '.join(old[:3])}{' …' if len(old) > 3 else ''}); "
                              "choose a new folder, or pass --force to overwrite them")
    return out
