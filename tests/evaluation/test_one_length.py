"""Forwards of one length (``Batching.one_length``): where padding costs more than it saves
(fused attention kernels that cannot take a padding mask, i.e. CUDA), a forward holds only
requests of one (prefix, suffix) shape. Forced on here, on a CPU: the same values as packed
forwards, and no forward pads a row."""

from types import SimpleNamespace

import numpy as np
import pytest

from vheads._device import padding_costs_more
from vheads.engine import Batching, Engine, pack
from vheads.evaluation._probe import Action, Probe, run_probes

from tests.evaluation.test_cross_item import _headsets, _items


def test_the_capability_decides():
    assert padding_costs_more("cpu") is False
    assert padding_costs_more("cuda", fused_unmasked=True) is True
    assert padding_costs_more("cuda:1", fused_unmasked=False) is False
    assert padding_costs_more("auto", fused_unmasked=True) is True  # a device map: the GPUs


def _shapes(eng):
    """Record, for every forward the engine runs, the set of (length, split) of its prompts."""
    calls, run = [], eng.run

    def counted(batch, *a, **k):
        calls.append({(p.layout.n_tokens, s) for p, s in zip(batch.prompts, batch.splits)})
        return run(batch, *a, **k)

    eng.run = counted
    return calls


def _req(n_tokens, rows, split):
    return (SimpleNamespace(layout=SimpleNamespace(n_tokens=n_tokens)), rows, split)


def test_pack_keeps_one_shape_per_forward():
    reqs = [_req(10, 2, 0), _req(10, 2, 0), _req(12, 2, 0), _req(12, 1, 4), _req(12, 1, 4), _req(10, 3, 0)]
    mixed = pack(reqs, Batching(max_rows=64, one_length=False))
    one = pack(reqs, Batching(max_rows=64, one_length=True))
    assert mixed == [[0, 1, 2, 3, 4, 5]]
    assert one == [[0, 1], [2], [3, 4], [5]]
    for g in one:
        assert len({(reqs[i][0].layout.n_tokens, reqs[i][2]) for i in g}) == 1
    # the limits still hold inside a shape
    assert pack(reqs[:2], Batching(max_rows=3, one_length=True)) == [[0], [1]]


@pytest.mark.parametrize("family", ["qwen3_vl"])
def test_one_length_forwards_equal_packed_forwards_and_pad_nothing(loaded, family):
    lm = loaded[family]
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    prompts = prompts + prompts[:2]  # two lengths twice: they share forwards
    assert len({p.layout.n_tokens for p in prompts}) == 3
    hs = _headsets(lm.n_layers, lm.n_heads)
    probes = [Probe(pr, None) for pr in prompts] + [Probe(pr, a, hs) for pr in prompts
                                                     for a in (Action("mask", rows="all"), Action("mask", rows="question"))]
    packed_eng = Engine(lm, Batching(one_length=False))
    packed_calls = _shapes(packed_eng)
    packed = run_probes(packed_eng, probes)
    one_eng = Engine(lm, Batching(one_length=True))
    one_calls = _shapes(one_eng)
    one = run_probes(one_eng, probes)
    for a, b in zip(packed, one):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert any(len(c) > 1 for c in packed_calls)  # packing puts mixed shapes in one forward...
    assert all(len(c) == 1 for c in one_calls)  # ...one length never does
    assert len(one_calls) < len(probes)  # and prompts of one shape still share forwards
