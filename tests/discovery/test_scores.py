"""Discovery scores: known answer, independence from the engine, determinism."""

import numpy as np
import torch

from tests.discovery.planting import marked_strip_items, plant_region_heads
from vheads.data.synthetic import strip_items
from vheads.discovery import Setting, discover_headsets, item_region_mass, score_settings, select_heads
from vheads.engine import Engine

PLANTED = [(0, 0), (0, 1), (2, 2), (2, 3)]


def test_setting_ids_read_like_the_papers():
    assert Setting("comics", "referring", "qspan").id == "cm-ref-qsp"
    assert Setting("photo", "ordinal", "last").id == "ph-ord-last"
    assert Setting("coco", "ordinal", "out").id == "co-ord-out"


def test_discovery_ranks_planted_heads_first(small_qwen):
    lm = small_qwen
    items = marked_strip_items(4)
    key = {("marked", "ordinal"): items}
    before = score_settings(lm, key, sources=("qspan",), progress=False)["ma-ord-qsp"].scores
    plant_region_heads(lm, items, PLANTED)
    after = score_settings(lm, key, sources=("qspan", "last"), progress=False)
    for sid in ("ma-ord-qsp", "ma-ord-last"):
        s = after[sid].scores
        assert set(select_heads(s, k=len(PLANTED))) == set(PLANTED), (sid, s)
        others = np.delete(s.ravel(), [l * lm.n_heads + h for l, h in PLANTED])
        assert min(s[lh] for lh in PLANTED) > 2 * others.max()
    # not vacuous: the random model did not already rank them first
    assert set(select_heads(before, k=len(PLANTED))) != set(PLANTED)


def test_region_mass_equals_eager_attention(small_qwen):
    """m[l,h] of each source = mean over the source rows of the eager attention summed over the panel."""
    lm = small_qwen
    item = strip_items("comics", "ordinal", 1, seed=3)[0]
    got = item_region_mass(Engine(lm), item, "red disk")
    prompt = lm.adapter.build(item, lm.processor, answer_text="red disk")
    lm.model.set_attn_implementation({n: "eager" for n in lm.model.config.sub_configs})
    with torch.no_grad():
        attn = lm.model(**prompt.inputs, output_attentions=True).attentions  # L x [1, H, T, T]
    lay = prompt.layout
    keys = lay.regions[item.target].positions.tolist()
    rows = {"last": lay.spans["last"], "qspan": lay.spans["query"], "out": lay.spans["answer"]}
    for src, r in rows.items():
        want = np.stack([a[0].double()[:, r][:, :, keys].sum(-1).mean(-1).numpy() for a in attn])  # [L, H]
        np.testing.assert_allclose(got[src], want, atol=1e-5)


def test_same_seed_gives_same_headset_files_bit_for_bit(small_qwen_dir, tmp_path):
    from vheads.models import load_model

    outs = []
    for run in ("a", "b"):
        lm = load_model(str(small_qwen_dir))
        discover_headsets(lm, ["comics"], ["referring"], ["qspan", "out"], k=3, n=3, seed=5, out=tmp_path / run, progress=False)
        outs.append({p.name: p.read_bytes() for p in sorted((tmp_path / run).iterdir())})
    assert sorted(outs[0]) == ["cm-ref-out.items.npz", "cm-ref-out.json", "cm-ref-qsp.items.npz", "cm-ref-qsp.json"]
    assert outs[0] == outs[1]
