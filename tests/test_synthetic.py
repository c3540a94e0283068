"""The synthetic world: deterministic, regions where the objects are, keys consistent."""

from __future__ import annotations

import numpy as np
import pytest

from vheads.data import OPTION_LETTERS
from vheads.data import synthetic as syn


def _pixels(item) -> np.ndarray:
    return np.asarray(item.image.convert("RGB"), dtype=np.int32)


def _colour_mask(arr: np.ndarray, cls: str, tol: int = 45) -> np.ndarray:
    """Pixels within ``tol`` of class ``cls``'s colour on every channel."""
    return (np.abs(arr - np.array(syn.COLOURS[cls])) <= tol).all(-1)


def _in_box(mask: np.ndarray, box) -> float:
    x0, y0, x1, y1 = box
    inside = mask[y0:y1, x0:x1].sum()
    return inside / max(1, mask.sum())


ALL = [
    lambda seed: syn.strip_items("comics", "ordinal", 6, seed),
    lambda seed: syn.strip_items("photo", "referring", 6, seed),
    lambda seed: syn.strip_items("photo", "ordinal", 6, seed, filled=3),
    lambda seed: syn.grid_items("grid-neutral", 6, seed),
    lambda seed: syn.grid_items("grid-oracle", 6, seed),
    lambda seed: syn.grid_items("grid-blank", 6, seed),
    lambda seed: syn.class_items("matched", 6, seed),
    lambda seed: syn.class_items("mismatched", 6, seed),
    lambda seed: syn.text_items(6, seed),
]


@pytest.mark.parametrize("make", ALL)
def test_generators_are_deterministic_by_seed(make):
    a, b, c = make(3), make(3), make(4)
    for x, y in zip(a, b):
        assert (x.question, x.answer, x.options, x.target, x.regions) == (y.question, y.answer, y.options, y.target, y.regions)
        assert x.image.tobytes() == y.image.tobytes()
    assert any((x.image.tobytes(), x.question, x.options, x.answer) != (z.image.tobytes(), z.question, z.options, z.answer) for x, z in zip(a, c))


@pytest.mark.parametrize("corpus", syn.CORPORA)
@pytest.mark.parametrize("query", syn.STRIP_QUERIES)
def test_strip_panels_hold_their_classes_and_the_key_matches(corpus, query):
    for it in syn.strip_items(corpus, query, 20, seed=1):
        arr = _pixels(it)
        assert arr.shape == (32, 192, 3)
        assert it.kind == f"strip-{query}"
        panels = it.meta["panels"]
        assert sorted(panels) == sorted(syn.CLASSES)  # six filled, each class once
        for p, cls in enumerate(panels):
            mask = _colour_mask(arr, cls)
            assert mask.sum() >= 15, f"{cls} barely visible in {it.id}"
            assert _in_box(mask, it.regions[f"panel{p + 1}"]) >= 0.95
        k = int(it.target.removeprefix("panel"))
        cls = panels[k - 1]
        if query == "ordinal":
            assert it.question == f"what is in panel {k} ?" and it.answer == cls
            assert it.question[slice(*it.query_span)] == f"panel {k}"
        else:
            assert it.question == f"which panel shows the {cls} ?" and it.answer == str(k)
            assert it.question[slice(*it.query_span)] == f"the {cls}"


def test_strip_curriculum_leaves_unasked_panels_blank():
    for it in syn.strip_items("comics", "ordinal", 20, seed=2, filled=2):
        arr = _pixels(it)
        filled = [p for p, c in enumerate(it.meta["panels"]) if c is not None]
        assert len(filled) == 2 and it.target in {f"panel{p + 1}" for p in filled}
        for p, c in enumerate(it.meta["panels"]):
            x0, y0, x1, y1 = it.regions[f"panel{p + 1}"]
            any_class = any(_colour_mask(arr[y0:y1, x0:x1], k).any() for k in syn.CLASSES)
            assert any_class == (c is not None)


