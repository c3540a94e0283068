"""The shipped tiny model through the generic loader and the engine (offline)."""

import os

import numpy as np
import torch

from vheads.data.synthetic import kind_items
from vheads.engine import Capture, Engine, mask_keys, positions_mask, row_mask
from vheads.models import load_model


def test_shipped_tiny_model_runs_capture_and_a_masked_forward_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load_model("tiny")
    assert lm.fingerprint.startswith("sha256:")
    eng = Engine(lm)
    item = kind_items("strip-ordinal", 1, 3)[0]
    pr = lm.adapter.build(item, lm.processor)
    T = pr.layout.n_tokens
    panels = sorted(item.regions)
    groups = torch.stack([positions_mask(T, pr.layout.regions[p].positions) for p in panels])[None]
    cap = Capture(positions_mask(T, pr.layout.spans["query"])[None], groups)
    mass = eng.forward(pr, eng.plan(1, captures=[cap]), logits_at=[]).captures["capture"][0]  # [L, H, 6]
    assert mass.shape == (lm.n_layers, lm.n_heads, 6)
    assert torch.all(mass >= 0) and torch.all(mass.sum(-1) <= 1 + 1e-5)
    # hiding the image from every head at every row changes the answer distribution
    heads = torch.ones(1, lm.n_layers, lm.n_heads, dtype=torch.bool)
    iv = mask_keys(heads, row_mask(pr.layout, "all")[None], positions_mask(T, pr.layout.image_positions)[None])
    plain = eng.forward(pr, logits_at=[pr.layout.last]).logits[0, 0].softmax(-1)
    masked = eng.forward(pr, eng.plan(1, [iv]), logits_at=[pr.layout.last]).logits[0, 0].softmax(-1)
    answer = lm.processor.tokenizer.convert_tokens_to_ids(item.answer)
    assert plain[answer] > 0.5 and masked[answer] < plain[answer]
