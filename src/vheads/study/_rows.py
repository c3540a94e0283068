"""What the plan (:mod:`vheads.study._plan`) is made of, below the stages that count rows in it:
the model layouts (shape and prompt lengths, without weights), a stage's rows
(:class:`PlanStage`) and the rows per item of each test."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from vheads._errors import VheadsError

#: rows per item of each test and head-set (CERS: steered onto the target and a distractor;
#: NCS: the matched and mismatched arm; NCS_grid: the target cell's and a distractor's hidden)
ROWS_PER_ITEM = {"cers": 2, "cers-sym": 2, "ncs": 2, "ncs-grid": 2, "text": 1}
#: row groups whose intervention leaves the image in a shared prefix (suffix rows)
SUFFIX_GROUPS = ("question", "last")
#: rows of one discovery item: one capture row, plus for the ``out`` source a greedy answer
#: (4 generated tokens) and the teacher-forced capture row
OUT_ROWS = 5

#: built-in layouts: language-model shape (softmax-attention layers × query heads) and prompt
#: lengths in tokens: ``prompt_tokens`` of an evaluation prompt, ``suffix_tokens`` after the
#: shared prefix (question, options, answer cue), ``strip_tokens`` of a discovery strip
LAYOUTS: dict[str, dict] = {
    # the measured GPU point: 1,024 image tokens (a 1,024-px square), 1,057-token prompts
    "qwen3-vl-8b": {"n_layers": 36, "n_heads": 32, "prompt_tokens": 1057, "suffix_tokens": 29, "strip_tokens": 1057,
                    "note": "Qwen3-VL-8B, 1,024 image tokens a prompt (the gpu_check point)"},
    # the prompt configs/paper.toml builds: 224-px cells -> a 448-px image, 32-px merged patches -> 14 x 14 = 196 tokens
    "qwen3-vl-8b-paper": {"n_layers": 36, "n_heads": 32, "prompt_tokens": 229, "suffix_tokens": 29, "strip_tokens": 229,
                          "note": "Qwen3-VL-8B, 448-px images: 196 image tokens + 33 text (computed, not measured)",
                          "rates_layout": "qwen3-vl-8b"},
    "qwen3-vl-2b": {"n_layers": 28, "n_heads": 16, "prompt_tokens": 1057, "suffix_tokens": 29, "strip_tokens": 1057,
                    "note": "Qwen3-VL-2B, 1,024 image tokens a prompt"},
    "tiny": {"n_layers": 4, "n_heads": 16, "prompt_tokens": 28, "suffix_tokens": 21, "strip_tokens": 28,
             "note": "the built-in tiny model (4 x 16 heads): a grid prompt is 28 tokens, 4 of them image tokens"},
}
#: the rates shipped with vheads (benchmarks/README.md's measured figures)
RATES_FILE = Path(__file__).with_name("plan_rates.json")


@dataclass(frozen=True)
class Layout:
    name: str
    n_layers: int  # softmax-attention layers
    n_heads: int
    prompt_tokens: int
    suffix_tokens: int
    strip_tokens: int
    rates_layout: str = ""  # the layout whose rates apply ('' = this one's name)
    note: str = ""

    @property
    def rates_key(self) -> str:
        return self.rates_layout or self.name


def load_layout(spec: str) -> Layout:
    """A built-in layout by name (:data:`LAYOUTS`) or a JSON file with the same keys; errors
    name ``--model-layout``."""
    if spec in LAYOUTS:
        return Layout(spec, **LAYOUTS[spec])
    p = Path(spec)
    if not p.is_file():
        raise VheadsError(f"--model-layout {spec!r}: neither a built-in layout ({', '.join(LAYOUTS)}) nor a JSON file")
    try:
        d = json.loads(p.read_text())
        return Layout(**{"name": p.stem, **d})
    except (ValueError, TypeError) as e:
        raise VheadsError(f"--model-layout {spec}: not a layout ({e}); keys: name, n_layers, n_heads, prompt_tokens, "
                          "suffix_tokens, strip_tokens") from None


@dataclass
class PlanStage:
    """One stage's rows: ``full`` and ``suffix`` batch rows, the tokens a full row computes and
    a suffix row computes, the items, and the head-sets (per setting where that applies)."""

    name: str
    full: int = 0
    suffix: int = 0
    tokens_full: int = 0
    tokens_suffix: int = 0
    items: int = 0
    head_sets: int = 0
    note: str = ""

    @property
    def rows(self) -> int:
        return self.full + self.suffix


def grid_ids(cfg) -> list[str]:
    """The grid's setting ids as discovery names them (built-in corpora: their abbreviation;
    a folder corpus: ``c<i>``, enough for the head-set algebra's pairs)."""
    from vheads.discovery import CORPUS_ABBREV, QUERY_ABBREV, SOURCE_ABBREV

    out = []
    for i, c in enumerate(cfg.corpora):
        a = CORPUS_ABBREV.get(c.partition(":")[0], f"c{i}") if ":" not in c else f"c{i}"
        out += [f"{a}-{QUERY_ABBREV[q]}-{SOURCE_ABBREV[s]}" for q in cfg.queries for s in cfg.sources]
    return out
