"""No host–device transfer while the decoder layers run (issue 34.7), and the model's mask
checked once per forward (34.8).

A GPU idles at every read of a device tensor on the host (``.item()``, ``bool(t)``,
``int(t)``, ``.tolist()``, ``.cpu()``, ``nonzero``, a boolean index) and at every blocking
copy to the device. The plan's work is worked out and moved before the layers run
(:mod:`vheads.engine._schedule`): a spy (a torch-function mode) counts every such call from
the first decoder layer's entry to the final norm, on the tiny model, on a CPU (the path a
GPU takes: the engine chooses no path by device). A read counts on any tensor, so the test
does not depend on where a tensor lives; a move counts when the engine's code makes it.
"""

from __future__ import annotations

import contextlib
import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode

from tests.evaluation.test_cross_item import _items
from vheads.engine import (Capture, Engine, HeadAblation, OutputRecord, RowBatch, _attention, mask_keys, positions_mask, row_mask,
                           steer_keys)
from vheads.engine._layers import decoder_layers

#: torch functions that read a tensor back to the host (or need its values to size their result)
READS = {"item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero", "unique", "masked_select"}
#: functions that move data from the host onto a device, when the engine calls them
MOVES = {"to", "tensor", "as_tensor", "cuda"}


def _caller_is_engine() -> bool:
    """Whether the nearest frame outside torch (and this file) is the engine's code."""
    f = sys._getframe(2)
    while f is not None and ("/torch/" in f.f_code.co_filename or f.f_code.co_filename == __file__):
        f = f.f_back
    return f is not None and "/vheads/engine/" in f.f_code.co_filename.replace("\\", "/")


def _bool_index(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool and p.dim() > 0 for p in parts)


class _Transfers(TorchFunctionMode):
    """Records every torch call that reads a tensor on the host (:data:`READS`, a boolean
    index) and every move onto a device from the engine's code (:data:`MOVES`; ``.to`` with a
    device). A torch-function mode sees every call, on any tensor, wherever it lives."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name in READS or (name in ("__getitem__", "__setitem__") and _bool_index(args[1])):
            self.calls.append(name)
        elif name in MOVES and _caller_is_engine():
            if name != "to" or "device" in kwargs or any(isinstance(a, (torch.device, str, torch.Tensor)) for a in args[1:]):
                self.calls.append(name)
        return func(*args, **kwargs)


@contextlib.contextmanager
def counting_transfers(model):
    """The calls :class:`_Transfers` records while the language model's decoder layers run:
    from the first layer's entry (before any hook of the engine) to the final norm's."""
    mode = _Transfers()
    active = []

    def enter(*_):
        if not active:  # the prefix pass and the forward each run the layers once
            mode.__enter__()
            active.append(1)

    def leave(*_):
        if active:
            mode.__exit__(None, None, None)
            active.clear()

    start = decoder_layers(model)[0].register_forward_pre_hook(enter, prepend=True)
    stop = model.get_decoder().norm.register_forward_pre_hook(leave, prepend=True)
    try:
        yield mode.calls
    finally:
        leave()
        start.remove()
        stop.remove()


@pytest.fixture(scope="module")
def tiny():
    from vheads.models import load_model

    return load_model("tiny")


def _rows_of(batch: RowBatch, make) -> torch.Tensor:
    """``make(prompt)`` [T_u] of every batch row's prompt, at its padded positions: [B, T]."""
    return torch.stack([batch.place(int(u), make(batch.prompts[int(u)]), False) for u in batch.row_items()])


def _image(p):
    return positions_mask(p.layout.n_tokens, p.layout.image_positions)


