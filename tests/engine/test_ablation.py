"""Head-output ablations (zero, mean, resample) against an eager reference that replaces the
head's output by hand (DESIGN.md "Ablation types").

The reference runs the plain model (sdpa, no vheads attention) with the head outputs written
by hand: either at the attention output (a wrapper around sdpa, plain loops over heads and
rows) or, for ``zero``, as a forward pre-hook on ``o_proj`` that writes the head's slice of
its input. The replacement values of ``mean`` / ``resample`` are recorded by the same
wrapper on clean forwards and averaged per row role here, by hand.
"""

import contextlib

import pytest
import torch
from PIL import Image
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from vheads.data import Item
from vheads.engine import Batching, Engine, HeadAblation, row_mask
from vheads.evaluation import HeadSet
from vheads.evaluation._ablation import donors, item_references, reference_means
from vheads.evaluation._probe import Action, Probe, run_scores

REF = "vheads_test_ablation"
SPEC: dict = {}
#: the tiny model, one hybrid family (linear-attention layers between softmax ones), two tiled ones, one plain
ABLATION_FAMILIES = ["tiny", "qwen3_5", "internvl", "smolvlm", "llava"]


def _item(seed: int) -> Item:
    """Items of one layout (same question, options, image size), different pictures."""
    img = Image.new("RGB", (96, 64), "white")
    for x in range(0, 96, 7):
        for y in range(0, 64, 5):
            img.putpixel((x, y), ((x * 5 + 40 * seed) % 255, (y * 9 + 70 * seed) % 255, (100 + 30 * seed) % 255))
    return Item(f"a{seed}", "test", img, "what is in panel 3 ?", "A", regions={"left": (0, 0, 32, 32)},
                options=("red", "blue", "green", "white"), query_span=(11, 18))


def _by_hand_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """sdpa, then: record every head's output (clean runs), or write ``SPEC["write"][layer]``
    = ``{(head, row): vector or 0}`` into it."""
    out, w = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    layer = module.layer_idx
    if "record" in SPEC:
        SPEC["record"][layer] = out[0].double().clone()  # [T, H, D]
    out = out.clone()
    for (h, t), v in SPEC.get("write", {}).get(layer, {}).items():
        out[0, t, h] = v
    return out, w


@contextlib.contextmanager
def _reference(model, **spec):
    AttentionInterface.register(REF, _by_hand_attention)
    AttentionMaskInterface.register(REF, sdpa_mask)
    model.set_attn_implementation({n: (REF if n == "text_config" else "sdpa") for n in model.config.sub_configs})
    SPEC.clear()
    SPEC.update(spec)
    try:
        with torch.no_grad():
            yield
    finally:
        SPEC.clear()


def _roles(lay) -> list[str]:
    """Row roles written out: image token k, the last row, the question / options / answer
    spans, every other row 'text'."""
    img = {int(t): k for k, t in enumerate(lay.image_positions)}
    out = []
    for t in range(lay.n_tokens):
        if t == lay.last:
            out.append("last")
        elif t in img:
            out.append(f"image:{img[t]}")
        else:
            out.append(next((s for s in ("question", "options", "answer") if t in lay.spans.get(s, [])), "text"))
    return out


def _clean_outputs(lm, prompt) -> dict[int, torch.Tensor]:
    """Every softmax layer's head outputs of an unablated forward: {layer: [T, H, D]}."""
    rec: dict = {}
    with _reference(lm.model, record=rec):
        lm.model(**prompt.inputs)
    return rec


def _role_means(lm, prompts) -> dict[tuple[int, int, str], torch.Tensor]:
    """{(layer, head, role): mean output over every row of that role of ``prompts``}."""
    acc: dict = {}
    for pr in prompts:
        outs = _clean_outputs(lm, pr)
        for t, role in enumerate(_roles(pr.layout)):
            for l, o in outs.items():
                for h in range(o.shape[1]):
                    s, n = acc.get((l, h, role), (0.0, 0))
                    acc[(l, h, role)] = (s + o[t, h], n + 1)
    return {k: s / n for k, (s, n) in acc.items()}


