"""Prompts come from the checkpoint's own chat template (issue 22, item 1).

The references here are computed independently of :meth:`Adapter.build`: the tiny model's
training prompts are concatenated by hand from the pieces it was trained on, and the
Qwen2-VL rendering is the tokenizer's own ``apply_chat_template`` with the image pad
expanded by Qwen2-VL's processor rule (``image_grid_thw.prod() // merge_size**2`` copies of
``<|image_pad|>``; the processor itself needs torchvision, which is not installed here).
"""

from __future__ import annotations

import pytest

from vheads._errors import VheadsError
from vheads.data import synthetic as syn
from vheads.models import ProcessorBundle, adapter_for, load_model
from vheads.models._adapter import check_prompt_setup
from vheads.models._loading import load_processor
from vheads.models.tiny_random import QWEN2_VL_CHAT_TEMPLATE, build_qwen_vl, build_tiny_random

LETTERS = "ABCD"


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def _n_pads(ip, image) -> int:
    thw = ip(images=[image.convert("RGB")], return_tensors="pt")["image_grid_thw"][0]
    return int(thw.prod()) // int(ip.merge_size) ** 2


def _old_tiny_text(item, n_pads: int, answer: str | None = None) -> str:
    """The prompt the tiny model was trained on, as the hand-built concatenation wrote it."""
    opts = "".join(f"\n{letter}. {o}" for letter, o in zip(LETTERS, item.options)) if item.options else ""
    return ("<|im_start|>user\n<|vision_start|>" + "<|image_pad|>" * n_pads + "<|vision_end|>" + item.question + opts
            + "<|im_end|>\n<|im_start|>assistant\n" + (answer or ""))


def _all_kind_items(n: int):
    for kind in syn.ALL_KINDS:
        corpora = ("comics", "photo") if kind.startswith("strip-") else ("comics",)
        for corpus in corpora:
            yield from syn.kind_items(kind, n, seed=3, corpus=corpus)


def test_tiny_ships_its_own_template(tiny):
    assert lm_template(tiny) is not None
    assert "<|im_start|>" in lm_template(tiny)


def lm_template(lm):
    return lm.adapter.chat_template(lm.processor)


def test_tiny_template_reproduces_its_training_prompts(tiny):
    tok, ip = tiny.processor.tokenizer, tiny.processor.image_processor
    n_checked = 0
    for item in _all_kind_items(6):
        for answer in (None, item.answer if item.options is None else "A"):
            old = _old_tiny_text(item, _n_pads(ip, item.image), answer)
            want = tok(old, add_special_tokens=False)["input_ids"]
            p = tiny.adapter.build(item, tiny.processor, answer_text=answer)
            assert p.text == old, item.id
            assert p.inputs["input_ids"][0].tolist() == want, item.id
            n_checked += 1
    assert n_checked >= 2 * 6 * (len(syn.ALL_KINDS) + 2)


def test_spans_found_in_the_rendered_text(tiny):
    tok = tiny.processor.tokenizer
    item = syn.kind_items("strip-referring", 1, seed=1)[0]
    p = tiny.adapter.build(item, tiny.processor, answer_text=item.answer)
    ids = p.inputs["input_ids"][0]
    q0, q1 = item.query_span
    assert tok.decode(ids[p.layout.spans["query"]]).split() == item.question[q0:q1].split()
    assert tok.decode(ids[p.layout.spans["question"]]).split() == item.question.split()
    assert tok.decode(ids[p.layout.spans["answer"]]).split() == item.answer.split()
    assert p.layout.spans["last"] == [min(p.layout.spans["answer"]) - 1]


@pytest.fixture(scope="module")
def qwen2():
    model, tok, ip = build_qwen_vl("qwen2_vl", words=list(syn.WORDS))
    return model, tok, ip


def _qwen_reference(tok, ip, item, system: str | None = None) -> tuple[str, list[int]]:
    opts = "".join(f"\n{letter}. {o}" for letter, o in zip(LETTERS, item.options)) if item.options else ""
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": item.question + opts}]}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    text = text.replace("<|image_pad|>", "<|image_pad|>" * _n_pads(ip, item.image))
    return text, tok(text, add_special_tokens=False)["input_ids"]


