"""Question templates: the wording every item builder asks with, its query span, and the
refusals of templates that cannot be used."""

import re

import pytest

from vheads.data import DEFAULT_TEMPLATES, TemplateError, Templates, check_vocabulary, templates_from_dict
from vheads.data import synthetic as syn
from vheads.data.loaders import strip_item


@pytest.mark.parametrize("key,value,question,phrase", [
    ("ordinal", 3, "what is in panel 3 ?", "panel 3"),
    ("referring", "disk", "which panel shows the disk ?", "the disk"),
    ("cell", 2, "what is in cell 2 ?", "cell 2"),
    ("object", None, "which object is shown ?", None),
    ("text", "ring", "the named object is the ring . which object is named ?", None),
])
def test_default_templates_ask_the_questions_the_tiny_model_was_trained_on(key, value, question, phrase):
    q, span = DEFAULT_TEMPLATES.fill(key, value)
    assert q == question
    assert (q[span[0]:span[1]] if span else None) == phrase


def test_a_reworded_strip_question_spans_the_bracketed_words_on_every_item():
    t = templates_from_dict({"ordinal": "look closely : what is in [panel number {k}] ?",
                             "referring": "where is {object} ?"})
    for item in syn.strip_items("comics", "ordinal", 12, seed=3, templates=t):
        k = int(item.target.removeprefix("panel"))
        assert item.question == f"look closely : what is in panel number {k} ?"
        a, b = item.query_span
        assert item.question[a:b] == f"panel number {k}"
        assert item.answer == item.meta["panels"][k - 1]
    for item in syn.strip_items("photo", "referring", 12, seed=3, templates=t):
        cls = item.meta["class"]
        assert item.question == f"where is {cls} ?"
        a, b = item.query_span
        assert item.question[a:b] == cls  # no brackets: the placeholder's value alone
        assert item.meta["panels"][int(item.answer) - 1] == cls


def test_the_same_seed_draws_the_same_items_whatever_the_wording():
    t = templates_from_dict({"cell": "[cell {k}] holds what ?", "object": "name the object .", "text": "{object} is named . answer ?"})
    for kind in ("grid-oracle", "grid-neutral", "class-matched", "text"):
        a, b = syn.kind_items(kind, 6, seed=1), syn.kind_items(kind, 6, seed=1, templates=t)
        assert [x.answer for x in a] == [x.answer for x in b] and [x.options for x in a] == [x.options for x in b]
        assert all(x.question != y.question for x, y in zip(a, b))
    for item in syn.kind_items("grid-oracle", 6, seed=1, templates=t):
        cell = item.target.removeprefix("cell")
        assert item.question == f"cell {cell} holds what ?" and item.question[slice(*item.query_span)] == f"cell {cell}"
    for item in syn.kind_items("text", 6, seed=1, templates=t):
        assert item.question == f"{item.meta['class']} is named . answer ?"


def test_real_strip_loaders_use_the_templates_too():
    from PIL import Image

    t = templates_from_dict({"referring": "which panel has [a {object}] in it ?"})
    item = strip_item("mine", "referring", "x", Image.new("RGB", (64, 32)), [(0, 0, 32, 32), (32, 0, 64, 32)],
                      ["dog", "cat"], 1, templates=t)
    assert item.question == "which panel has a cat in it ?" and item.answer == "2"
    assert item.question[slice(*item.query_span)] == "a cat"


@pytest.mark.parametrize("data,match", [
    ({"ordinal": "what is in this panel ?"}, r"'templates\.ordinal' must contain the placeholder \{k\} exactly once"),
    ({"ordinal": "panel {k} or {k} ?"}, r"'templates\.ordinal' must contain the placeholder \{k\} exactly once \(found 2\)"),
    ({"referring": "which panel is {k} ?"}, r"'templates\.referring' has placeholder \{k\}; it takes only \{object\}"),
    ({"object": "which {object} ?"}, r"'templates\.object' has placeholder \{object\}; it takes no placeholder"),
    ({"text": "[the {object}] ?"}, r"'templates\.text' names no region"),
    ({"cell": "[cell] {k} ?"}, r"'templates\.cell': the query span \[\.\.\.\] must contain \{k\}"),
    ({"cell": "[[cell {k}] ?"}, r"'templates\.cell' needs one '\[' before one '\]'"),
    ({"cell": "cell {k:>3} ?"}, r"'templates\.cell': write the placeholder plainly"),
    ({"cell": "cell {k ?"}, r"'templates\.cell' is not a valid template"),
    ({"cells": "cell {k} ?"}, r"unknown template key 'templates\.cells'"),
    ({"ordinal": 7}, r"'templates\.ordinal' must be a non-empty string"),
])
def test_a_template_that_cannot_be_used_is_refused_with_its_key(data, match):
    with pytest.raises(TemplateError, match=match):
        templates_from_dict(data)


def test_literal_braces_are_allowed_and_do_not_shift_the_span():
    t = templates_from_dict({"ordinal": "{{note}} what is in panel {k} ?"})
    q, span = t.fill("ordinal", 5)
    assert q == "{note} what is in panel 5 ?" and q[span[0]:span[1]] == "5"


def test_vocabulary_check_names_the_first_unknown_word():
    words = set(syn.WORDS)
    check_vocabulary(DEFAULT_TEMPLATES, words, {"k": list("0123456"), "object": list(syn.CLASSES)})
    with pytest.raises(TemplateError, match=r"'templates\.ordinal': word 'where' is not in"):
        check_vocabulary(Templates(ordinal="where is [panel {k}] ?"), words, {"k": ["1"]})
    with pytest.raises(TemplateError, match=re.escape("word '3?'")):  # punctuation must be its own word
        check_vocabulary(Templates(ordinal="what is in [panel {k}]?"), words, {"k": ["3"]})
