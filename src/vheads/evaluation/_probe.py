"""Option-letter probabilities of many head-sets on many items, batched through the engine.

Every test of DESIGN.md reduces to: for an item and a list of head-sets, run one action
(mask some keys, or steer onto a region) at a row group, and read the four option letters
at the last prompt position. One such request is a :class:`Probe`; a test hands all of
its probes (every item, every action, the baselines) to :func:`run_scores` at once, which
gives per row the four letters' logits and the log-sum-exp over the vocabulary (every
metric of an outcome follows from them, :func:`vheads.evaluation.outcome_metrics`);
:func:`run_probes` gives P renormalised over the four letters.
Head-sets share a forward (batch row = head-set), rows of different items share a
forward (cross-item batching), and the prefix before the first acted-on row is computed
once per item when the row group allows it (``question`` and ``last``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from vheads.engine import Engine, Intervention, RowBatch, mask_keys, pack, positions_mask, row_mask, steer_keys
from vheads.engine import RoleMeans, can_split, first_biased_key, split_on_oom
from vheads.evaluation._ablation import head_ablation
from vheads.evaluation._digest import prompt_digest
from vheads._headset import HeadSet
from vheads.models import Prompt

N_SCORES = 5  # per row: the four letters' logits, then the log-sum-exp over the vocabulary


@dataclass(frozen=True)
class Action:
    """What to do to each head-set's heads.

    ``kind="mask"``: hide ``keys`` from the heads at ``rows``; ``keys`` is ``image``, a
    region name, or ``text`` (the question and option tokens).
    ``kind="steer"``: steer the heads onto region ``target`` with strength ``beta``.
    ``kind="ablate"``: replace the heads' outputs at ``rows`` (``ablation``: ``zero``, or
    ``mean`` / ``resample`` with the probe's ``reference`` values; DESIGN.md "Ablation types").
    """

    kind: str
    rows: str = "all"
    keys: str = "image"
    target: str | None = None
    beta: float = 1e4
    ablation: str = "zero"


def key_positions(prompt: Prompt, keys: str) -> list[int]:
    lay = prompt.layout
    if keys == "image":
        return lay.image_positions.tolist()
    if keys == "text":
        return lay.spans.get("question", []) + lay.spans.get("options", [])
    if keys in lay.regions:
        return lay.regions[keys].positions.tolist()
    raise ValueError(f"unknown key group {keys!r} for item {prompt.item.id!r}; use image, text or a region ({', '.join(lay.regions)})")


@dataclass
class Probe:
    """One request for option probabilities: ``prompt`` under ``action`` for each head-set
    (one batch row per head-set), or the unintervened baseline (``action=None`` or no
    head-sets: one row)."""

    prompt: Prompt
    action: Action | None
    headsets: list[HeadSet] = field(default_factory=list)
    #: an ``ablate`` action's replacement head outputs (``mean``, ``resample``); None: zero
    reference: RoleMeans | None = None

    @property
    def n_rows(self) -> int:
        return len(self.headsets) if self.action is not None and self.headsets else 1

    def factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The action's query rows [T] bool and key bias [T] float, in prompt coordinates
        (DESIGN.md "Mask" / "Steer"; a baseline acts nowhere)."""
        pr = self.prompt
        T = pr.layout.n_tokens
        if self.action is None or not self.headsets:
            return torch.zeros(T, dtype=torch.bool), torch.zeros(T)
        a, one = self.action, torch.ones(1, 1, 1, dtype=torch.bool)
        rows = row_mask(pr.layout, a.rows)[None]  # [1, T]
        if a.kind == "ablate":
            return rows[0], torch.zeros(T)
        if a.kind == "mask":
            iv = mask_keys(one, rows, positions_mask(T, key_positions(pr, a.keys))[None])
        elif a.kind == "steer":
            if a.target not in pr.layout.regions:
                raise ValueError(f"steer target {a.target!r} is not a region of item {pr.item.id!r}")
            iv = steer_keys(one, rows, positions_mask(T, pr.layout.regions[a.target].positions)[None],
                            positions_mask(T, pr.layout.image_positions)[None], a.beta)
        else:
            raise ValueError(f"unknown action kind {a.kind!r}; use mask, steer or ablate")
        return iv.rows[0], iv.key_bias[0]

    def first_row(self) -> int:
        """The first row the action can change: the first row it acts at that comes after the
        first key it biases (the language model is causal outside image blocks, so a row
        before every biased key sees none of them: hiding the question's tokens at every row
        leaves the system prompt and the image a shareable prefix). The last row for a
        baseline, or an action that biases no key: it needs only the last row's logits. An
        ablation changes the rows it acts at."""
        rows, bias = self.factors()
        if self.action is not None and self.action.kind == "ablate" and self.headsets and rows.any():
            return int(rows.nonzero()[0])
        on = (rows & (torch.arange(len(rows)) >= first_biased_key(bias[None])[0])).nonzero()
        return int(on[0]) if len(on) else self.prompt.layout.last