def test_qwen2_vl_published_template_keeps_the_default_system_turn(qwen2, tmp_path):
    """The defect of issue 22: vheads' prompt started at <|im_start|>user, 11 tokens short."""
    _, tok, ip = qwen2
    assert tok.chat_template == QWEN2_VL_CHAT_TEMPLATE
    folder = build_tiny_random("qwen2_vl", tmp_path / "q2", words=list(syn.WORDS))
    lm = load_model(str(folder))
    for item in [*syn.kind_items("strip-ordinal", 3, seed=0), *syn.kind_items("grid-oracle", 3, seed=0)]:
        text, ids = _qwen_reference(lm.processor.tokenizer, lm.processor.image_processor, item)
        assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")
        p = lm.adapter.build(item, lm.processor)
        assert p.inputs["input_ids"][0].tolist() == ids
        assert p.text == text


def test_system_prompt_replaces_the_default_turn(qwen2):
    _, tok, ip = qwen2
    item = syn.kind_items("grid-neutral", 1, seed=2)[0]
    bundle = ProcessorBundle(ip, tok, 16, system_prompt="answer with the letter")
    text, ids = _qwen_reference(tok, ip, item, system="answer with the letter")
    p = adapter_for("qwen2_vl").build(item, bundle)
    assert p.text.startswith("<|im_start|>system\nanswer with the letter<|im_end|>\n")
    assert "You are a helpful assistant." not in p.text
    assert p.inputs["input_ids"][0].tolist() == ids


def test_tokenizer_without_template_uses_the_fallback(qwen2):
    _, tok, ip = qwen2
    item = syn.kind_items("grid-oracle", 1, seed=0)[0]
    tok2 = tok.__class__(tokenizer_object=tok.backend_tokenizer, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>")
    tok2.chat_template = None
    p = adapter_for("qwen2_vl").build(item, ProcessorBundle(ip, tok2, 16))
    assert p.text == _old_tiny_text(item, _n_pads(ip, item.image))


def test_summary_collapses_the_image_block(tiny):
    item = syn.kind_items("grid-oracle", 1, seed=0)[0]
    p = tiny.adapter.build(item, tiny.processor)
    s = tiny.adapter.summary(p)
    n = _n_pads(tiny.processor.image_processor, item.image)
    assert f"<|vision_start|><|image_pad|>×{n}<|vision_end|>" in s
    assert s.count("<|image_pad|>") == 1


def test_chat_template_file_overrides_the_checkpoint(tmp_path):
    f = tmp_path / "t.jinja"
    f.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{% for c in m.content %}{% if c.type == 'image' %}"
                 "<|vision_start|><|image_pad|><|vision_end|>\n{% else %}{{ c.text }}{% endif %}{% endfor %}<|im_end|>\n"
                 "{% endfor %}<|im_start|>assistant\n")
    from transformers import AutoConfig

    from vheads.models import tiny_model_path

    path = str(tiny_model_path())
    bundle = load_processor(path, None, AutoConfig.from_pretrained(path), chat_template=f)
    item = syn.kind_items("grid-oracle", 1, seed=0)[0]
    p = adapter_for("qwen3_vl").build(item, bundle)
    assert "<|vision_end|>\nwhat is in" in p.text


def _bad_template(tmp_path, text: str):
    f = tmp_path / "bad.jinja"
    f.write_text(text)
    return f


def test_bad_chat_template_files_are_refused(tmp_path):
    from transformers import AutoConfig

    from vheads.models import tiny_model_path

    path = str(tiny_model_path())
    cfg = AutoConfig.from_pretrained(path)
    syntax = _bad_template(tmp_path, "{% for m in messages %}{{ m.role }")
    with pytest.raises(VheadsError, match=r"bad\.jinja.*not a valid Jinja template"):
        load_processor(path, None, cfg, chat_template=syntax)
    no_image = _bad_template(tmp_path, "{% for m in messages %}{% for c in m.content %}{% if c.type == 'text' %}"
                                       "{{ c.text }}{% endif %}{% endfor %}{% endfor %}")
    with pytest.raises(VheadsError, match=r"bad\.jinja.*image placeholder.*0 times"):
        load_processor(path, None, cfg, chat_template=no_image)
    with pytest.raises(FileNotFoundError, match="nowhere.jinja"):
        load_processor(path, None, cfg, chat_template=tmp_path / "nowhere.jinja")


