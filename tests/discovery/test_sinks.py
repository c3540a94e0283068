"""The sink rule (``sinks=drop``): image tokens with a massive hidden state leave the key region.

A planted case on a small random Qwen3-VL: one image token of the asked panel gets a massive
hidden state (a hook adds a vector of norm 1,000 at the output of decoder layer 1), and two
heads of layer 0 are edited to put nearly all their attention on that token. The sink-blind
``gaze`` credits them with the panel; ``gaze_nosink`` does not — both checked against eager
attention summed by hand, the threshold against the hidden states' norms.
"""

import contextlib
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from tests.discovery.planting import plant_region_heads
from vheads._errors import VheadsError
from vheads.data import Item
from vheads.discovery import load_headset
from vheads.discovery._point_discovery import discover_scores
from vheads.discovery._score_space import (
    SINK_FACTOR, SINK_LAYER, ScorePoint, aggregate, parse_score, point_statistics, sink_free_keys, sink_tokens,
)
from vheads.engine import Capture, Engine, positions_mask

PANEL = 64  # 2 x 2 tokens per panel on the small Qwen3-VL (32-px merged patches)
PLANTED = [(0, 0), (0, 1)]  # one KV head's two query heads


def panel1_items(n: int) -> list[Item]:
    """1 x 6 strips of 64-px panels, every question about panel 1 (one token layout for all)."""
    rng = np.random.default_rng(0)
    items = []
    for i in range(n):
        canvas = rng.integers(0, 255, size=(PANEL, PANEL * 6, 3), dtype=np.uint8)
        q = "what is in panel 1 ?"
        items.append(Item(id=f"sink-{i}", kind="strip-ordinal", image=Image.fromarray(canvas), question=q, answer="x",
                          regions={f"panel{p + 1}": (p * PANEL, 0, (p + 1) * PANEL, PANEL) for p in range(6)},
                          target="panel1", query_span=(q.index("panel"), len(q) - 2), meta={"corpus": "sink"}))
    return items


def _layers(lm):
    return lm.model.get_decoder().layers


@contextlib.contextmanager
def massive(lm, position: int, size: float = 1000.0):
    """Add a vector of norm ``size`` to every row's hidden state at ``position``, leaving decoder
    layer 1 (transformers' hidden state 2): a planted massive activation."""
    D = lm.model.config.get_text_config().hidden_size
    v = torch.randn(D, generator=torch.Generator().manual_seed(1))
    v = v / v.norm() * size

    def hook(module, args, out):
        h = (out[0] if isinstance(out, tuple) else out).clone()
        h[:, position] += v.to(h.dtype)
        return (h, *out[1:]) if isinstance(out, tuple) else h

    handle = _layers(lm)[1].register_forward_hook(hook)
    try:
        yield v
    finally:
        handle.remove()