class ProbeMemo:
    """Letter scores (four logits and the vocabulary's log-sum-exp) of probe rows already run,
    looked up by (prompt, action, head-set).

    The tests of a study ask for many rows again: every setting runs the same evaluation
    items, controls of settings whose heads lie in the same layers draw many of the same
    head-sets, and the β sweep repeats the main β. Pass one memo to the calls of one model
    (:func:`run_probes` and the tests take ``memo``): a row found in it is not run again.
    A prompt is known by a digest of its model inputs and layout, not by its item id, so two
    items that only share an id never share a row. The rows equal those a new forward gives,
    up to the float rounding of another batch composition (≤ 1e-5 in fp32,
    tests/evaluation/test_probe_memo.py). At most ``max_rows`` rows are kept, the oldest
    dropped first (about 180 bytes a row).
    """

    #: at most this many built prompts are kept (:meth:`prompt`)
    MAX_PROMPTS = 4096

    def __init__(self, max_rows: int = 1_000_000):
        if max_rows < 1:
            raise ValueError(f"a probe memo keeps at least one row, got max_rows={max_rows}")
        self.max_rows = max_rows
        self.rows: dict[bytes, bytes] = {}  # key digest -> five float64 scores
        self.hits = self.misses = 0
        self._prompts: dict[tuple[int, int], tuple] = {}  # (id(model), id(item)) -> (model, item, prompt)

    def prompt(self, engine: Engine, item):
        """``item``'s prompt on ``engine``'s model, built once per item object: the tests of a
        study read the same items again and again (an item changed in place is not seen: the
        study's items are not)."""
        lm = engine.lm
        key = (id(lm), id(item))
        hit = self._prompts.get(key)
        if hit is None or hit[0] is not lm or hit[1] is not item:
            while self._prompts and len(self._prompts) >= self.MAX_PROMPTS:
                del self._prompts[next(iter(self._prompts))]  # the oldest
            hit = self._prompts[key] = (lm, item, lm.adapter.build(item, lm.processor))
        return hit[2]

    def __len__(self) -> int:
        return len(self.rows)

    def keys(self, probe: Probe, prompt_digest: bytes, headset_keys: dict[int, bytes]) -> list[bytes]:
        """The key of each of ``probe``'s rows."""
        if probe.action is None or not probe.headsets:
            return [hashlib.blake2b(prompt_digest + b"baseline", digest_size=16).digest()]
        head = prompt_digest + repr(probe.action).encode() + (probe.reference.label.encode() if probe.reference else b"")
        return [hashlib.blake2b(head + headset_keys[id(hs)], digest_size=16).digest() for hs in probe.headsets]

    def get(self, key: bytes) -> np.ndarray | None:
        row = self.rows.get(key)
        return None if row is None else np.frombuffer(row, dtype=np.float64)

    def put(self, key: bytes, row: np.ndarray) -> None:
        if key not in self.rows and len(self.rows) >= self.max_rows:
            del self.rows[next(iter(self.rows))]  # dicts keep insertion order: the oldest row
        self.rows[key] = np.asarray(row, dtype=np.float64).tobytes()


def build_prompt(engine: Engine, item, memo: ProbeMemo | None = None):
    """``item``'s prompt on ``engine``'s model; through ``memo`` (:meth:`ProbeMemo.prompt`) when given."""
    return engine.lm.adapter.build(item, engine.lm.processor) if memo is None else memo.prompt(engine, item)


