"""Question templates: the wording of every question the item builders ask.

A study config may replace any of them (``[templates]`` table). There are two default
sets (:func:`default_templates`): the built-in tiny model keeps the word-level questions it
was trained on (:data:`DEFAULT_TEMPLATES`, the table below); every other model is asked in
natural language (:data:`NATURAL_TEMPLATES`: capitalised, the multiple-choice questions
ending with an instruction to answer with the option's letter, the open strip questions
with what to answer). ``vheads study --print-config [--model M]`` shows the set that applies.

=============  ==================================  ===========  ==========================
key            default                             placeholder  asked by
=============  ==================================  ===========  ==========================
``ordinal``    ``what is in [panel {k}] ?``        ``{k}``      strip-ordinal (discovery)
``referring``  ``which panel shows [the {object}] ?``  ``{object}``  strip-referring (discovery)
``cell``       ``what is in [cell {k}] ?``         ``{k}``      grid-oracle, grid-blank
``object``     ``which object is shown ?``         (none)       grid-neutral, class-*
``text``       ``the named object is the {object} . which object is named ?``  ``{object}``  text arm
=============  ==================================  ===========  ==========================

``{k}`` is the panel number (1-based, as the strip questions count) or the cell number
(0-based and row-major, as the regions ``cell0`` .. ``cell3`` are named), ``{object}`` the asked object's name (a class
word or a real label). The **query span** of a question (the tokens that name the asked
region: the discovery source ``qspan`` reads them) is the text between ``[`` and ``]``;
a template without brackets spans just the placeholder's value. The brackets are not part
of the question. ``object`` and ``text`` name no region and take no brackets.
"""

from __future__ import annotations

import string
from dataclasses import asdict, dataclass, fields

#: the placeholder each template must hold (exactly once)
PLACEHOLDERS: dict[str, str | None] = {"ordinal": "k", "referring": "object", "cell": "k", "object": None, "text": "object"}
#: templates whose question names a region (a query span, brackets allowed)
SPANNED = ("ordinal", "referring", "cell")


class TemplateError(ValueError):
    """A template that cannot be used; the message names the key."""


@dataclass(frozen=True)
class Templates:
    """The question templates (see the module docstring for keys and placeholders)."""

    ordinal: str = "what is in [panel {k}] ?"
    referring: str = "which panel shows [the {object}] ?"
    cell: str = "what is in [cell {k}] ?"
    object: str = "which object is shown ?"
    text: str = "the named object is the {object} . which object is named ?"

    def fill(self, key: str, value: str | int | None = None) -> tuple[str, tuple[int, int] | None]:
        """The question of template ``key`` with its placeholder set to ``value``, and the
        character span ``(start, end)`` of its query (``None`` for unspanned templates)."""
        text = getattr(self, key)
        name = PLACEHOLDERS[key]
        kw = {name: value} if name else {}
        if key not in SPANNED:
            return text.format(**kw), None
        if "[" in text:  # checked: one [ ... ] pair around the placeholder
            a, b = text.index("["), text.index("]")
            head, body, tail = text[:a].format(), text[a + 1:b].format(**kw), text[b + 1:].format()
            return head + body + tail, (len(head), len(head) + len(body))
        prefix = ""
        for literal, field_name, _, _ in string.Formatter().parse(text):
            prefix += literal
            if field_name == name:
                break
        return text.format(**kw), (len(prefix), len(prefix) + len(str(value)))

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


DEFAULT_TEMPLATES = Templates()
#: the defaults for every model but the built-in tiny one (same placeholders and query spans)
NATURAL_TEMPLATES = Templates(
    ordinal="What is shown in [panel {k}] of the strip? Answer with one word.",
    referring="Which panel shows [the {object}]? Answer with the panel's number.",
    cell="What is in [cell {k}] of the 2x2 grid (cells numbered 0 to 3, row by row)? Answer with the option's letter.",
    object="Which object is shown in the image? Answer with the option's letter.",
    text="The named object is the {object}. Which object is named? Answer with the option's letter.",
)


def is_builtin_tiny(model: str) -> bool:
    """Whether ``model`` names the built-in tiny model (``tiny``, or its shipped folder)."""
    from pathlib import Path

    if model == "tiny":
        return True
    tiny = Path(__file__).resolve().parent.parent / "tiny" / "weights"
    try:
        return bool(model) and Path(model).resolve() == tiny
    except (OSError, ValueError):
        return False