@torch.no_grad()
def sharpen(lm):
    """Qwen3's q/k norms bound a planted logit: scale layer 0's query norm on the planted
    coordinate (``plant_region_heads``' default ``dim``) so the planted heads' attention sits
    almost all on their key."""
    _layers(lm)[0].self_attn.q_norm.weight[lm.head_dim // 2 - 1] *= 8.0


def _forward(lm, prompt, **kw):
    with torch.no_grad():
        return lm.model(**prompt.inputs, **kw)


def _eager_attention(lm, prompt):
    lm.model.set_attn_implementation({n: "eager" for n in lm.model.config.sub_configs})
    try:
        attn = _forward(lm, prompt, output_attentions=True).attentions  # L x [1, H, T, T]
    finally:
        lm.model.set_attn_implementation({n: "sdpa" for n in lm.model.config.sub_configs})
    return torch.stack([a[0].double() for a in attn]).numpy()  # [L, H, T, T]


def test_a_planted_sink_is_dropped_and_its_heads_lose_the_credit(small_qwen):
    lm = small_qwen
    items = panel1_items(3)
    lay = lm.adapter.build(items[0], lm.processor).layout
    img = lay.image_positions.tolist()
    sink = img[0]  # the first image token: top-left of panel 1, the asked panel
    region = lay.regions["panel1"].positions.tolist()
    assert sink in region and len(region) > 1
    plant_region_heads(lm, items, PLANTED, keys=lambda it, la: [la.image_positions[0].item()])
    sharpen(lm)
    clean = [_forward(lm, lm.adapter.build(it, lm.processor), output_hidden_states=True).hidden_states[SINK_LAYER][0].double()
             for it in items]  # [T, D] each, before the plant's hook
    blind, aware = parse_score("gaze"), parse_score("gaze_nosink")
    with massive(lm, sink) as v:
        sb = point_statistics(Engine(lm), items, [None] * 3, blind)
        sa = point_statistics(Engine(lm), items, [None] * 3, aware)
        A = np.stack([_eager_attention(lm, lm.adapter.build(it, lm.processor))[:, :, lay.last] for it in items])  # [N, L, H, T]
    # the threshold: factor x the median image-token norm of the hidden state leaving layer 1, the sink's planted
    for i, h in enumerate(clean):
        h = h.clone()
        h[sink] += v.double()
        norms = h[img].norm(dim=-1).numpy()
        assert sa.sinks[i]["dropped"] == [0]
        assert sa.sinks[i]["threshold"] == pytest.approx(SINK_FACTOR * np.median(norms), rel=1e-5)
    # the planted heads look at the sink: the sink-blind score credits them with the panel, the sink-aware one not
    for lh in PLANTED:
        assert A[:, lh[0], lh[1], sink].min() > 0.9
    keep = [t for t in region if t != sink]
    np.testing.assert_allclose(sb.per_item, A[..., region].sum(-1), atol=1e-4)  # float32 next to a 1,000-norm state
    np.testing.assert_allclose(sa.per_item, A[..., keep].sum(-1), atol=1e-4)
    rb = aggregate(sb, blind, lm.n_heads, tuple(lm.attention_layers), lm.n_layers)
    ra = aggregate(sa, aware, lm.n_heads, tuple(lm.attention_layers), lm.n_layers)
    top_b = {lh for lh, _ in zip(sorted(np.ndindex(rb.scores.shape), key=lambda lh: -rb.scores[lh]), range(2))}
    assert top_b == set(PLANTED)
    assert all(ra.scores[lh] < 0.1 for lh in PLANTED)
    assert not set(ra.heads) & set(PLANTED)
    assert ra.sinks["n_dropped"] == 3 and ra.sinks["factor"] == SINK_FACTOR and rb.sinks is None


def test_hidden_norms_are_read_in_the_capture_forward(small_qwen):
    """The engine's ``hidden_norm`` equals the norms of transformers' own hidden states
    (0: input embeddings; l: output of decoder layer l-1) for every layer before the last
    (transformers applies the final norm to its last one)."""
    lm = small_qwen
    item = panel1_items(1)[0]
    p = lm.adapter.build(item, lm.processor)
    T = p.layout.n_tokens
    hs = _forward(lm, p, output_hidden_states=True).hidden_states
    rows = positions_mask(T, [p.layout.last])
    for layer in range(lm.n_layers):
        got = Engine(lm).capture_prompts([(p, [Capture(rows, rows[None], "c")])], layer)[0]["hidden_norm"]
        np.testing.assert_allclose(got.numpy(), hs[layer][0].float().norm(dim=-1).numpy(), rtol=1e-5, err_msg=str(layer))


def test_sink_tokens_exceed_factor_times_the_median_norm():
    norms = np.array([1.0, 2.0, 3.0, 40.0, 2.5, 31.0])
    sink, thr = sink_tokens(norms, 10.0)
    assert thr == 10.0 * 2.75  # median of 1, 2, 2.5, 3, 31, 40
    assert sink.tolist() == [False, False, False, True, False, True]


def test_sink_free_keys_sum_the_region_without_its_sinks():
    # two heads, four image keys; keys 0..2 are the region, key 1 a sink
    per_key = np.array([[[0.05, 0.80, 0.05, 0.02],     # head 0: its mass sits on the sink
                         [0.20, 0.00, 0.25, 0.10]]])   # head 1: spread over the region
    region = np.array([True, True, True, False])
    sink = np.array([False, True, False, False])
    # sink-blind, head 0 would lead: 0.90 against 0.45; with the sink left out (by hand):
    assert sink_free_keys(per_key, region, np.zeros(4, bool), "mass")[0].tolist() == pytest.approx([0.90, 0.45])
    assert sink_free_keys(per_key, region, sink, "mass")[0].tolist() == pytest.approx([0.10, 0.45])
    assert sink_free_keys(per_key, region, sink, "mean")[0].tolist() == pytest.approx([0.05, 0.225])
    assert sink_free_keys(per_key, region, np.ones(4, bool), "mean")[0].tolist() == [0.0, 0.0]  # nothing left


@pytest.mark.parametrize("text,fragment", [
    ("sinks=drop,sink_factor=0", "sink_factor"), ("sinks=drop,sink_factor=-2", "sink_factor"),
    ("sinks=drop,sink_factor=1", "above 1"), ("sinks=drop,sink_factor=nan", "sink_factor"),
    ("sinks=drop,sink_factor=big", "'big'"), ("sinks=drop,sink_layer=-1", "sink_layer"),
    ("sink_factor=5", "sinks=drop"), ("sinks=maybe", "'maybe'"),
])
def test_bad_sink_values_are_refused_with_one_line(text, fragment):
    with pytest.raises(VheadsError) as e:
        parse_score(text)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_a_sink_layer_past_the_model_is_refused_before_the_forward(small_qwen):
    engine = SimpleNamespace(lm=small_qwen, capture_prompts=lambda *a, **k: pytest.fail("a forward ran"))
    with pytest.raises(VheadsError, match="sink_layer 99") as e:
        point_statistics(engine, panel1_items(1), [None], ScorePoint(sinks="drop", sink_layer=99))
    assert "\n" not in str(e.value)


def test_a_sink_blind_point_records_what_it_did_before_the_rule():
    assert set(parse_score("gaze").to_dict()) == {"rows", "region", "norm", "keys", "across", "select", "k"}
    d = parse_score("gaze_nosink").to_dict()
    assert (d["sinks"], d["sink_layer"], d["sink_factor"]) == ("drop", SINK_LAYER, SINK_FACTOR)
    assert ScorePoint(**d) == parse_score("gaze_nosink")
    assert parse_score("sinks=drop,sink_layer=0,sink_factor=4.5") == ScorePoint(sinks="drop", sink_layer=0, sink_factor=4.5)


def test_the_head_set_file_records_the_threshold_and_the_dropped_tokens(small_qwen, tmp_path):
    from vheads.discovery import Corpus

    lm = small_qwen
    items = panel1_items(2)
    lay = lm.adapter.build(items[0], lm.processor).layout
    corpus = Corpus("sink", "sk", "test:sink", "ordinal", items)
    with massive(lm, lay.image_positions[0].item()):
        recs = discover_scores(lm, [corpus], [("gaze", parse_score("gaze")), ("gaze_nosink", parse_score("gaze_nosink"))],
                               k=2, out=tmp_path, progress=False)
    d = json.loads((tmp_path / "sk-ord-gaze_nosink.json").read_text())
    assert d["setting"]["score"]["sinks"] == "drop" and d["setting"]["score"]["sink_factor"] == SINK_FACTOR
    assert [(it["item"], it["dropped"]) for it in d["sinks"]["items"]] == [("sink-0", [0]), ("sink-1", [0])]
    assert d["sinks"] == recs[1].sinks
    back = load_headset(tmp_path / "sk-ord-gaze_nosink.json")
    assert back.setting.point == ScorePoint(**{**parse_score("gaze_nosink").to_dict(), "k": 2})
    assert back.sinks == d["sinks"]
    blind = json.loads((tmp_path / "sk-ord-gaze.json").read_text())
    assert "sinks" not in blind and "sinks" not in blind["setting"]["score"]


def test_the_report_sets_each_sink_aware_head_set_beside_its_twin():
    from vheads.report._methods import sink_twins_table

    heads = {"cm-ord-gaze": [[0, 0], [0, 1], [1, 2]], "cm-ord-gaze_nosink": [[1, 2], [2, 3], [0, 1]],
             "cm-ord-vrh": [[3, 3], [2, 3], [0, 0]]}
    gaze = {"rows": "last", "region": "target", "norm": "raw", "keys": "mass", "across": "mean", "select": "flat", "k": 3}
    run = SimpleNamespace(
        score_settings=list(heads), discovery={s: {"headset": h} for s, h in heads.items()},
        score_points={"cm-ord-gaze": gaze, "cm-ord-vrh": {**gaze, "rows": "out"},
                      "cm-ord-gaze_nosink": {**gaze, "sinks": "drop", "sink_layer": 2, "sink_factor": 10.0,
                                             "sinks_dropped": {"n_items_with_sinks": 1, "n_dropped": 2, "items": [{}, {}]}}})
    t = sink_twins_table(run)
    assert len(t.rows) == 1
    row = t.rows[0]
    assert row[:2] == ["cm-ord-gaze_nosink", "cm-ord-gaze"]  # not vrh: another point
    shared = {(1, 2), (0, 1)}  # by hand
    assert row[6] == str(len(shared)) and row[7] == f"{len(shared) / 4:.2f}"  # union: 4 heads
    assert row[3] == "1/2 items, 2 tokens"


def test_a_study_takes_the_sink_rule_in_a_scores_entry():
    from vheads.study._config import config_from_dict
    from vheads.study._scores import named_points

    cfg = config_from_dict({"scores": ["gaze", "gaze_nosink", {"name": "mine", "sinks": "drop", "sink_factor": 5}]})
    got = dict(named_points(cfg))
    assert got["gaze_nosink"] == ScorePoint(sinks="drop") and got["mine"] == ScorePoint(sinks="drop", sink_factor=5.0)
    for bad, fragment in (({"sinks": "drop", "sink_factor": 0}, "sink_factor"), ({"sinks": "drop", "sink_factor": "5"}, "a number")):
        with pytest.raises(VheadsError, match=r"scores\[0\]") as e:
            config_from_dict({"scores": [{"name": "mine", **bad}]})
        assert fragment in str(e.value) and "\n" not in str(e.value)