def letter_p(scores: np.ndarray) -> np.ndarray:
    """P over the four option letters, renormalised over them, from letter scores
    ``[..., 5]`` (four logits, then the log-sum-exp): ``softmax(scores[..., :4])``. [..., 4]"""
    z = np.asarray(scores, dtype=float)[..., :4]
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def run_probes(engine: Engine, probes: list[Probe], prefix_reuse: bool = True, max_rows: int | None = None,
               progress: bool = False, desc: str = "forwards", memo: ProbeMemo | None = None) -> list[np.ndarray]:
    """P over the four option letters at each probe's last prompt row: one ``[n_rows, 4]``
    array per probe (row j = head-set j; a baseline gives ``[1, 4]``); the letter
    softmax of :func:`run_scores`, which says how rows are run."""
    return [letter_p(x) for x in run_scores(engine, probes, prefix_reuse, max_rows, progress, desc, memo)]


def run_scores(engine: Engine, probes: list[Probe], prefix_reuse: bool = True, max_rows: int | None = None,
               progress: bool = False, desc: str = "forwards", memo: ProbeMemo | None = None) -> list[np.ndarray]:
    """The four option letters' logits and the log-sum-exp over the vocabulary at each
    probe's last prompt row: one ``[n_rows, 5]`` array per probe (row j = head-set j; a
    baseline gives ``[1, 5]``).

    A head-set listed more than once in a probe runs once and its row is copied: controls
    are independent draws, so a small pool repeats (249 layer-matched draws of three heads
    from five free heads of one layer hold at most C(5, 3) = 10 distinct head-sets).
    With a ``memo`` (:class:`ProbeMemo`), rows it holds are not run again, and the rows run
    are added to it.
    """
    if memo is not None:
        return _run_with_memo(engine, probes, memo, prefix_reuse, max_rows, progress, desc)
    distinct, inverse = _distinct_headsets(probes)
    out = _run_probes(engine, distinct, prefix_reuse, max_rows, progress, desc)
    return [p[inv] for p, inv in zip(out, inverse)]


def _run_with_memo(engine, probes: list[Probe], memo: ProbeMemo, prefix_reuse, max_rows, progress, desc) -> list[np.ndarray]:
    """:func:`run_scores` running only the rows ``memo`` does not hold."""
    digests: dict[int, bytes] = {}
    hs_keys: dict[int, bytes] = {}
    for pb in probes:
        if id(pb.prompt) not in digests:
            digests[id(pb.prompt)] = prompt_digest(pb.prompt)
        for hs in pb.headsets:
            if id(hs) not in hs_keys:
                hs_keys[id(hs)] = repr((hs.n_layers, hs.n_heads, hs.heads)).encode()
    keys = [memo.keys(pb, digests[id(pb.prompt)], hs_keys) for pb in probes]
    out = [np.zeros((pb.n_rows, N_SCORES)) for pb in probes]
    todo, where = [], []  # probes of the missing rows, and (probe, rows) each fills
    for i, (pb, ks) in enumerate(zip(probes, keys)):
        missing = []
        for j, k in enumerate(ks):
            row = memo.get(k)
            if row is None:
                missing.append(j)
            else:
                out[i][j] = row
        memo.hits += len(ks) - len(missing)
        memo.misses += len(missing)
        if missing:
            todo.append(pb if len(missing) == len(ks) else dataclasses.replace(pb, headsets=[pb.headsets[j] for j in missing]))
            where.append((i, missing))
    for (i, missing), p in zip(where, run_scores(engine, todo, prefix_reuse, max_rows, progress, desc)):
        out[i][missing] = p
        for j, row in zip(missing, p):
            memo.put(keys[i][j], row)
    return out


def _distinct_headsets(probes: list[Probe]) -> tuple[list[Probe], list[np.ndarray]]:
    """Each probe with its head-sets listed once (first-occurrence order), and for each of
    its original rows the row of the distinct list that computes it: ``[n_rows]``."""
    memo: dict[int, tuple[list[HeadSet], np.ndarray]] = {}  # by id of a head-set list (tests pass one list to every probe)
    distinct, inverse = [], []
    for pb in probes:
        if pb.action is None or not pb.headsets:
            distinct.append(pb)
            inverse.append(np.zeros(1, dtype=int))
            continue
        if id(pb.headsets) not in memo:
            index: dict[HeadSet, int] = {}
            inv = np.array([index.setdefault(hs, len(index)) for hs in pb.headsets])
            memo[id(pb.headsets)] = (list(index), inv)
        unique, inv = memo[id(pb.headsets)]
        distinct.append(pb if len(unique) == len(pb.headsets) else dataclasses.replace(pb, headsets=unique))
        inverse.append(inv)
    return distinct, inverse