def test_corpora_differ_in_image_statistics():
    """Comics panels are flat (few distinct colours); photo panels are noisy textures."""
    def n_colours(item):
        return len(np.unique(_pixels(item).reshape(-1, 3), axis=0))

    comics = [n_colours(it) for it in syn.strip_items("comics", "ordinal", 10, seed=0)]
    photo = [n_colours(it) for it in syn.strip_items("photo", "ordinal", 10, seed=0)]
    assert max(comics) < 60 < 1000 < min(photo)


@pytest.mark.parametrize("kind", ["grid-neutral", "grid-oracle"])
def test_grid_cells_show_the_four_options(kind):
    for it in syn.grid_items(kind, 20, seed=5):
        arr = _pixels(it)
        assert arr.shape == (64, 64, 3)
        assert sorted(it.options) == sorted(it.meta["cells"]) and len(set(it.options)) == 4
        for c, cls in enumerate(it.meta["cells"]):
            assert _in_box(_colour_mask(arr, cls), it.regions[f"cell{c}"]) >= 0.95
        t = int(it.target.removeprefix("cell"))
        assert it.options[OPTION_LETTERS.index(it.answer)] == it.meta["cells"][t]
        if kind == "grid-oracle":
            assert it.question[slice(*it.query_span)] == f"cell {t}"
        else:
            assert it.query_span is None and "cell" not in it.question
    assert set(it.regions) == {"cell0", "cell1", "cell2", "cell3"}
    assert it.regions["cell1"] == (32, 0, 64, 32) and it.regions["cell2"] == (0, 32, 32, 64)  # row-major


def test_grid_blank_is_blank_with_keys_spread_over_letters():
    items = syn.grid_items("grid-blank", 40, seed=0)
    for it in items:
        assert len(np.unique(_pixels(it).reshape(-1, 3), axis=0)) == 1
    assert set(it.answer for it in items) == set(OPTION_LETTERS)


def test_class_items_matched_includes_and_mismatched_excludes_the_shown_class():
    for it in syn.class_items("matched", 30, seed=0):
        assert it.kind == "class-matched"
        assert it.options[OPTION_LETTERS.index(it.answer)] == it.meta["class"]
        assert _colour_mask(_pixels(it), it.meta["class"]).sum() >= 30
    mism = syn.class_items("mismatched", 40, seed=0)
    for it in mism:
        assert it.kind == "class-mismatched"
        assert it.meta["class"] not in it.options and len(set(it.options)) == 4
    assert set(it.answer for it in mism) == set(OPTION_LETTERS)


def test_text_items_state_their_answer_and_show_no_option():
    for it in syn.text_items(30, seed=0):
        named = it.options[OPTION_LETTERS.index(it.answer)]
        assert f"the {named} ." in it.question
        assert it.meta["shown"] is None or it.meta["shown"] not in it.options


def test_every_template_word_is_in_the_vocabulary():
    words = set(syn.WORDS)
    for make in ALL:
        for it in make(0):
            text = it.question + " " + " ".join(it.options or ()) + " " + it.answer
            for w in text.replace("?", " ? ").replace(".", " . ").split():
                assert w in words, w


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: syn.strip_items("cartoon", "ordinal", 2), "unknown corpus 'cartoon'"),
        (lambda: syn.strip_items("comics", "counting", 2), "unknown strip query 'counting'"),
        (lambda: syn.strip_items("comics", "ordinal", 0), "n must be a positive"),
        (lambda: syn.strip_items("comics", "ordinal", 2, filled=7), "filled must be between 1 and 6"),
        (lambda: syn.grid_items("grid-steer", 2), "unknown grid kind"),
        (lambda: syn.class_items("matching", 2), "unknown class arm"),
        (lambda: syn.text_items(-1), "n must be a positive"),
        (lambda: syn.kind_items("video", 2), "unknown item kind"),
    ],
)
def test_bad_inputs_raise_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
