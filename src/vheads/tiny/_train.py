"""Train the built-in tiny Qwen3-VL on the synthetic world (CPU, minutes).

Recipe (issue 3, measured on 2 CPU cores):

- Model: Qwen3-VL, text hidden 128, 4 layers, 16 query / 4 KV heads, head_dim 8 (issue 41:
  16 heads a layer so that layer-matched pools hold far more than 2R head-sets),
  rope_theta 100; vision depth 2, hidden 64, patch 16, merge 2, vision position
  embedding re-initialised with std 1 (otherwise all panels look alike to the text model).
- Data: every batch of 32 mixes fixed numbers of each trained kind (:data:`MIX`). Items
  are drawn fresh each step from seeds disjoint from the evaluation seeds.
- Curriculum: each strip (query, corpus) pair starts with one filled panel out of six
  and gets one more when its accuracy over its last 15 training items reaches 0.85.
  Without it the image tokens collapse to one vector and accuracy sits at chance.
- Loss: cross-entropy on the teacher-forced answer (key then ``<|im_end|>``) plus an
  auxiliary cross-entropy at the last token of the query span ("panel 3", "the disk",
  "cell 2") predicting the key word (class word or digit; for grid questions the target
  cell's class word, since letters come later in the prompt).
- Near-chance kinds: ``class-mismatched`` and ``grid-blank`` are trained *towards the
  uniform distribution over the four letters* (soft-target cross-entropy), so that their
  P(key) sits at 0.25 per item, not just on average. ``grid-neutral`` is never trained on
  (it has four valid answers); it shares its question with the class items.
- AdamW lr 2e-3, 30 warm-up steps then cosine to 0 over ``max_steps``, gradient clip 1.
  Stops early when every trained kind reaches ``stop_acc`` on a fixed validation set
  twice in a row.

Tokenization goes through the qwen3_vl adapter, so the model is trained on exactly the
prompts vheads feeds it.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vheads.data import OPTION_LETTERS, Item
from vheads.data import synthetic as syn
from vheads.models import TINY_WEIGHTS, ProcessorBundle
from vheads.models.tiny_random import build_qwen_vl, save_model_folder
from vheads.tiny._batch import build_prompts, collate, draw_items

#: architecture of the shipped model
ARCH = dict(hidden=128, layers=4, heads=16, kv_heads=4, head_dim=8, rope_theta=100.0, vision_hidden=64,
            vision_depth=2, patch=16)
#: items per training batch: (kind, corpus or None) -> count; sums to 32
MIX: dict[tuple[str, str | None], int] = {
    ("strip-ordinal", "comics"): 5,
    ("strip-ordinal", "photo"): 5,
    ("strip-referring", "comics"): 5,
    ("strip-referring", "photo"): 5,
    ("grid-oracle", None): 5,
    ("class-matched", None): 3,
    ("text", None): 2,
    ("class-mismatched", None): 1,
    ("grid-blank", None): 1,
}
#: the second phase of the shipped model: lettered kinds weighted up (they need an
#: option-matching circuit that a few items per batch grow slowly)
MC_MIX: dict[tuple[str, str | None], int] = {
    ("strip-ordinal", "comics"): 4,
    ("strip-ordinal", "photo"): 4,
    ("strip-referring", "comics"): 4,
    ("strip-referring", "photo"): 4,
    ("grid-oracle", None): 6,
    ("class-matched", None): 4,
    ("text", None): 4,
    ("class-mismatched", None): 1,
    ("grid-blank", None): 1,
}
#: the first phase (``strips_first``): strips only, until every strip curriculum shows six panels
STRIP_MIX = {k: 8 for k in MIX if k[0].startswith("strip-")}
UNIFORM_KINDS = ("class-mismatched", "grid-blank")
CURRICULUM_WINDOW = 15
CURRICULUM_PASS = 0.85
VALIDATION_SEED = 777_000_000  # + training seed; evaluation uses other seeds (see _evaluate)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_untrained(seed: int = 0):
    """The recipe's architecture with fresh weights: (model, tokenizer, image_processor)."""
    model, tok, ip = build_qwen_vl("qwen3_vl", words=list(syn.WORDS), seed=seed, **ARCH)
    # the tiny model's own chat template: its training prompts, saved with the model
    tok.chat_template = (TINY_WEIGHTS / "chat_template.jinja").read_text()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        pe = model.model.visual.pos_embed.weight
        pe.copy_(torch.randn(pe.shape, generator=gen))  # std 1
    return model, tok, ip