def _run_probes(engine: Engine, probes: list[Probe], prefix_reuse: bool = True, max_rows: int | None = None,
                progress: bool = False, desc: str = "forwards") -> list[np.ndarray]:
    """:func:`run_scores` with every listed head-set run (no duplicate detection).

    Rows are packed into forwards by ``engine.batching``: with cross-item batching, rows
    of different probes and items share a forward (padded, each with its own position ids
    and image; see :class:`vheads.engine.RowBatch`), at most ``max_rows`` rows and
    ``token_budget`` positions per forward (``max_rows`` overrides the engine's); the probes
    of one prompt are kept together so its prefix (system prompt and image, before the
    first acted row) runs once. Without it, each probe runs on its own, in chunks of
    ``max_rows`` head-sets. The values do not depend on the packing
    (tests/evaluation/test_cross_item.py).
    """
    L, H = engine.shape
    for pb in probes:
        for hs in pb.headsets:
            if (hs.n_layers, hs.n_heads) != (L, H):
                raise ValueError(f"head-set of a {hs.n_layers}x{hs.n_heads} model used on a {L}x{H} model")
    count_rows(probes)
    bt = engine.batching if max_rows is None else dataclasses.replace(engine.batching, max_rows=max_rows)
    # work pieces: (probe, first head-set, n rows); a probe larger than a forward is cut
    pieces = []
    for i, pb in enumerate(probes):
        n = pb.n_rows
        per = max(1, min(bt.max_rows, bt.token_budget // pb.prompt.layout.n_tokens))
        pieces += [(i, lo, min(n, lo + per) - lo) for lo in range(0, n, per)]
    if engine.cross_item:
        # keep each prompt's pieces together; reusable prefixes and full forwards apart
        order = {}
        for k, (i, _, _) in enumerate(pieces):
            order.setdefault(id(probes[i].prompt), []).append(k)
        reusable = {pid: prefix_reuse and _reusable(probes, [pieces[k] for k in ks]) for pid, ks in order.items()}
        split = {pid: min(probes[pieces[k][0]].first_row() for k in ks) if reusable[pid] else 0 for pid, ks in order.items()}
        ordered = [pieces[k] for reuse in (True, False) for pid, ks in order.items() if reusable[pid] == reuse for k in ks]
        if bt.one_length:  # prompts of one shape next to each other (stable: a prompt's pieces stay together)
            shape = lambda pc: (not reusable[id(probes[pc[0]].prompt)], split[id(probes[pc[0]].prompt)],  # noqa: E731
                                probes[pc[0]].prompt.layout.n_tokens)
            ordered.sort(key=shape)
        forwards = [[ordered[j] for j in g] for g in pack([(probes[i].prompt, n, split[id(probes[i].prompt)]) for i, _, n in ordered], bt)]
        # a forward mixes reusable prompts only with reusable ones (pack keeps the order)
        forwards = [part for f in forwards for part in _split_by(f, lambda pc: reusable[id(probes[pc[0]].prompt)])]
    else:
        forwards = [[pc] for pc in pieces]
    out = [np.zeros((pb.n_rows, N_SCORES)) for pb in probes]
    for f in tqdm(forwards, desc=desc, unit="forward", disable=not progress):
        for (i, lo, n), p in zip(f, _run_forward(engine, probes, f, prefix_reuse)):
            out[i][lo : lo + n] = p
    return out


#: batch rows run so far in this process, ``full`` and ``suffix`` (:func:`count_rows`); the
#: study records each unit's share (vheads.study._plan counts the same rows in advance)
ROWS_RUN = {"full": 0, "suffix": 0}


def count_rows(probes) -> None:
    """Add ``probes``' rows to :data:`ROWS_RUN`: a row is ``suffix`` when its first acted row
    comes after the prompt's image (system prompt and image can be a shared prefix), else ``full``."""
    for pb in probes:
        image = pb.prompt.layout.image_positions
        after = len(image) > 0 and (pb.action is None or not pb.headsets or pb.first_row() > int(image.max()))
        ROWS_RUN["suffix" if after else "full"] += pb.n_rows


def _reusable(probes, pieces) -> bool:
    """Whether a prompt's pieces can share its prefix: more than one row, and a split at
    the first acted row (:func:`vheads.engine._runner.can_split`)."""
    first = min(probes[i].first_row() for i, _, _ in pieces)
    return sum(n for _, _, n in pieces) > 1 and can_split(probes[pieces[0][0]].prompt, first)


def _split_by(seq, key):
    """``seq`` cut where ``key`` changes."""
    parts: list[list] = []
    for x in seq:
        if parts and key(parts[-1][-1]) == key(x):
            parts[-1].append(x)
        else:
            parts.append([x])
    return parts


def _run_forward(engine: Engine, probes: list[Probe], pieces: list[tuple[int, int, int]], prefix_reuse: bool) -> list[np.ndarray]:
    """One forward of ``pieces`` ((probe, first head-set, n rows), grouped by prompt):
    the letter scores of each piece's rows.

    A forward that runs out of device memory (``torch.OutOfMemoryError`` or CUDA's plain
    ``RuntimeError``, e.g. a long prompt on a full GPU) is split into two forwards of half
    its rows and each retried, and the engine's later forwards start at that size
    (:func:`vheads.engine.split_on_oom`); the values equal the unsplit forward's."""

    def scores(part):
        batch, plan = probe_batch(engine, probes, part, prefix_reuse)
        logits = engine.run(batch, plan, logits_at=[batch.length - 1]).logits[:, 0]
        return engine.letter_scores(logits).cpu().numpy()

    p = split_on_oom(scores, pieces, lambda part: sum(n for _, _, n in part), _halve, lambda a, b: np.concatenate([a, b]),
                     engine.lm.model_id, engine.memory)
    out, at = [], 0
    for _, _, n in pieces:
        out.append(p[at : at + n])
        at += n
    return out


def _halve(pieces: list[tuple[int, int, int]], first: int) -> tuple[list, list]:
    """``pieces`` cut into two lists, the first holding ``first`` rows (a piece that spans
    the cut becomes two), the row order kept."""
    a, b, left = [], [], first
    for i, lo, n in pieces:
        k = min(n, left)
        if k:
            a.append((i, lo, k))
        if n - k:
            b.append((i, lo + k, n - k))
        left -= k
    return a, b


def probe_batch(engine: Engine, probes: list[Probe], pieces: list[tuple[int, int, int]], prefix_reuse: bool = True):
    """The row batch and plan of one forward of ``pieces`` ((probe, first head-set, n
    rows), grouped by prompt): every row's heads, acted rows and key bias placed at the
    row's padded positions."""
    prompts, counts, firsts, slot = [], [], [], []
    for i, _, n in pieces:
        pr = probes[i].prompt
        if not prompts or prompts[-1] is not pr:
            prompts.append(pr)
            counts.append(0)
            firsts.append(pr.layout.n_tokens)
        counts[-1] += n
        firsts[-1] = min(firsts[-1], probes[i].first_row())
        slot.append(len(prompts) - 1)
    batch = RowBatch.build(prompts, counts, firsts, prefix_reuse)
    L, H = engine.shape
    heads, rows, bias = [], [], []
    for (i, lo, n), u in zip(pieces, slot):
        pb = probes[i]
        r, b = pb.factors()
        r, b = batch.place(u, r, False), batch.place(u, b, 0.0)  # [T]
        for j in range(lo, lo + n):
            heads.append(torch.from_numpy(pb.headsets[j].as_mask()) if pb.headsets and pb.action is not None else torch.zeros(L, H, dtype=torch.bool))
            rows.append(r)
            bias.append(b)
    heads = torch.stack(heads)  # [B, L, H]
    ablate = torch.tensor([probes[i].action is not None and probes[i].action.kind == "ablate" for i, _, n in pieces for _ in range(n)])
    iv = Intervention(heads & ~ablate[:, None, None], torch.stack(rows), torch.stack(bias))  # [B, L, H], [B, T], [B, T]
    ablations = [head_ablation(batch, [(probes[i], u, n) for (i, _, n), u in zip(pieces, slot)], heads & ablate[:, None, None],
                               torch.stack(rows), engine.lm.device)] if bool(ablate.any()) else []
    return batch, engine.plan(batch.n_rows, [iv], ablations=ablations)


def option_probs(engine: Engine, prompt: Prompt, headsets: list[HeadSet], action: Action | None, batch_size: int | None = None, prefix_reuse: bool = True) -> np.ndarray:
    """P over the four option letters at the last prompt row, one row per head-set: [N, 4].

    ``action=None`` (or an empty list of head-sets) gives the unintervened baseline [1, 4].
    ``batch_size`` (default: the engine's ``max_rows``) caps the head-sets per forward.
    """
    return run_probes(engine, [Probe(prompt, action, list(headsets))], prefix_reuse, max_rows=batch_size)[0]
