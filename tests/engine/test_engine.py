"""The engine against independent computations (DESIGN.md "Engine" invariants)."""

import pytest
import torch
from PIL import Image

from tests.conftest import ZOO_FAMILIES, family_params
from tests.engine.reference import model_mask, reference_mode
from vheads.data import Item
from vheads.engine import Capture, Engine, mask_keys, positions_mask, row_mask, steer_keys


def _item(options=True):
    img = Image.new("RGB", (96, 64), "white")
    for x in range(0, 96, 7):
        for y in range(0, 64, 5):
            img.putpixel((x, y), ((x * 5) % 255, (y * 9) % 255, 100))
    return Item(
        "t0", "test", img, "what is in panel 3 ?", "A" if options else "red",
        regions={"left": (0, 0, 32, 32), "right": (64, 32, 96, 64)},
        options=("red", "blue", "green", "white") if options else None,
        query_span=(11, 18),
    )


def _plain_logits(lm, prompt):
    lm.model.set_attn_implementation({n: "sdpa" for n in lm.model.config.sub_configs})
    with torch.no_grad():
        return lm.model(**prompt.inputs).logits


@pytest.mark.parametrize("family", family_params())
def test_empty_plan_reproduces_plain_logits(loaded, family):
    lm = loaded[family]
    prompt = lm.adapter.build(_item(), lm.processor)
    plain = _plain_logits(lm, prompt)
    eng = Engine(lm)
    got = eng.forward(prompt).logits
    assert (got - plain).abs().max() <= 1e-5
    # an attached plan that touches nothing is also the plain model
    heads = torch.zeros(1, *eng.shape, dtype=torch.bool)
    T = prompt.layout.n_tokens
    iv = mask_keys(heads, torch.ones(1, T, dtype=torch.bool), torch.ones(1, T, dtype=torch.bool))
    got2 = eng.forward(prompt, eng.plan(1, [iv]), prefix_reuse=False).logits
    assert (got2 - plain).abs().max() <= 1e-5


@pytest.mark.parametrize("family", family_params())
def test_engine_is_causal(loaded, family):
    """Changing a later token must not change earlier logits (the registered mask works)."""
    lm = loaded[family]
    eng = Engine(lm)
    p1 = lm.adapter.build(_item(), lm.processor)
    item2 = _item()
    item2.options = ("red", "blue", "green", "answer")  # a word of every tiny vocabulary ("white" is not)
    p2 = lm.adapter.build(item2, lm.processor)
    i1, i2 = p1.inputs["input_ids"][0], p2.inputs["input_ids"][0]
    n = min(len(i1), len(i2))
    cut = int((i1[:n] != i2[:n]).nonzero()[0])  # first token of the last option that differs
    assert cut >= p1.layout.spans["options"][0]
    a = eng.forward(p1).logits[0, :cut]
    b = eng.forward(p2).logits[0, :cut]
    assert (a - b).abs().max() <= 1e-5


def _eager_attentions(lm, prompt):
    lm.model.set_attn_implementation({n: "eager" for n in lm.model.config.sub_configs})
    with torch.no_grad():
        out = lm.model(**prompt.inputs, output_attentions=True)
    return [a[0].double() for a in out.attentions]  # L x [H, T, T]


@pytest.mark.parametrize("family", family_params())
def test_capture_equals_eager_output_attentions(loaded, family):
    lm = loaded[family]
    prompt = lm.adapter.build(_item(options=False), lm.processor, answer_text="red disk")
    lay = prompt.layout
    T = lay.n_tokens
    attn = _eager_attentions(lm, prompt)
    groups = [lay.regions["left"].positions.tolist(), lay.regions["right"].positions.tolist(), lay.image_positions.tolist()]
    gmask = torch.stack([positions_mask(T, g) for g in groups])[None]  # [1, 3, T]
    sources = {"last": lay.spans["last"], "qspan": lay.spans["query"], "out": lay.spans["answer"]}
    eng = Engine(lm)
    caps = [Capture(positions_mask(T, rows)[None], gmask, name) for name, rows in sources.items()]
    res = eng.forward(prompt, eng.plan(1, captures=caps)).captures
    assert len(attn) == len(lm.attention_layers)  # eager returns maps of the softmax layers only
    for name, rows in sources.items():
        for l, A in zip(lm.attention_layers, attn):
            for gi, g in enumerate(groups):
                want = A[:, rows][:, :, g].sum(-1).mean(-1)  # [H]
                got = res[name][0, l, :, gi].double()
                assert torch.allclose(got, want, atol=1e-5), (name, l, gi, got, want)


def _actions(lay, kind, group, heads, beta=None):
    rows = row_mask(lay, group).nonzero().flatten().tolist()
    img = lay.image_positions.tolist()
    if kind == "mask":
        return {"kind": "mask", "heads": heads, "rows": rows, "keys": img}
    target = lay.regions["left"].positions.tolist()
    return {"kind": "steer", "heads": heads, "rows": rows, "image": img, "target": set(target), "beta": beta}


@pytest.mark.parametrize("family,group", family_params(groups=["all", "image", "question", "last"]))
@pytest.mark.parametrize("kind", ["mask", "steer"])
def test_mask_and_steer_equal_hand_written_softmax(loaded, family, group, kind):
    _against_reference(loaded[family], group, kind)