def _token_id(tok, word: str) -> int:
    ids = tok(word, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"{word!r} is not one token of the tiny vocabulary: {ids}")
    return ids[0]


def key_word(item: Item) -> str:
    """The word the auxiliary loss predicts at the query span: the answer for strips, the class for grids."""
    return item.answer if item.options is None else item.meta["class"]


def token_classes(prompts) -> torch.Tensor:
    """Class index (6 = blank, -100 = no label) of every image token of the batch, in order."""
    labels = []
    for p in prompts:
        meta = p.item.meta
        shown = meta.get("panels") if "panels" in meta else meta.get("cells")
        n = len(p.layout.image_positions)
        if shown is None or len(shown) != n:
            labels += [-100] * n
        else:
            labels += [syn.CLASSES.index(c) if c is not None else len(syn.CLASSES) for c in shown]
    return torch.tensor(labels)


def batch_loss(model, tok, prompts, letter_ids: list[int], aux_weight: float, probe=None, probe_weight: float = 0.0,
               option_weight: float = 0.0):
    """(loss, per-item correct at the last prompt position) for one mixed batch.

    ``probe`` (a linear map from the vision output to the 6 classes + blank) adds a
    per-image-token class loss that keeps the image tokens from collapsing early on.
    """
    inputs = collate(prompts, tok.pad_token_id)
    captured = {}
    hook = None
    if probe is not None and probe_weight:
        hook = model.model.visual.merger.register_forward_hook(lambda m, i, o: captured.setdefault("v", o))
    try:
        logits = model(**inputs).logits  # [B, T, V]
    finally:
        if hook is not None:
            hook.remove()
    logp = F.log_softmax(logits.float(), dim=-1)
    terms, correct = [], []
    for b, p in enumerate(prompts):
        last = p.layout.last
        ids = p.inputs["input_ids"][0]
        if p.item.kind in UNIFORM_KINDS:
            terms.append(-logp[b, last, letter_ids].mean())
            correct.append(False)
            continue
        ans = p.layout.spans["answer"]  # answer-token positions; predicted from the row before
        rows = torch.tensor(ans) - 1
        terms.append(-logp[b, rows, ids[ans]].mean())
        if aux_weight and "query" in p.layout.spans:
            q = p.layout.spans["query"][-1]
            terms.append(-aux_weight * logp[b, q, _token_id(tok, key_word(p.item))])
        if aux_weight and p.item.options is not None:  # content word at the question's last token
            q = p.layout.spans["question"][-1]
            terms.append(-aux_weight * logp[b, q, _token_id(tok, key_word(p.item))])
        if option_weight and p.item.options is not None:  # each option word predicts its own letter
            opt_pos = p.layout.spans["options"]  # "A . disk B . bars ..." (newlines are not tokens)
            words, letters = torch.tensor(opt_pos[2::3]), ids[opt_pos[0::3]]
            terms.append(-option_weight * logp[b, words, letters].mean())
        correct.append(bool(logits[b, last].argmax() == ids[ans[0]]))
    loss = torch.stack(terms).sum() / len(prompts)
    if "v" in captured:
        labels = token_classes(prompts)
        if (labels >= 0).any():
            loss = loss + probe_weight * F.cross_entropy(probe(captured["v"]), labels, ignore_index=-100)
    return loss, correct


