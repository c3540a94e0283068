"""Published chat templates on the tiny random model of their family (issue 22).

For a released checkpoint whose chat template could be had but not its tokenizer
(``tests/fixtures/published/templates``, sources in its ``SOURCES.md``), the template is given to
the tiny random model of the family (``chat_template``, as a user would) and vheads' prompt is
compared with the family's own transformers processor rendering the same template
(``apply_chat_template(..., tokenize=True)`` with the image): the processor expands the template's
image placeholder with its own code, so equal ids mean vheads' placeholder, wrapping and image
block are the checkpoint's. The tiny models' word-level tokenizers drop whitespace, so the
comparison runs on a byte-level BPE tokenizer instead (the published Qwen2.5-VL vocabulary, with the
tiny tokenizer's special tokens added): a newline vheads put in the wrong place changes the ids.
"""

from __future__ import annotations

import dataclasses
import json
import lzma
from pathlib import Path

import pytest

from tests.fixtures.published.build_shells import read_published
from vheads.data import synthetic as syn
from vheads.models import adapter_for, format_options, load_processor
from vheads.models._adapter import render_chat

TEMPLATES = Path(__file__).parent.parent / "fixtures" / "published" / "templates"


def _smolvlm_processor(folder: Path, template: str):
    """Idefics3Processor from the tiny model's files with ``image_seq_len`` as the released
    processor_config.json sets it for its model: (max_image_size / patch)² / scale_factor²
    (SmolVLM-256M: (512 / 16)² / 4² = 64)."""
    from transformers import AutoConfig, AutoProcessor

    cfg = AutoConfig.from_pretrained(folder)
    edge = AutoProcessor.from_pretrained(folder).image_processor.max_image_size["longest_edge"]
    seq = (edge // cfg.vision_config.patch_size) ** 2 // cfg.scale_factor ** 2
    return AutoProcessor.from_pretrained(folder, image_seq_len=seq, chat_template=template)


def _llava_next_processor(folder: Path, template: str):
    """LlavaNextProcessor from the tiny model's files with the processor_config.json values llava-hf
    publishes (patch size and feature strategy of the model; one extra CLIP class token)."""
    from transformers import AutoConfig, AutoProcessor

    cfg = AutoConfig.from_pretrained(folder)
    return AutoProcessor.from_pretrained(folder, patch_size=cfg.vision_config.patch_size, num_additional_image_tokens=1,
                                         vision_feature_select_strategy=cfg.vision_feature_select_strategy, chat_template=template)


def _mistral3_processor(folder: Path, template: str):
    """PixtralProcessor (transformers' own code: it expands ``[IMG]`` into rows of ``[IMG]`` with
    ``[IMG_BREAK]`` and a final ``[IMG_END]``) from the tiny model's files, with the model's patch size
    and merge. Its module imports one resize helper from the torchvision image processor's module;
    where torchvision is missing (here) it gets the PIL image processor's module instead, which
    defines the same function with the same code."""
    import importlib.util
    import sys
    from unittest import mock

    from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

    stub = {}
    if importlib.util.find_spec("torchvision") is None:
        import transformers.models.pixtral.image_processing_pil_pixtral as pil

        stub = {"transformers.models.pixtral.image_processing_pixtral": pil}
    with mock.patch.dict(sys.modules, stub):
        from transformers.models.pixtral.processing_pixtral import PixtralProcessor

    cfg = AutoConfig.from_pretrained(folder)
    return PixtralProcessor(image_processor=AutoImageProcessor.from_pretrained(folder), tokenizer=AutoTokenizer.from_pretrained(folder),
                            patch_size=cfg.vision_config.patch_size, spatial_merge_size=cfg.spatial_merge_size, chat_template=template)


def _gemma4_processor(folder: Path, template: str):
    """Gemma4Processor (transformers' own code: it expands ``<|image|>`` into the image's soft
    tokens between ``<|image>`` and ``<image|>``) from the tiny model's files. The released
    tokenizer names its image and audio tokens (``image_token``, ``boi_token``, ...) as the
    processor reads them; the tiny one is given the same names. Built without its video processor,
    which needs torchvision (only its type check is skipped; images take the processor's own path)."""
    from transformers import AutoImageProcessor, AutoTokenizer
    from transformers.models.gemma4.processing_gemma4 import Gemma4Processor
    from transformers.processing_utils import ProcessorMixin

    names = {"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>", "audio_token": "<|audio|>",
             "boa_token": "<|audio>", "eoa_token": "<audio|>"}
    tok = AutoTokenizer.from_pretrained(folder, extra_special_tokens=names)
    check = ProcessorMixin.check_argument_for_proper_class
    ProcessorMixin.check_argument_for_proper_class = lambda self, name, arg: None if arg is None else check(self, name, arg)
    try:
        return Gemma4Processor(feature_extractor=None, image_processor=AutoImageProcessor.from_pretrained(folder), tokenizer=tok,
                               video_processor=None, chat_template=template)
    finally:
        ProcessorMixin.check_argument_for_proper_class = check


#: template file -> (tiny random family, the family's processor built with that template)
CASES = {
    "smolvlm_256m_instruct.chat_template.json": ("idefics3", _smolvlm_processor),
    "llava_v1_6_mistral_7b_hf.chat_template.json": ("llava_next", _llava_next_processor),
    "mistral_small_3_2_24b_instruct_2506.chat_template.jinja": ("mistral3", _mistral3_processor),
    "gemma_4_31b_it.chat_template.jinja": ("gemma4", _gemma4_processor),
}


def _template(name: str) -> str:
    """The template text of a file: a ``.jinja`` as it is, a ``chat_template.json``'s key."""
    text = (TEMPLATES / name).read_text(encoding="utf-8")
    return text if name.endswith(".jinja") else json.loads(text)["chat_template"]


def _items():
    """Items of every image shape the study uses: grids (one view), strips (wide: split into
    sub-images), and a tall strip."""
    items = [*syn.kind_items("grid-neutral", 2, seed=0), *syn.kind_items("strip-ordinal", 2, seed=0),
             *syn.kind_items("class-matched", 1, seed=0)]
    wide = syn.kind_items("strip-referring", 1, seed=1)[0]
    tall = dataclasses.replace(wide, id="tall", image=wide.image.transpose(2), regions={})  # ROTATE_90
    return [*items, tall]


def _bpe_folder(tiny: Path, out: Path) -> Path:
    """A copy of the tiny model's folder whose tokenizer is the published Qwen2.5-VL byte-level BPE
    (``tests/fixtures/published/qwen2_5_vl_7b_instruct``) with the tiny tokenizer's special tokens
    added: the family's image tokens and markers stay single special tokens, whitespace is kept."""
    import shutil

    from transformers import AutoTokenizer

    shutil.copytree(tiny, out)
    tiny_tok = AutoTokenizer.from_pretrained(tiny)
    for f in out.glob("*"):
        if f.name.startswith(("tokenizer", "special_tokens_map", "added_tokens", "vocab", "merges", "chat_template")):
            f.unlink()
    qwen = out.parent / f"{out.name}_qwen_tokenizer"
    qwen.mkdir()
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        (qwen / f).write_text(read_published("qwen2_5_vl_7b_instruct", f), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(qwen)
    tok.add_tokens([t for t in tiny_tok.all_special_tokens if t not in tok.get_vocab()], special_tokens=True)
    tok.save_pretrained(out)
    # the config's image token ids follow their tokens to the new ids (Gemma 4's adapter checks them)
    special = {tiny_tok.convert_tokens_to_ids(t): t for t in tiny_tok.all_special_tokens}
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    for k, v in cfg.items():
        if k.endswith(("_token_id", "_token_index")) and isinstance(v, int) and v in special:
            cfg[k] = tok.convert_tokens_to_ids(special[v])
    (out / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def bpe_folders(tiny_random_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe")
    return {name: _bpe_folder(Path(tiny_random_dirs[family]), root / family) for name, (family, _) in CASES.items()}


def _bundle(folder: Path, name: str):
    from transformers import AutoConfig

    return load_processor(str(folder), None, AutoConfig.from_pretrained(folder), chat_template=str(TEMPLATES / name))


@pytest.mark.parametrize("name", CASES)
def test_the_published_template_renders_one_image_placeholder_of_the_adapter(name, bpe_folders):
    family, _ = CASES[name]
    adapter, bundle = adapter_for(family), _bundle(bpe_folders[name], name)
    text = render_chat(bundle.tokenizer, adapter.chat_template(bundle), "what is shown ?", True)
    assert text.count(adapter.placeholder) == 1, text


@pytest.mark.parametrize("name", CASES)
def test_prompt_ids_equal_the_family_processor_on_the_published_template(name, bpe_folders):
    family, make = CASES[name]
    folder = bpe_folders[name]
    template = _template(name)
    adapter, bundle = adapter_for(family), _bundle(folder, name)
    proc = make(folder, template)
    image_id = proc.tokenizer.convert_tokens_to_ids(adapter.image_token)
    for item in _items():
        text = item.question + (format_options(item.options) if item.options else "")
        msgs = [{"role": "user", "content": [{"type": "image", "image": item.image}, {"type": "text", "text": text}]}]
        ref = [int(t) for t in proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"][0]]
        prompt = adapter.build(item, bundle)
        assert prompt.inputs["input_ids"][0].tolist() == ref, (item.id, item.image.size, proc.tokenizer.decode(ref)[-300:])
        # the image block is there, and every pixel token of vheads' layout is an image slot the
        # processor wrote (LLaVA-NeXT's newline slots are slots without pixels)
        slots = {p for p, t in enumerate(ref) if t == image_id}
        assert slots and set(prompt.layout.image_positions.tolist()) <= slots


# ---- Mistral 3 on a published Tekken vocabulary ----------------------------------------------------

TEKKEN = Path(__file__).parent.parent / "fixtures" / "published" / "mistral_tekken" / "tekken_240911.json.xz"
#: the special tokens of a tekken file that lists none: mistral-common 1.13.1's
#: ``Tekkenizer.DEPRECATED_SPECIAL_TOKENS`` (ranks 0-19, the strings of its ``SpecialTokens``); transformers'
#: conversion puts them at ids 0-19 and ``<SPECIAL_i>`` up to 999, the BPE ranks after
TEKKEN_SPECIALS = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                   "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
                   "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]")
MISTRAL_TEMPLATE = "mistral_small_3_2_24b_instruct_2506.chat_template.jinja"


def _tekken_raw() -> dict:
    raw = json.loads(lzma.decompress(TEKKEN.read_bytes()))
    raw["special_tokens"] = [{"rank": i, "token_str": t, "is_control": True} for i, t in enumerate(TEKKEN_SPECIALS)]
    return raw


@pytest.fixture(scope="module")
def tekken_folder(tiny_random_dirs, tmp_path_factory):
    """The tiny random Mistral 3 folder with the Hugging Face tokenizer transformers converts from the
    published Tekken file (``AutoTokenizer`` on a folder holding ``tekken.json``; BOS / EOS / UNK / PAD
    named as transformers' Mistral integration maps them), its config's ``image_token_index`` the
    converted ``[IMG]`` id (10 in the released Mistral 3 configs)."""
    import shutil

    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("tekken")
    (root / "src").mkdir()
    (root / "src" / "tekken.json").write_text(json.dumps(_tekken_raw()), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(root / "src", bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
    out = root / "mistral3"
    shutil.copytree(Path(tiny_random_dirs["mistral3"]), out)
    for f in out.glob("tokenizer*"):
        f.unlink()
    tok.save_pretrained(out)
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    cfg["image_token_index"] = tok.convert_tokens_to_ids("[IMG]")
    (out / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return out, _tekken_raw()


def _bpe_reference(text: str, raw: dict) -> list[int]:
    """Tekken's byte-level BPE written out (tiktoken's rule): the text split by the file's pattern,
    each piece's bytes merged pair by pair, the merge whose result has the lowest rank first
    (leftmost on a tie), until no adjacent pair is a token; id = rank + the special-token count."""
    import base64

    import regex

    n_special = raw["config"]["default_num_special_tokens"]
    ranks = {base64.b64decode(v["token_bytes"]): v["rank"] for v in raw["vocab"][: raw["config"]["default_vocab_size"] - n_special]}
    ids = []
    for piece in regex.findall(raw["config"]["pattern"], text):
        parts = [bytes([b]) for b in piece.encode("utf-8")]
        while len(parts) > 1:
            merged = [ranks.get(parts[i] + parts[i + 1]) for i in range(len(parts) - 1)]
            best = min((r, i) for i, r in enumerate(merged) if r is not None) if any(r is not None for r in merged) else None
            if best is None:
                break
            i = best[1]
            parts[i: i + 2] = [parts[i] + parts[i + 1]]
        ids += [ranks[p] + n_special for p in parts]
    return ids


def test_the_converted_tekken_tokenizer_is_bpe_over_the_published_ranks(tekken_folder):
    from transformers import AutoTokenizer

    folder, raw = tekken_folder
    tok = AutoTokenizer.from_pretrained(folder)
    template = _template(MISTRAL_TEMPLATE)
    system = template.split('default_system_message = "', 1)[1].split('" + today', 1)[0]
    assert len(system) > 100  # the template's default system message (the text before its date)
    texts = [system.replace('\\"', '"'), " A. dog\n B. cat", *(it.question + (format_options(it.options) if it.options else "") for it in _items())]
    for text in texts:
        assert tok(text, add_special_tokens=False)["input_ids"] == _bpe_reference(text, raw), text[:80]
    # the tokens the adapter and the template name are single special tokens at their released ids
    assert tok.convert_tokens_to_ids(["[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"]) == \
        [3, 4, 10, 12, 13, 17, 18]


def test_mistral3_prompt_ids_equal_the_pixtral_processor_with_the_tekken_tokenizer(tekken_folder):
    """The published Mistral Small 3.2 template on the published Tekken vocabulary: vheads' prompt
    ids (default system turn with today's date, ``[INST]``, the image block, the question,
    ``[/INST]``) equal transformers' PixtralProcessor's, and the option letters are single tokens."""
    from transformers import AutoConfig

    folder, _ = tekken_folder
    adapter = adapter_for("mistral3")
    bundle = load_processor(str(folder), None, AutoConfig.from_pretrained(folder), chat_template=str(TEMPLATES / MISTRAL_TEMPLATE))
    proc = _mistral3_processor(folder, _template(MISTRAL_TEMPLATE))
    assert len(set(adapter.letter_token_ids(bundle))) == 4
    for item in _items():
        text = item.question + (format_options(item.options) if item.options else "")
        msgs = [{"role": "user", "content": [{"type": "image", "image": item.image}, {"type": "text", "text": text}]}]
        ref = [int(t) for t in proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"][0]]
        prompt = adapter.build(item, bundle)
        assert prompt.inputs["input_ids"][0].tolist() == ref, (item.id, proc.tokenizer.decode(ref)[-300:])
        assert ref[:2] == [1, 17]  # <s>[SYSTEM_PROMPT]: the template's BOS and default system turn
        slots = {p for p, t in enumerate(ref) if t == 10}
        assert slots and set(prompt.layout.image_positions.tolist()) == slots