@pytest.mark.parametrize("family,group", family_params(groups=["all", "question"], fast_groups=("question",)))
@pytest.mark.parametrize("gather", [True, False])
def test_a_mask_equals_hand_written_softmax_gathered_or_not(loaded, family, group, gather, monkeypatch):
    """The same with the gathered path forced on wherever it applies (every pair over the keys
    the mask leaves it) and off (every pair over every key): both equal the reference."""
    from tests.engine.test_gathered import spy_gathered
    from vheads.engine import _schedule

    for share in ("GATHER_SHARE", "GATHER_SHARE_FOLDED"):
        monkeypatch.setattr(_schedule, share, 1.0 if gather else 0.0)
    calls = spy_gathered(monkeypatch)
    _against_reference(loaded[family], group, "mask")
    assert bool(calls) == gather


def _against_reference(lm, group, kind):
    prompt = lm.adapter.build(_item(), lm.processor)
    lay = prompt.layout
    T = lay.n_tokens
    L, H = lm.n_layers, lm.n_heads
    A = lm.attention_layers  # the layers with heads (all but a hybrid model's linear-attention layers)
    head_sets = [[(A[0], 0), (A[1], 2)], [(l, h) for l in A for h in range(H)], [(A[1], 1)]]
    beta = 3.0
    per_row = [[_actions(lay, kind, group, hs, beta)] for hs in head_sets]
    with reference_mode(lm.model, per_row, model_mask(lm.model, lay.image_positions.tolist(), T)):
        with torch.no_grad():
            inputs = {k: torch.cat([v] * len(head_sets)) for k, v in prompt.inputs.items()}
            want = lm.model(**inputs).logits.double()
    eng = Engine(lm)
    heads = torch.zeros(len(head_sets), L, H, dtype=torch.bool)
    for b, hs in enumerate(head_sets):
        for l, h in hs:
            heads[b, l, h] = True
    rows = row_mask(lay, group).expand(len(head_sets), T)
    img = positions_mask(T, lay.image_positions).expand(len(head_sets), T)
    if kind == "mask":
        iv = mask_keys(heads, rows, img)
    else:
        tgt = positions_mask(T, lay.regions["left"].positions).expand(len(head_sets), T)
        iv = steer_keys(heads, rows, tgt, img, beta)
    for reuse in (False, True):
        got = eng.forward(prompt, eng.plan(len(head_sets), [iv]), prefix_reuse=reuse).logits.double()
        assert (got - want[:, -got.shape[1]:]).abs().max() <= 2e-4, (reuse, (got - want[:, -got.shape[1]:]).abs().max())
    # the intervention did something (so the comparison is not vacuous)
    plain = _plain_logits(lm, prompt).double()
    assert (want[1] - plain[0]).abs().max() > 1e-4


@pytest.mark.parametrize("family,group", family_params(["qwen3_vl", "llava", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "gemma3", "glm4v",
                                                     *ZOO_FAMILIES], ["question", "all"], fast_groups=("question",)))
def test_batched_head_sets_equal_separate_runs_and_prefix_reuse_equals_recompute(loaded, family, group):
    lm = loaded[family]
    eng = Engine(lm)
    prompt = lm.adapter.build(_item(), lm.processor)
    lay = prompt.layout
    T = lay.n_tokens
    L, H = eng.shape
    g = torch.Generator().manual_seed(0)
    heads = torch.rand(6, L, H, generator=g) < 0.3
    heads[:, [l for l in range(L) if l not in lm.attention_layers]] = False  # linear-attention layers have no heads
    rows = row_mask(lay, group).expand(6, T)
    keys = positions_mask(T, lay.image_positions).expand(6, T)
    batched = eng.forward(prompt, eng.plan(6, [mask_keys(heads, rows, keys)]), prefix_reuse=True, logits_at=[T - 1]).logits
    for b in range(6):
        one = eng.forward(prompt, eng.plan(1, [mask_keys(heads[b : b + 1], rows[:1], keys[:1])]), prefix_reuse=False, logits_at=[T - 1]).logits
        assert (batched[b] - one[0]).abs().max() <= 1e-5


def test_plan_with_wrong_head_shape_is_refused(loaded):
    lm = loaded["qwen3_vl"]
    eng = Engine(lm)
    L, H = eng.shape
    T = 10
    iv = mask_keys(torch.zeros(1, L, H + 1, dtype=torch.bool), torch.ones(1, T, dtype=torch.bool), torch.ones(1, T, dtype=torch.bool))
    with pytest.raises(ValueError, match="intervention heads have shape"):
        eng.plan(1, [iv])


def test_non_finite_beta_is_refused():
    with pytest.raises(ValueError, match="finite"):
        steer_keys(torch.ones(1, 1, 1, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool), float("inf"))


def test_unknown_row_group_is_refused(loaded):
    lm = loaded["qwen3_vl"]
    lay = lm.adapter.build(_item(), lm.processor).layout
    with pytest.raises(ValueError, match="unknown row group 'middle'"):
        row_mask(lay, "middle")