def train(
    out_dir: str | Path,
    seed: int = 0,
    max_steps: int = 3000,
    batch_mix: dict | None = None,
    lr: float = 2e-3,
    aux_weight: float = 0.5,
    probe_weight: float = 1.0,
    probe_off: bool = True,
    strips_first: bool = True,
    option_weight: float = 0.5,
    init_from: str | Path | None = None,
    threads: int = 2,
    eval_every: int = 100,
    stop_acc: float = 0.97,
    n_final_eval: int = 200,
    log=print,
) -> dict:
    """Train the tiny VLM and save it (``save_model_folder`` + ``training.json``) to ``out_dir``.

    Returns the training record written to ``training.json``.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    torch.set_num_threads(threads)
    seed_everything(seed)
    mix = dict(batch_mix or MIX)
    previous = None
    if init_from is None:
        model, tok, ip = build_untrained(seed)
    else:  # continue a saved run (its curriculum is over: every strip shows six panels)
        from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer

        model = AutoModelForImageTextToText.from_pretrained(init_from, dtype=torch.float32)
        tok, ip = AutoTokenizer.from_pretrained(init_from), AutoImageProcessor.from_pretrained(init_from)
        rec = Path(init_from) / "training.json"
        previous = json.loads(rec.read_text()) if rec.exists() else None
    model.train()
    processor = ProcessorBundle(ip, tok, ARCH["patch"])
    letter_ids = [_token_id(tok, x) for x in OPTION_LETTERS]
    probe = torch.nn.Linear(ARCH["hidden"], len(syn.CLASSES) + 1)  # training-only, not saved
    opt = torch.optim.AdamW([*model.parameters(), *probe.parameters()], lr=lr, weight_decay=0.01)
    warm = min(30, max_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, max_steps - warm)))
    )
    offset = previous.get("total_steps", previous["steps"]) if previous else 0  # fresh items when continuing
    filled = {k: 1 if init_from is None else syn.N_PANELS for k in mix if k[0].startswith("strip-")}
    history = {k: deque(maxlen=CURRICULUM_WINDOW) for k in filled}
    curriculum_log, val_log = [], []
    passes, t0, step = 0, time.time(), 0
    for step in range(1, max_steps + 1):
        items: list[Item] = []
        groups: list[tuple] = []
        full = all(v == syn.N_PANELS for v in filled.values())
        step_mix = mix if full or not strips_first else STRIP_MIX
        for g, (key, count) in enumerate(step_mix.items()):
            kind, corpus = key
            drawn = draw_items(kind, corpus, count, seed * 1_000_003 + (step + offset) * 31 + g, filled.get(key, syn.N_PANELS))
            items += drawn
            groups += [key] * count
        prompts = build_prompts(items, processor, with_answer=True)
        loss, correct = batch_loss(model, tok, prompts, letter_ids, aux_weight, probe, 0.0 if full and probe_off else probe_weight,
                                   option_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        for key, ok in zip(groups, correct):
            if key in history:
                history[key].append(ok)
        for key, h in history.items():
            if filled[key] < syn.N_PANELS and len(h) == CURRICULUM_WINDOW and sum(h) / len(h) >= CURRICULUM_PASS:
                filled[key] += 1
                h.clear()
                curriculum_log.append({"step": step, "kind": key[0], "corpus": key[1], "filled": filled[key]})
                log(f"step {step}: {key[0]}/{key[1]} -> {filled[key]} filled panels")
        if step % 25 == 0:
            log(f"step {step} loss {loss.item():.3f} lr {sched.get_last_lr()[0]:.2e} {time.time() - t0:.0f}s filled {list(filled.values())}")
        if step % eval_every == 0 and all(v == syn.N_PANELS for v in filled.values()):
            model.eval()
            acc = validation_accuracy(model, processor, seed)
            model.train()
            val_log.append({"step": step, **acc})
            log(f"step {step} validation {json.dumps(acc)}")
            passes = passes + 1 if min(acc.values()) >= stop_acc else 0
            if passes >= 2:
                break
    seconds = time.time() - t0
    model.eval()
    out = save_model_folder(out_dir, model, tok, ip)
    from vheads.tiny._evaluate import evaluate

    held_out = evaluate(out, n_per_kind=n_final_eval, threads=threads) if n_final_eval else {}
    record = {
        "seed": seed,
        "steps": step,
        "train_seconds": round(seconds, 1),
        "threads": threads,
        "torch": torch.__version__,
        "arch": ARCH,
        "mix": {f"{k[0]}/{k[1]}" if k[1] else k[0]: v for k, v in mix.items()},
        "lr": lr,
        "aux_weight": aux_weight,
        "probe_weight": probe_weight,
        "probe_off_when_full": probe_off,
        "strips_first": strips_first,
        "option_weight": option_weight,
        "max_steps": max_steps,
        "curriculum": curriculum_log,
        "validation": val_log,
        "held_out": held_out,
    }
    if previous is not None:
        previous.pop("held_out", None)
        record["continued_from"] = previous
        record["total_steps"] = step + previous.get("total_steps", previous["steps"])
        record["total_train_seconds"] = round(seconds + previous.get("total_train_seconds", previous["train_seconds"]), 1)
    (Path(out) / "training.json").write_text(json.dumps(record, indent=2))
    log(f"saved {out} after {step} steps, {seconds:.0f}s")
    return record


TRAINED_KINDS = [k for k in MIX if k[0] not in UNIFORM_KINDS]


@torch.no_grad()
def validation_accuracy(model, processor, seed: int, n: int = 32) -> dict[str, float]:
    """Accuracy at the last prompt position on a fixed validation set of each trained kind."""
    from vheads.tiny._evaluate import predict

    acc = {}
    for g, (kind, corpus) in enumerate(TRAINED_KINDS):
        items = draw_items(kind, corpus, n, VALIDATION_SEED + seed * 101 + g)
        res = predict(model, processor, items)
        acc[f"{kind}/{corpus}" if corpus else kind] = round(float(np.mean([r["correct"] for r in res])), 3)
    return acc


#: stage 2 of the shipped recipe: grid questions weighted up
GRID_MIX: dict[tuple[str, str | None], int] = {
    ("strip-ordinal", "comics"): 2,
    ("strip-ordinal", "photo"): 2,
    ("strip-referring", "comics"): 2,
    ("strip-referring", "photo"): 2,
    ("grid-oracle", None): 16,
    ("class-matched", None): 3,
    ("text", None): 3,
    ("class-mismatched", None): 1,
    ("grid-blank", None): 1,
}


#: stage 3 of the shipped recipe: the lettered kinds (option matching) weighted up
LETTER_MIX: dict[tuple[str, str | None], int] = {
    ("strip-ordinal", "comics"): 1,
    ("strip-ordinal", "photo"): 1,
    ("strip-referring", "comics"): 1,
    ("strip-referring", "photo"): 1,
    ("grid-oracle", None): 8,
    ("class-matched", None): 8,
    ("text", None): 8,
    ("class-mismatched", None): 2,
    ("grid-blank", None): 2,
}


def train_shipped(out_dir: str | Path, seed: int = 0, threads: int = 2, log=print) -> dict:
    """The four-stage recipe of the shipped model (see docs/tiny_model.md).

    Stage 1: strip curriculum, then :data:`MC_MIX` (lr 2e-3, option-letter weight 0.5, at
    most 3,500 steps). Stage 2: continue with :data:`GRID_MIX` (lr 1e-3, option-letter
    weight 1.0, at most 3,000 steps, early stop). Stage 3 (since the 16-head model of issue
    41, whose head_dim 8 grows the option-matching circuit more slowly): continue with
    :data:`LETTER_MIX` (lr 1e-3, option-letter weight 1.0, at most 3,000 steps, early stop).
    Stage 4: :data:`GRID_MIX` again (lr 5e-4, option-letter weight 1.0, at most 1,500 steps,
    early stop). Stage 1–3's files go to ``out_dir/stage1`` … ``out_dir/stage3``.
    """
    out = Path(out_dir)
    train(out / "stage1", seed=seed, max_steps=3500, batch_mix=MC_MIX, option_weight=0.5, threads=threads,
          n_final_eval=0, log=log)
    train(out / "stage2", seed=seed, max_steps=3000, batch_mix=GRID_MIX, lr=1e-3, option_weight=1.0,
          init_from=out / "stage1", threads=threads, n_final_eval=0, log=log)
    train(out / "stage3", seed=seed, max_steps=3000, batch_mix=LETTER_MIX, lr=1e-3, option_weight=1.0,
          init_from=out / "stage2", threads=threads, n_final_eval=0, log=log)
    return train(out, seed=seed, max_steps=1500, batch_mix=GRID_MIX, lr=5e-4, option_weight=1.0,
                 init_from=out / "stage3", threads=threads, log=log)