def _reference_logits(lm, prompt, heads, rows, values) -> torch.Tensor:
    """The last row's logits with head (l, h) ∈ ``heads`` replaced at ``rows`` by
    ``values(l, h, t)`` (0 for zero)."""
    write: dict = {}
    for l, h in heads:
        for t in rows:
            write.setdefault(l, {})[(h, t)] = values(l, h, t)
    with _reference(lm.model, write=write):
        return lm.model(**prompt.inputs).logits[0, -1].double()


def _o_proj_zero_logits(lm, prompt, heads, rows) -> torch.Tensor:
    """The zero ablation as a forward pre-hook on ``o_proj`` of the plain model: the head's
    slice of the projection's input set to 0 at ``rows``."""
    lm.model.set_attn_implementation({n: "sdpa" for n in lm.model.config.sub_configs})
    layers = lm.model.get_decoder().layers
    hooks = []
    for l in {l for l, _ in heads}:
        hs = [h for ll, h in heads if ll == l]

        def pre(module, args, hs=hs):
            x = args[0].clone()
            D = x.shape[-1] // lm.n_heads
            for h in hs:
                x[0, rows, h * D : (h + 1) * D] = 0.0
            return (x, *args[1:])

        hooks.append(layers[l].self_attn.o_proj.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            return lm.model(**prompt.inputs).logits[0, -1].double()
    finally:
        for hk in hooks:
            hk.remove()


def _head_sets(lm, n=3):
    A = lm.attention_layers
    H = lm.n_heads
    return [[(A[0], 0), (A[-1], H - 1)], [(l, h) for l in A for h in range(0, H, 2)], [(A[-1], 1)]][:n]


@pytest.fixture(scope="module")
def models(loaded):
    from vheads.models import load_model

    cache = {}

    def get(family):
        if family not in cache:
            cache[family] = load_model("tiny") if family == "tiny" else loaded[family]
        return cache[family]

    return get


#: (ablation, group, family) run by default; the rest of the grid runs with the slow tests
FAST = {("zero", "all", "tiny"), ("mean", "question", "tiny"), ("resample", "question", "tiny"), ("zero", "all", "qwen3_5"),
        ("mean", "all", "qwen3_5"), ("mean", "question", "internvl"), ("resample", "all", "smolvlm"), ("zero", "question", "llava")}


def _grid(*axes):
    import itertools

    return [pytest.param(*p, marks=() if p in FAST else pytest.mark.slow) for p in itertools.product(*axes)]


@pytest.mark.parametrize("ablation,group,family", _grid(["zero", "mean", "resample"], ["all", "question"], ABLATION_FAMILIES))
def test_each_ablation_equals_the_eager_reference_written_by_hand(models, family, group, ablation):
    lm = models(family)
    items = [_item(s) for s in range(4)]  # 0, 1: evaluated; 2, 3: the mean's reference set
    prompts = [lm.adapter.build(it, lm.processor) for it in items]
    eng = Engine(lm)
    sets = _head_sets(lm)
    L, H = lm.n_layers, lm.n_heads
    refs = item_references(eng, ablation, prompts[:2], items[2:] if ablation == "mean" else None, seed=5)  # resample: each other
    probes = [Probe(pr, Action("ablate", rows=group, ablation=ablation), [HeadSet(hs, L, H) for hs in sets], ref)
              for pr, ref in zip(prompts[:2], refs)]
    got = run_scores(eng, probes)  # both items in one forward (cross-item), prefix reuse at question rows
    ids = lm.adapter.letter_token_ids(lm.processor)
    if ablation == "mean":
        means = _role_means(lm, prompts[2:])
    for i, pr in enumerate(prompts[:2]):
        rows = row_mask(pr.layout, group).nonzero().flatten().tolist()
        roles = _roles(pr.layout)
        if ablation == "resample":
            donor = int(donors(2, 5)[i])
            means = _role_means(lm, [prompts[donor]])
        for b, hs in enumerate(sets):
            values = (lambda l, h, t: 0.0) if ablation == "zero" else (lambda l, h, t: means[(l, h, roles[t])])
            want = _reference_logits(lm, pr, hs, rows, values)
            want5 = torch.cat([want[ids], torch.logsumexp(want, -1, keepdim=True)])
            assert abs(got[i][b] - want5.numpy()).max() <= 2e-4, (i, b, abs(got[i][b] - want5.numpy()).max())
    # the ablation did something: the first item's rows differ from its unablated logits
    plain = _reference_logits(lm, prompts[0], [], [], None)
    assert abs(got[0][1][:4] - plain[ids].numpy()).max() > 1e-4


@pytest.mark.parametrize("family", ABLATION_FAMILIES)
def test_zero_equals_the_head_slice_of_o_proj_input_set_to_zero(models, family):
    lm = models(family)
    pr = lm.adapter.build(_item(0), lm.processor)
    eng = Engine(lm)
    sets = _head_sets(lm)
    L, H = lm.n_layers, lm.n_heads
    T = pr.layout.n_tokens
    heads = torch.zeros(len(sets), L, H, dtype=torch.bool)
    for b, hs in enumerate(sets):
        for l, h in hs:
            heads[b, l, h] = True
    rows = row_mask(pr.layout, "all").expand(len(sets), T)
    got = eng.forward(pr, eng.plan(len(sets), ablations=[HeadAblation(heads, rows)]), logits_at=[T - 1]).logits[:, 0].double()
    for b, hs in enumerate(sets):
        want = _o_proj_zero_logits(lm, pr, hs, list(range(T)))
        assert (got[b] - want).abs().max() <= 2e-4


@pytest.mark.parametrize("family,group", [("tiny", "all"), ("internvl", "question"), ("internvl", "all"),
                                          *(pytest.param(f, g, marks=pytest.mark.slow) for f, g in (("tiny", "question"), ("qwen3_5", "question"), ("qwen3_5", "all")))])
def test_batched_ablated_head_sets_equal_separate_runs_and_prefix_reuse_equals_recompute(models, family, group):
    lm = models(family)
    prompts = [lm.adapter.build(_item(s), lm.processor) for s in range(3)]
    pr = prompts[0]
    eng = Engine(lm)
    alone = Engine(lm, Batching(share_layers=False))
    T = pr.layout.n_tokens
    L, H = eng.shape
    g = torch.Generator().manual_seed(0)
    heads = torch.rand(6, L, H, generator=g) < 0.3
    heads[:, [l for l in range(L) if l not in lm.attention_layers]] = False  # linear-attention layers have no heads
    heads[1] = heads[0]  # two rows alike: layer-prefix sharing runs them once
    rows = row_mask(pr.layout, group).expand(6, T)
    ref = reference_means(eng, [_item(1), _item(2)])
    from vheads.engine import row_roles

    role = ref.index(row_roles(pr.layout), "test").expand(6, T)
    abl = {"zero": HeadAblation(heads, rows), "mean": HeadAblation(heads, rows, ref.means, role)}
    for kind, ab in abl.items():
        plan = eng.plan(6, ablations=[ab])
        assert plan.first_row() == int(rows[0].nonzero()[0])
        batched = eng.forward(pr, plan, prefix_reuse=True, logits_at=[T - 1]).logits
        recomputed = alone.forward(pr, plan, prefix_reuse=False, logits_at=[T - 1]).logits
        assert (batched - recomputed).abs().max() <= 1e-5, kind
        for b in range(6):
            one = HeadAblation(heads[b : b + 1], rows[:1], ab.values, None if ab.role is None else ab.role[:1])
            single = alone.forward(pr, eng.plan(1, ablations=[one]), prefix_reuse=False, logits_at=[T - 1]).logits
            assert (batched[b] - single[0]).abs().max() <= 1e-5, (kind, b)


def test_an_ablated_row_without_a_replacement_is_refused():
    heads = torch.ones(1, 2, 2, dtype=torch.bool)
    rows = torch.ones(1, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="no replacement"):
        HeadAblation(heads, rows, torch.zeros(2, 2, 1, 4), torch.tensor([[0, -1, 0]]))


def test_donors_are_a_seeded_derangement():
    for n in (2, 3, 7):
        d = donors(n, 11)
        assert sorted(d.tolist()) == list(range(n)) and all(d[i] != i for i in range(n))
        assert (donors(n, 11) == d).all()


def test_resample_from_a_chosen_donor_equals_the_mean_over_that_donor_alone(models):
    """The study picks each item's donor over the whole set: resampling from donor d is the
    mean ablation with the reference set {d}."""
    lm = models("tiny")
    items = [_item(s) for s in range(4)]
    prompts = [lm.adapter.build(it, lm.processor) for it in items[:2]]
    eng = Engine(lm)
    L, H = lm.n_layers, lm.n_heads
    hs = [HeadSet(s, L, H) for s in _head_sets(lm)]
    donors_of = [items[3], items[2]]
    res = item_references(eng, "resample", prompts, donors_of)
    got = run_scores(eng, [Probe(pr, Action("ablate", rows="all", ablation="resample"), hs, r) for pr, r in zip(prompts, res)])
    for i, pr in enumerate(prompts):
        (ref,) = item_references(eng, "mean", [pr], [donors_of[i]])
        want = run_scores(eng, [Probe(pr, Action("ablate", rows="all", ablation="mean"), hs, ref)])[0]
        assert abs(got[i] - want).max() <= 1e-5


def test_a_mean_reference_set_is_recorded_once_per_engine(models, monkeypatch):
    from vheads.evaluation import _ablation

    lm = models("tiny")
    eng = Engine(lm)
    calls = []
    real = _ablation.record_head_outputs
    monkeypatch.setattr(_ablation, "record_head_outputs", lambda e, p: calls.append(len(p)) or real(e, p))
    first = reference_means(eng, [_item(1), _item(2)])
    again = reference_means(eng, [_item(1), _item(2)])  # another NCS call of the same study
    assert calls == [2] and again is first
    other = reference_means(eng, [_item(3)])  # another reference set: recorded
    assert calls == [2, 1] and other.label != first.label
    fresh = reference_means(Engine(lm), [_item(1), _item(2)])  # another engine records its own
    assert calls == [2, 1, 2] and torch.equal(fresh.means, first.means)


@pytest.mark.parametrize("budget", [None, 1])  # 1 byte: one prompt per forward
def test_recorded_head_outputs_are_the_per_role_sums_within_the_byte_budget(models, budget, monkeypatch):
    """``record_head_outputs`` (sums on the device, one copy per forward, forwards bounded by
    ``RECORD_BYTES``) equals the per-role sums of the head outputs a plain forward gives."""
    from vheads.evaluation import _ablation

    lm = models("tiny")
    eng = Engine(lm)
    if budget is not None:
        monkeypatch.setattr(_ablation, "RECORD_BYTES", budget)
    sizes, run = [], eng.run
    eng.run = lambda batch, *a, **k: sizes.append(batch.n_rows) or run(batch, *a, **k)
    prompts = [lm.adapter.build(_item(i), lm.processor) for i in (1, 2, 3)]
    got = _ablation.record_head_outputs(eng, prompts)
    assert sizes == ([1, 1, 1] if budget else [3])
    for pr, (roles, sums, counts) in zip(prompts, got):
        outs = _clean_outputs(lm, pr)
        names = _roles(pr.layout)
        assert roles == list(dict.fromkeys(names))
        for j, role in enumerate(roles):
            at = [t for t, r in enumerate(names) if r == role]
            assert counts[j] == len(at)
            for l, o in outs.items():
                assert torch.allclose(sums[l, :, j].double(), o[at].sum(0), atol=1e-4)
