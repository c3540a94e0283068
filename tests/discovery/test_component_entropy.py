"""The Localization Heads paper's spatial entropy as an option of the ``entropy`` selection:
``localization_cc`` against a hand computation from transformers' eager attention; the
``localization`` preset and its record unchanged."""

import math

import numpy as np
import pytest

from tests._flood import components

from vheads._errors import VheadsError
from vheads.discovery import ScorePoint, parse_score


def test_the_option_leaves_the_localization_preset_and_its_record_unchanged():
    loc = parse_score("localization")
    assert loc.entropy == "shannon" and "entropy" not in loc.to_dict()
    cc = parse_score("localization_cc")
    assert cc.entropy == "components" and cc.to_dict()["entropy"] == "components"
    assert ScorePoint(**cc.to_dict()) == cc
    assert {k: v for k, v in cc.to_dict().items() if k != "entropy"} == loc.to_dict()
    assert parse_score("rows=last,region=image,select=entropy,entropy=components,k=3").entropy == "components"
    with pytest.raises(VheadsError, match="entropy 'components' applies to select 'entropy' only"):
        ScorePoint(entropy="components")
    with pytest.raises(VheadsError, match="unknown entropy 'renyi'"):
        ScorePoint(select="entropy", entropy="renyi")


def _hand_component_entropy(values, rc):
    """-Σ P log P over the 8-connected components of the tokens above the mean (equal tokens:
    P = a component's token count over the kept count); log(n tokens) when none is above."""
    keep = {tuple(rc[i]) for i in range(len(values)) if values[i] > values.mean()}
    sizes = [len(comp) for comp in components(keep)]
    if not sizes:
        return math.log(len(values))
    p = np.array(sizes) / sum(sizes)
    return float(-(p * np.log(p)).sum())


def test_components_entropy_of_each_head_matches_eager_attention_by_hand(loaded):
    from vheads.data.synthetic import kind_items
    from vheads.discovery._score_space import point_statistics
    from vheads.doctor._reference import eager_attentions
    from vheads.engine import Engine, install

    lm = loaded["qwen3_vl"]
    items = kind_items("grid-oracle", 2, 3)
    stats = point_statistics(Engine(lm), items, [None] * len(items), parse_score("localization_cc"))
    for i, item in enumerate(items):
        pr = lm.adapter.build(item, lm.processor)
        lay = pr.layout
        attn = eager_attentions(lm.model, {k: v.to(lm.device) for k, v in pr.inputs.items()})
        install(lm.model)
        img, last = lay.image_positions, lay.last
        rc = lay.image_rc.numpy()
        assert len(set(lay.image_tile.tolist())) == 1  # one untiled grid of equal tokens
        for l, A in enumerate(attn):
            for h in range(A.shape[0]):
                a = A[h, last, img].numpy()
                a = a / a.sum()
                assert stats.entropy[i, l, h] == pytest.approx(_hand_component_entropy(a, rc), abs=1e-9)
