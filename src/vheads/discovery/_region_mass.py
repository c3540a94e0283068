"""Discovery scores: raw region mass from a source's query rows onto the asked panel.

For one item, the region mass of head (l, h) is (DESIGN.md "Region mass")

    m[l,h](Q, R) = mean_{q ∈ Q} Σ_{t ∈ R} A[l,h][q, t]

with R the image tokens of the asked panel (``item.target``) and Q the rows of one
*attention source*:

- ``last``  — the last prompt token (the row that produces the first answer token);
- ``qspan`` — the question tokens that name the panel (``item.query_span``: "panel 3",
  "the dog");
- ``out``   — the model's own greedy answer, teacher-forced: the rows of the answer
  tokens appended after the assistant prefix.

The discovery score of a setting is ``s[l,h] = mean over items of m[l,h]``. One item
costs one greedy generation (for ``out``) and ONE forward pass that captures all three
sources together (the prompt is built with the answer appended; the ``last`` row is the
last *prompt* row, so the answer tokens do not change it: attention is causal).

Setting ids read like the seed paper's: ``{corpus}-{query}-{source}`` with the
abbreviations of :data:`CORPUS_ABBREV`, :data:`QUERY_ABBREV`, :data:`SOURCE_ABBREV`
(``cm-ref-qsp`` = comics corpus, referring questions, query-span rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from vheads.data import Item
from vheads.engine import Engine, is_out_of_memory, one_row_out_of_memory, positions_mask
from vheads.discovery._source_setting import (  # noqa: F401 - re-exported
    CORPUS_ABBREV, QUERIES, QUERY_ABBREV, SOURCE_ABBREV, SOURCE_SPAN, SOURCES, Setting,
)
from vheads.models import LoadedModel, Prompt


@dataclass
class SettingScores:
    """Per-item region mass of one setting: ``per_item [N, L, H]`` (float64).

    ``scores`` is the discovery score ``s[l,h]`` = the mean over items. ``answers`` are
    the greedy answers that were teacher-forced (the ``out`` rows).
    """

    setting: Setting
    per_item: np.ndarray  # [N, L, H]
    item_ids: list[str]
    answers: list[str] = field(default_factory=list)
    n_empty_answers: int = 0

    @property
    def scores(self) -> np.ndarray:  # [L, H]
        return self.per_item.mean(axis=0)

    @property
    def n_items(self) -> int:
        return int(self.per_item.shape[0])


#: end-of-turn markers of the supported families' chat templates; one counts only where it is
#: a special token of the tokenizer (on Qwen "</s>" is ordinary text, on Gemma "<end_of_turn>"
#: is special), so a word of the answer can never stop it
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "<turn|>", "<end_of_utterance>", "<|end|>")


def _stop_ids(lm: LoadedModel) -> list[int]:
    """The token ids the greedy answer stops at: the checkpoint's ``generation_config``
    ``eos_token_id`` (an int or a list), the tokenizer's eos token, and the tokenizer's
    special end-of-turn tokens (:data:`END_OF_TURN`). Never a string looked up in the
    vocabulary as ordinary text."""
    tok = lm.adapter.tokenizer(lm.processor)
    special = {i for i, t in getattr(tok, "added_tokens_decoder", {}).items() if getattr(t, "special", False)}
    special |= set(getattr(tok, "all_special_ids", []))
    ids = set()
    if tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    for t in END_OF_TURN:
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and i in special and i != tok.unk_token_id:
            ids.add(i)
    cfg_eos = getattr(getattr(lm.model, "generation_config", None), "eos_token_id", None)
    for i in cfg_eos if isinstance(cfg_eos, (list, tuple)) else [cfg_eos]:
        if i is not None:
            ids.add(int(i))
    if not ids:
        raise ValueError(f"{lm.model_id!r}: neither its generation_config nor its tokenizer names an end token "
                         "(eos_token_id), so a greedy answer could not stop")
    return sorted(ids)


@torch.no_grad()
def greedy_answer(lm: LoadedModel, prompt: Prompt, max_new_tokens: int = 4) -> str:
    """The model's greedy answer to ``prompt`` as text (at most ``max_new_tokens`` tokens,
    stopping at end-of-turn / eos; special tokens dropped; surrounding space stripped)."""
    tok = lm.adapter.tokenizer(lm.processor)
    inputs = {k: v.to(lm.device) for k, v in prompt.inputs.items()}
    if "pixel_values" in inputs:
        inputs["pixel_values"] = inputs["pixel_values"].to(lm.model.dtype)
    stop = _stop_ids(lm)
    try:
        out = lm.model.generate(
            **inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
            eos_token_id=stop, pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else stop[0],
        )
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        raise one_row_out_of_memory(lm.model_id) from None
    new = out[0, inputs["input_ids"].shape[1]:].tolist()
    for i, t in enumerate(new):
        if t in stop:
            new = new[:i]
            break
    return tok.decode(new, skip_special_tokens=True).strip()


def _eos_text(lm: LoadedModel) -> str:
    tok = lm.adapter.tokenizer(lm.processor)
    return tok.convert_ids_to_tokens(_stop_ids(lm)[0])


def item_region_mass(engine: Engine, item: Item, answer: str, sources: Sequence[str] = SOURCES) -> dict[str, np.ndarray]:
    """Region mass ``m[l,h]`` of every source for one item, in one forward: {source: [L, H]}.

    ``answer`` is teacher-forced after the assistant prefix (it defines the ``out`` rows).
    """
    return region_masses(engine, [item], [answer], sources)[0]


def region_masses(engine: Engine, items: Sequence[Item], answers: Sequence[str | None], sources: Sequence[str] = SOURCES) -> list[dict[str, np.ndarray]]:
    """:func:`item_region_mass` of many items; items share forwards (one row each) when the
    engine batches across items."""
    lm = engine.lm
    requests = []
    for item, answer in zip(items, answers):
        if item.target is None or item.target not in item.regions:
            raise ValueError(f"item {item.id!r} has no target region among its regions {sorted(item.regions)}")
        if "qspan" in sources and item.query_span is None:
            raise ValueError(f"item {item.id!r} has no query_span, which the qspan source needs")
        prompt = lm.adapter.build(item, lm.processor, answer_text=answer)
        lay = prompt.layout
        T = lay.n_tokens
        target = lay.regions[item.target].positions
        if len(target) == 0:
            raise ValueError(
                f"item {item.id!r}: target region {item.target!r} box {item.regions[item.target]} covers no image "
                f"token of the {lay.grid[0]}x{lay.grid[1]} token grid; use larger panels for this model"
            )
        rows = {}
        for s in sources:
            pos = lay.spans.get(SOURCE_SPAN[s], [])
            if not pos:
                raise ValueError(f"item {item.id!r}: the {s!r} source has no rows in its prompt (span {SOURCE_SPAN[s]!r} empty)")
            rows[s] = positions_mask(T, pos)
        requests.append((prompt, rows, positions_mask(T, target)[None]))  # groups [1, T]
    return [{s: m[s][:, :, 0].double().cpu().numpy() for s in sources} for m in engine.capture_many(requests)]  # [L, H]


def score_settings(
    lm: LoadedModel,
    items_by_corpus_and_query: Mapping[tuple[str, str], Sequence[Item]],
    sources: Sequence[str] = SOURCES,
    max_new_tokens: int = 4,
    corpus_abbrev: Mapping[str, str] | None = None,
    progress: bool = True,
    engine: Engine | None = None,
) -> dict[str, SettingScores]:
    """Discovery scores of every (corpus, query) × source setting.

    ``items_by_corpus_and_query`` maps ``(corpus name, query type)`` to the discovery items
    of that corpus and query type. Returns ``{setting id: SettingScores}`` in the order
    corpus, query, source. Deterministic: greedy decoding, no sampling.

    When the greedy answer is empty (the model ends its turn at once) the end-of-turn token
    itself is teacher-forced, so the ``out`` row is the row that reads it; the count is in
    ``SettingScores.n_empty_answers``.
    """
    sources = tuple(dict.fromkeys(sources))
    for s in sources:
        if s not in SOURCES:
            raise ValueError(f"unknown attention source {s!r}; choose from: {', '.join(SOURCES)}")
    if not sources:
        raise ValueError("no attention source given; choose from: " + ", ".join(SOURCES))
    for (corpus, query), items in items_by_corpus_and_query.items():
        Setting(corpus, query, sources[0])  # validates the names
        if len(items) == 0:
            raise ValueError(f"corpus {corpus!r} ({query}) has no items: nothing to score")
    engine = engine or Engine(lm)
    abbrevs = dict(corpus_abbrev or {})
    total = sum(len(v) for v in items_by_corpus_and_query.values())
    bar = tqdm(total=total, desc="discovery", unit="item", disable=not progress)
    results: dict[str, SettingScores] = {}
    try:
        for (corpus, query), items in items_by_corpus_and_query.items():
            answers, n_empty = [], 0
            bar.set_postfix_str(f"{corpus}/{query}")
            for item in items:
                answer = ""
                if "out" in sources:
                    answer = greedy_answer(lm, lm.adapter.build(item, lm.processor), max_new_tokens)
                    if not answer:
                        n_empty += 1
                        answer = _eos_text(lm)
                answers.append(answer)
            masses = region_masses(engine, items, [a if "out" in sources else None for a in answers], sources)
            bar.update(len(items))  # an item counts once it is scored: its answer and its captures done
            for s in sources:
                st = Setting(corpus, query, s, abbrevs.get(corpus))
                results[st.id] = SettingScores(st, np.stack([m[s] for m in masses]), [it.id for it in items], answers, n_empty)
    finally:
        bar.close()
    return results