def test_no_template_and_no_fallback_is_refused(qwen2):
    _, tok, ip = qwen2

    class NoFallback(type(adapter_for("qwen2_vl"))):
        user_prefix = None

    tok2 = tok.__class__(tokenizer_object=tok.backend_tokenizer, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>")
    tok2.chat_template = None
    with pytest.raises(VheadsError, match="my-model.*no chat template.*no fallback"):
        check_prompt_setup(NoFallback(), ProcessorBundle(ip, tok2, 16), "my-model")


@pytest.mark.parametrize("text, needle", [
    ("{% for m in messages %}{{ m.role }", "not a valid Jinja template"),
    ("{% for m in messages %}{% for c in m.content %}{{ c.text }}{% endfor %}{% endfor %}", "image placeholder"),
])
def test_cli_refuses_a_bad_chat_template_before_any_work(tmp_path, text, needle):
    from typer.testing import CliRunner

    from vheads.cli import app

    f = _bad_template(tmp_path, text)
    out = tmp_path / "hs"
    r = CliRunner().invoke(app, ["discover", "--model", "tiny", "--chat-template", str(f), "--n", "2", "--out", str(out)])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and needle in lines[0], r.output
    assert not out.exists()


def test_tiny_random_gemma3_renders_the_published_template(tmp_path):
    """Gemma 3's template (copied verbatim into the tiny random family) writes <bos>; Gemma3Processor
    expands <start_of_image> into \\n\\n<start_of_image> + mm_tokens_per_image soft tokens + <end_of_image>\\n\\n."""
    import json
    import lzma
    from pathlib import Path

    from vheads.models.tiny_random import GEMMA3_CHAT_TEMPLATE

    published = Path(__file__).parent.parent / "fixtures" / "published" / "gemma_3_4b_it" / "tokenizer_config.json.xz"
    if published.exists():  # the published file the copy was taken from
        assert json.loads(lzma.open(published).read())["chat_template"] == GEMMA3_CHAT_TEMPLATE
    lm = load_model(str(build_tiny_random("gemma3", tmp_path / "g3", words=list(syn.WORDS))))
    tok, n = lm.processor.tokenizer, int(lm.model.config.mm_tokens_per_image)
    for item in [*syn.kind_items("grid-neutral", 2, seed=0), *syn.kind_items("strip-ordinal", 2, seed=0)]:
        opts = "".join(f"\n{letter}. {o}" for letter, o in zip(LETTERS, item.options)) if item.options else ""
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": item.question + opts}]}]
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        assert text.startswith("<bos><start_of_turn>user\n")
        text = text.replace("<start_of_image>", "\n\n<start_of_image>" + "<image_soft_token>" * n + "<end_of_image>\n\n")
        p = lm.adapter.build(item, lm.processor)
        assert p.text == text
        assert p.inputs["input_ids"][0].tolist() == tok(text, add_special_tokens=False)["input_ids"]


def test_processor_template_file_is_read_when_the_processor_does_not_load(tmp_path):
    """A checkpoint's chat_template.json (the processor's file) counts even where AutoProcessor
    fails (Qwen-VL processors need torchvision, not installed here), before the tokenizer's."""
    import json

    from transformers import AutoConfig

    folder = build_tiny_random("qwen3_vl", tmp_path / "q3", words=list(syn.WORDS))
    cfg = AutoConfig.from_pretrained(folder)
    assert load_processor(str(folder), None, cfg).chat_template is None  # the tiny random Qwen3-VL ships none
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": QWEN2_VL_CHAT_TEMPLATE}))
    bundle = load_processor(str(folder), None, cfg)
    assert bundle.chat_template == QWEN2_VL_CHAT_TEMPLATE
    item = syn.kind_items("grid-oracle", 1, seed=0)[0]
    assert adapter_for("qwen3_vl").build(item, bundle).text.startswith("<|im_start|>system\nYou are a helpful assistant.")