def _heads(eng, B: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    heads = torch.rand(B, *eng.shape, generator=g) < 0.3
    heads[0] = False  # an idle row
    return heads


def _plans(eng, batch: RowBatch):
    """A masking + steering plan at every row (folded path), one at the question rows (the
    per-row mask path; prefix reuse), a zero and a mean ablation, a record, a capture; with
    a prefix split (``batch.prefix``), those acting at the question rows only."""
    B, T = batch.n_rows, batch.length
    L, H = eng.shape
    image = _rows_of(batch, _image)
    question = _rows_of(batch, lambda p: row_mask(p.layout, "question"))
    target = _rows_of(batch, lambda p: positions_mask(p.layout.n_tokens, next(iter(p.layout.regions.values())).positions))
    every = torch.ones(B, T, dtype=torch.bool)
    R = 3
    values = torch.randn(L, H, R, eng.lm.head_dim, generator=torch.Generator().manual_seed(4))
    role = torch.arange(B * T).view(B, T) % R
    yield "mask, question rows", eng.plan(B, [mask_keys(_heads(eng, B, 2), question, image)])
    yield "zero ablation", eng.plan(B, ablations=[HeadAblation(_heads(eng, B, 3), question)])
    yield "mean ablation", eng.plan(B, ablations=[HeadAblation(_heads(eng, B, 5), question, values, role)])
    if batch.prefix:
        return
    yield "mask+steer, every row", eng.plan(B, [mask_keys(_heads(eng, B, 0), every, image),
                                                steer_keys(_heads(eng, B, 1), every, target, image, 2.0)])
    yield "record", eng.plan(B, records=[OutputRecord(torch.where(every, role, -1), R)])
    yield "capture", eng.plan(B, captures=[Capture(question, torch.stack([image, target], 1))])


def test_no_host_device_transfer_while_the_decoder_layers_run(tiny):
    eng = Engine(tiny)
    prompts = [tiny.adapter.build(it, tiny.processor) for it in _items()[:2]]
    assert prompts[0].layout.n_tokens != prompts[1].layout.n_tokens  # two lengths: padding, a mask
    splits = [p.layout.spans["question"][0] for p in prompts]  # a shared prefix: system prompt and image
    for batch in (RowBatch(prompts, [3, 2], [0, 0]), RowBatch(prompts, [3, 2], splits)):
        for name, plan in _plans(eng, batch):
            with counting_transfers(tiny.model) as calls:
                eng.run(batch, plan, logits_at=[])
            assert calls == [], (name, batch.prefix, calls)


def test_the_spy_sees_a_transfer_in_the_layer_loop(tiny, monkeypatch):
    """The spy is not blind: a ``.item()`` in the attention function is counted."""
    eng = Engine(tiny)
    prompt = tiny.adapter.build(_items()[0], tiny.processor)
    original = _attention._attend
    monkeypatch.setattr(_attention, "_attend", lambda *a, **k: (a[1].sum().item(), original(*a, **k))[1])
    with counting_transfers(tiny.model) as calls:
        eng.forward(prompt)
    assert calls.count("item") == tiny.n_layers


def _mask_image_plan(eng, batch: RowBatch, head_sets: list[torch.Tensor]):
    """Row b hides the image from ``head_sets[b]`` [L, H] at every row (the folded path)."""
    B, T = batch.n_rows, batch.length
    every = torch.ones(B, T, dtype=torch.bool)
    return eng.plan(B, [mask_keys(torch.stack(head_sets), every, _rows_of(batch, _image))])


def test_items_of_different_lengths_in_one_forward_equal_each_alone_and_the_mask_is_checked_once(tiny, monkeypatch):
    """Left padding gives each item the P(option) it has alone; the padded mask is compared
    with causal ∧ key-visible once per forward, not per layer (issue 34.8)."""
    eng = Engine(tiny)
    prompts = [tiny.adapter.build(it, tiny.processor) for it in _items()[:3]]
    assert len({p.layout.n_tokens for p in prompts}) > 1
    heads = _heads(eng, 6, 7)
    heads[0, :2] = True  # every row acts from the first layer on
    checks, folded = [], []
    causal_keys, folded_rows = _attention._causal_keys, _attention._folded_rows
    monkeypatch.setattr(_attention, "_causal_keys", lambda *a: checks.append(1) or causal_keys(*a))
    monkeypatch.setattr(_attention, "_folded_rows", lambda *a: folded.append(1) or folded_rows(*a))
    batch = RowBatch(prompts, [2, 2, 2], [0, 0, 0])
    together = eng.letter_probs(eng.run(batch, _mask_image_plan(eng, batch, list(heads)), logits_at=[batch.length - 1]).logits[:, 0])
    assert len(checks) == 1  # one mask (every layer is full attention), checked once for 4 touched layers
    assert len(folded) >= tiny.n_layers  # and the check's answer was used: the folded path ran in every layer
    for u, p in enumerate(prompts):
        alone = RowBatch([p], [2], [0])
        plan = _mask_image_plan(eng, alone, list(heads[2 * u : 2 * u + 2]))
        probs = eng.letter_probs(eng.run(alone, plan, logits_at=[alone.length - 1]).logits[:, 0])
        torch.testing.assert_close(together[2 * u : 2 * u + 2], probs, rtol=0, atol=1e-5)
    assert (together[0] - together[1]).abs().max() > 1e-4  # the plan acts
