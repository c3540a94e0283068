"""The released chat templates of Mistral-Small-3.1 and Gemma 4 on the tiny random model of their
family (issue 34).

As ``test_published_templates.py`` does for its templates: the template file
(``tests/fixtures/published/templates``, sources in its ``SOURCES.md``) is given to the tiny random
model (``chat_template``, as a user would) and vheads' prompt ids are compared with the family's own
transformers processor rendering the same template (``apply_chat_template(..., tokenize=True)``
with the image), on the byte-level BPE tokenizer of that test so that a misplaced newline shows.

Both templates write the released tokenizer's BOS themselves (``{{ bos_token }}``), and the released
tokenizers also write it when asked for special tokens; the BPE folder here does both (``<s>`` /
``<bos>``), so a BOS written twice changes the ids. The templates' turn markers (``[SYSTEM_PROMPT]``,
``<|turn>``, ``<|channel>``...) are made single special tokens, so each counts as one token on both
sides.

What each template does by default, and what the tests pin:

- Mistral-Small-3.1 writes a default system turn holding today's date (``strftime_now``) when no
  system message is given; the date is frozen for the test (transformers' ``strftime_now`` reads
  ``datetime.now()``), so the comparison does not depend on the day it runs;
- Gemma 4 ends its generation prompt with an empty thought channel (``<|channel>thought\\n<channel|>``)
  when ``enable_thinking`` is not set, which vheads never sets; the system turn is written with
  ``content | trim``, so its content must be a string.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from tests.models.test_published_templates import (TEMPLATES, _bpe_folder, _bundle, _gemma4_processor, _items,
                                                     _mistral3_processor, _template)
from vheads.models import adapter_for, format_options
from vheads.models._adapter import render_chat

#: the date the Mistral template's default system turn is rendered with
FROZEN_DAY = datetime(2025, 3, 17, 12, 0)


#: template file -> (tiny random family, the released tokenizer's BOS, the template's markers
#: made single special tokens, the family's processor built with that template)
CASES = {
    "mistral_small_3_1_24b_instruct_2503.chat_template.json":
        ("mistral3", "<s>", ("[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"), _mistral3_processor),
    "gemma4.chat_template.json":
        ("gemma4", "<bos>", ("<|channel>", "<channel|>", "<|think|>"), _gemma4_processor),
}


def _released_tokens(tiny: Path, folder: Path, bos: str, markers: tuple[str, ...]) -> Path:
    """The BPE tokenizer of ``folder`` with ``bos`` as its BOS token, written first when special
    tokens are asked for (as the released Mistral and Gemma tokenizers do), and ``markers`` added
    as special tokens; the config's token ids (``image_token_id``, ``boi_token_id``...) follow
    their tokens to this tokenizer's ids."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    before = AutoTokenizer.from_pretrained(folder)  # _bpe_folder already moved the config's ids to this tokenizer's
    tok = AutoTokenizer.from_pretrained(folder)
    tok.add_tokens([t for t in (bos, *markers) if t not in tok.get_vocab()], special_tokens=True)
    tok.bos_token = bos
    tok.backend_tokenizer.post_processor = TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                              special_tokens=[(bos, tok.convert_tokens_to_ids(bos))])
    tok.save_pretrained(folder)
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    for key, value in cfg.items():
        if key.endswith(("_token_id", "_token_index")) and isinstance(value, int):
            cfg[key] = tok.convert_tokens_to_ids(before.convert_ids_to_tokens(value))
    (folder / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def bpe_folders(tiny_random_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe_v4")
    return {name: _released_tokens(Path(tiny_random_dirs[family]), _bpe_folder(Path(tiny_random_dirs[family]), root / family), bos, markers)
            for name, (family, bos, markers, _) in CASES.items()}


@pytest.fixture
def frozen_day(monkeypatch):
    """transformers' ``strftime_now`` (the templates' clock) reads :data:`FROZEN_DAY`."""
    import transformers.utils.chat_template_utils as ctu

    class _Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return FROZEN_DAY

    monkeypatch.setattr(ctu, "datetime", _Frozen)
    return FROZEN_DAY


@pytest.mark.parametrize("name", CASES)
def test_the_published_template_renders_one_image_placeholder_of_the_adapter(name, bpe_folders):
    family = CASES[name][0]
    adapter, bundle = adapter_for(family), _bundle(bpe_folders[name], name)
    text = render_chat(bundle.tokenizer, adapter.chat_template(bundle), "what is shown ?", True)
    assert text.count(adapter.placeholder) == 1, text


@pytest.mark.parametrize("system_prompt", [None, "Answer with the letter only."])
@pytest.mark.parametrize("name", CASES)
def test_prompt_ids_equal_the_family_processor_on_the_published_template(name, system_prompt, bpe_folders, frozen_day):
    from transformers import AutoConfig

    from vheads.models import load_processor

    family, bos, _, make = CASES[name]
    folder = bpe_folders[name]
    adapter = adapter_for(family)
    bundle = load_processor(str(folder), None, AutoConfig.from_pretrained(folder), chat_template=str(TEMPLATES / name),
                            system_prompt=system_prompt)
    proc = make(folder, _template(name))
    bos_id, image_id = proc.tokenizer.convert_tokens_to_ids(bos), proc.tokenizer.convert_tokens_to_ids(adapter.image_token)
    for item in _items():
        text = item.question + (format_options(item.options) if item.options else "")
        msgs = [{"role": "user", "content": [{"type": "image", "image": item.image}, {"type": "text", "text": text}]}]
        if system_prompt:
            msgs.insert(0, {"role": "system", "content": system_prompt})
        ref = [int(t) for t in proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"][0]]
        prompt = adapter.build(item, bundle)
        assert prompt.inputs["input_ids"][0].tolist() == ref, (item.id, item.image.size, proc.tokenizer.decode(ref)[-300:])
        assert ref[0] == bos_id and ref.count(bos_id) == 1  # the template's BOS, once
        slots = {p for p, t in enumerate(ref) if t == image_id}
        assert slots and set(prompt.layout.image_positions.tolist()) <= slots


def test_mistral_default_system_turn_holds_the_day_of_rendering(bpe_folders, frozen_day):
    """Without a system prompt vheads keeps the template's default system turn, dated the day the
    prompt is rendered (read here from the frozen clock, not from the template)."""
    name = "mistral_small_3_1_24b_instruct_2503.chat_template.json"
    adapter, bundle = adapter_for("mistral3"), _bundle(bpe_folders[name], name)
    text = adapter.build(_items()[0], bundle).text
    assert text.startswith("<s>[SYSTEM_PROMPT]You are Mistral Small 3")
    assert f"The current date is {frozen_day:%Y-%m-%d}." in text
    assert text.count("[SYSTEM_PROMPT]") == 1 and text.index("[/SYSTEM_PROMPT][INST]") < text.index("[IMG]")


def test_gemma4_generation_prompt_ends_with_an_empty_thought_channel(bpe_folders):
    """Thinking off (vheads never sets ``enable_thinking``): the model turn opens with an empty
    thought channel, which the prompt keeps; the question is the last text of the user turn."""
    name = "gemma4.chat_template.json"
    adapter, bundle = adapter_for("gemma4"), _bundle(bpe_folders[name], name)
    item = _items()[2]
    text = adapter.build(item, bundle).text
    assert text.endswith(f"{item.question}<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"), text[-120:]
    assert text.startswith("<bos><|turn>user\n\n\n<|image>") and "<image|>\n\n" + item.question in text


def test_gemma4_fallback_pieces_render_what_the_published_template_renders(bpe_folders):
    """The adapter's hand-written prompt (a checkpoint without a chat template) is the released
    template's: same text, same ids."""
    import dataclasses

    name = "gemma4.chat_template.json"
    adapter, bundle = adapter_for("gemma4"), _bundle(bpe_folders[name], name)
    bundle.tokenizer.chat_template = None  # the BPE tokenizer's own (Qwen's) template is not Gemma's
    bare = dataclasses.replace(bundle, chat_template=None)
    assert adapter.chat_template(bare) is None
    for item in _items()[:3]:
        with_template, by_hand = adapter.build(item, bundle), adapter.build(item, bare)
        assert by_hand.text == with_template.text
        assert by_hand.inputs["input_ids"].tolist() == with_template.inputs["input_ids"].tolist()