def templates_name(model: str) -> str:
    """``tiny`` (word-level questions) or ``natural`` (natural language): the set for ``model``."""
    return "tiny" if is_builtin_tiny(model) else "natural"


def default_templates(model: str) -> Templates:
    """The default questions for ``model``: the built-in tiny model's word-level ones, else
    the natural-language ones."""
    return DEFAULT_TEMPLATES if is_builtin_tiny(model) else NATURAL_TEMPLATES


def _fields_of(text: str) -> list[tuple[str, str, str | None]]:
    """``(name, format spec, conversion)`` of each placeholder in ``text`` (``{{`` / ``}}``
    are literal braces); ValueError on unbalanced braces."""
    return [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(text) if f is not None]


def check_template(key: str, text: object, where: str = "templates") -> str:
    """``text`` if it is a usable template for ``key``; else :class:`TemplateError` naming
    ``where.key`` and what is wrong."""
    name = f"{where}.{key}"
    if key not in PLACEHOLDERS:
        raise TemplateError(f"unknown template key {name!r}; known keys: {', '.join(PLACEHOLDERS)}")
    if not isinstance(text, str) or not text.strip():
        raise TemplateError(f"template {name!r} must be a non-empty string, got {text!r:.80}")
    need = PLACEHOLDERS[key]
    try:
        placeholders = _fields_of(text)
    except ValueError as e:  # unbalanced braces
        raise TemplateError(f"template {name!r} is not a valid template ({e}): {text!r:.80}") from None
    found = [f for f, _, _ in placeholders]
    if any(spec or conv for _, spec, conv in placeholders):
        raise TemplateError(f"template {name!r}: write the placeholder plainly, without a format spec or conversion: {text!r:.80}")
    wrong = [f for f in found if f != need]
    if wrong:
        allowed = f"only {{{need}}}" if need else "no placeholder"
        raise TemplateError(f"template {name!r} has placeholder {{{wrong[0]}}}; it takes {allowed}: {text!r:.80}")
    if need and found.count(need) != 1:
        raise TemplateError(f"template {name!r} must contain the placeholder {{{need}}} exactly once"
                            f" (found {found.count(need)}): {text!r:.80}")
    n_open, n_close = text.count("["), text.count("]")
    if key not in SPANNED and (n_open or n_close):
        raise TemplateError(f"template {name!r} names no region, so it takes no [query span] brackets: {text!r:.80}")
    if n_open or n_close:
        a, b = text.find("["), text.find("]")
        if n_open != 1 or n_close != 1 or b < a:
            raise TemplateError(f"template {name!r} needs one '[' before one ']' around its query span: {text!r:.80}")
        if "{" + need + "}" not in text[a:b]:
            raise TemplateError(f"template {name!r}: the query span [...] must contain {{{need}}}: {text!r:.80}")
        if not text[a + 1:b].strip():
            raise TemplateError(f"template {name!r}: the query span [...] is empty: {text!r:.80}")
    return text


def templates_from_dict(data: dict, where: str = "templates", base: Templates = DEFAULT_TEMPLATES) -> Templates:
    """``base`` (default: the tiny model's questions) with entries replaced by ``data``
    (each entry checked)."""
    from dataclasses import replace

    if not isinstance(data, dict):
        raise TemplateError(f"{where!r} must be a table of templates (ordinal = \"...\", ...), got {data!r:.80}")
    return replace(base, **{key: check_template(key, text, where) for key, text in data.items()})


def check_vocabulary(templates: Templates, words: set[str], values: dict[str, list[str]], where: str = "templates") -> None:
    """Every word of every filled question is in ``words`` (a word-level vocabulary, like
    the built-in tiny model's); ``values`` lists the placeholder values to try."""
    for f in fields(Templates):
        name = PLACEHOLDERS[f.name]
        for v in values.get(name, [None]) if name else [None]:
            question, _ = templates.fill(f.name, v)
            unknown = [w for w in question.split() if w not in words]
            if unknown:
                raise TemplateError(
                    f"template '{where}.{f.name}': word {unknown[0]!r} is not in the model's word-level vocabulary"
                    f" (it knows: {' '.join(sorted(words))}); words are split on spaces, so write 'panel {{k}} ?' not 'panel {{k}}?'")
