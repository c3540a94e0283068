"""The small interface between a model family and the rest of vheads.

An adapter knows how its image processor turns an image into a block of image tokens (one
grid, or tiles and a thumbnail with markers between them: see
:class:`~vheads.models._layout.ImageBlock`), what the checkpoint's chat template writes for
an image, and which sub-config is the language model. Everything else in vheads (engine,
discovery, evaluation) is family-agnostic.

**Prompts come from the checkpoint's own chat template** (:meth:`Adapter.build`): one user
message holding the image and the question (+ lettered options), the generation prompt on,
and whatever else the template does by default (Qwen2-VL's default system turn, a BOS
token...). The template renders one placeholder for the image (:attr:`Adapter.template_image`,
e.g. ``<|vision_start|><|image_pad|><|vision_end|>``), which is replaced by the family's
image block (the processor's token count), exactly as the family's processor expands it;
every span (image block, question, options, query span, answer) is then found by character
offsets in the rendered text. The adapter's hand-written pieces (``user_prefix``,
``image_prefix``, ``image_suffix``, ``assistant_prefix``) are used only for a checkpoint
that ships no template.

**Families are registered** (:data:`ADAPTER_REGISTRY`, a :class:`vheads._registry.Registry`
keyed by a config's ``model_type``): :func:`register_adapter` on an adapter class makes it
the adapter of each of its ``model_types``. Other packages add families through the
entry-point group ``vheads.adapters`` (a module that registers its adapter when imported).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from vheads._errors import MissingFileError, VheadsError
from vheads._registry import Registry
from vheads.data import OPTION_LETTERS, Item
from vheads.models._layout import ImageBlock, Prompt, TokenLayout, char_span_to_positions



@dataclass(frozen=True)
class ModelFamily:
    """A registered model type (a config's ``model_type``) and its adapter class; calling
    the entry makes the adapter."""

    name: str
    adapter: type["Adapter"]

    def __call__(self) -> "Adapter":
        return self.adapter()


#: every model type, in registration order (plugins: the entry-point group ``vheads.adapters``)
ADAPTER_REGISTRY: Registry[ModelFamily] = Registry("model type", group="vheads.adapters")
#: model type -> its entry (the registry's live view; ``ADAPTERS[model_type]()`` is its adapter)
ADAPTERS: dict[str, ModelFamily] = ADAPTER_REGISTRY.by_name

#: ``layer_types`` entries of a text config whose layers are softmax attention (they have
#: heads and attention maps); any other entry (``linear_attention``: Gated DeltaNet, …) has none
SOFTMAX_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
#: the transformers versions the adapters' tests ran on
TESTED_TRANSFORMERS = ("5.24.0",)


def register_adapter(cls: type["Adapter"]) -> type["Adapter"]:
    """Class decorator: make ``cls`` the adapter for each of its ``model_types`` (a model type
    another class has is refused)."""
    for mt in cls.model_types:
        ADAPTER_REGISTRY.register(ModelFamily(mt, cls))
    return cls


def adapter_for(model_type: str) -> "Adapter":
    """The adapter of ``model_type``; a model type none is registered for (read from a
    checkpoint's config, never typed) is refused naming every supported one."""
    if model_type not in ADAPTER_REGISTRY:
        raise VheadsError(
            f"model type {model_type!r} is not a supported VLM family; supported: "
            f"{', '.join(sorted(ADAPTER_REGISTRY.names()))} (see `vheads models`)"
        )
    return ADAPTER_REGISTRY.get(model_type)()


def describe_adapters() -> list[dict[str, Any]]:
    """Each registered adapter's :meth:`Adapter.describe`, once per class, in registration order.

    ``vheads models`` prints the copy of this list shipped as ``vheads/models/adapters.json``
    (read without importing torch); ``tests/test_cli_startup.py`` checks the copy is current.
    """
    return [cls().describe() for cls in dict.fromkeys(f.adapter for f in ADAPTER_REGISTRY.entries())]


def format_options(options: tuple[str, ...]) -> str:
    """Lettered options as they follow the question: ``"\nA. red\nB. green ..."``."""
    return "".join(f"\n{letter}. {text}" for letter, text in zip(OPTION_LETTERS, options))


class Adapter:
    """Base class: subclasses set the class attributes and implement ``image_grid`` (one
    grid of image tokens) or ``image_block`` (tiles, thumbnails, tokens between rows)."""

    family: ClassVar[str]
    model_types: ClassVar[tuple[str, ...]]
    image_token: ClassVar[str]
    #: the hand-written fallback for a checkpoint without a chat template, around the user
    #: turn: prefix, [image block], question, suffix (``user_prefix`` None: no fallback)
    user_prefix: ClassVar[str | None] = None
    image_prefix: ClassVar[str] = ""
    image_suffix: ClassVar[str] = ""
    assistant_prefix: ClassVar[str] = ""
    #: what the checkpoint's chat template renders for one image (None: ``image_token``),
    #: replaced by ``template_wrap[0]`` + the image block + ``template_wrap[1]`` as the
    #: family's processor expands it (None: ``image_prefix``, ``image_suffix``)
    template_image: ClassVar[str | None] = None
    template_wrap: ClassVar[tuple[str, str] | None] = None
    notes: ClassVar[str] = ""
    #: whether :meth:`items_pixel_inputs` and :meth:`items_vision_call` handle several
    #: images, so that rows of different items can share a forward
    cross_item: ClassVar[bool] = False
    #: whether a decoder layer's output depends on its own batch rows only, so that layer-prefix
    #: sharing (vheads.engine._layers) may run a layer on a subset of rows (False where layers
    #: pass keys / values to later layers, e.g. Gemma 4's KV-shared layers)
    rows_independent_layers: ClassVar[bool] = True
    #: what `vheads models` says of which layers have softmax heads
    softmax_layers_rule: ClassVar[str] = "every layer"

    #: the prompt inputs :meth:`batch_pixel_inputs` lays out for a batch (the others are expanded)
    pixel_keys: ClassVar[tuple[str, ...]] = ("pixel_values", "image_grid_thw")
    expand_pixels: ClassVar[bool] = True
    #: for `vheads models`: the image block's token structure, and how a box maps to tokens
    image_structure: ClassVar[str] = "one rows x cols grid of image tokens, row-major"
    box_mapping: ClassVar[str] = "tokens whose patch box lies >= min_cover inside the box"

    # ---- family specifics -------------------------------------------------------------
    def image_grid(self, processor: Any, image) -> tuple[dict[str, torch.Tensor], int, int, torch.Tensor]:
        """Process one image: (pixel inputs, grid rows, grid cols, token boxes [N, 4])."""
        raise NotImplementedError

    def image_block(self, processor: Any, image) -> ImageBlock:
        """Process one image into its block of tokens; families with one grid implement
        :meth:`image_grid` instead, tiled families override this."""
        pixel_inputs, rows, cols, boxes = self.image_grid(processor, image)
        return ImageBlock.single_grid(pixel_inputs, self.image_token, rows, cols, boxes)

    def extra_inputs(self, input_ids: torch.Tensor, image_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}

    def position_ids(self, model, inputs: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Position ids for the full sequence, or None for plain 1-D positions."""
        return None

    def text_config(self, model):
        return getattr(model.config, "text_config", model.config)

    def attention_layers(self, text_config) -> tuple[int, ...]:
        """The layers of the language model that are softmax attention, i.e. that have heads.

        Read from the config's ``layer_types`` where it has one (hybrid stacks such as
        Qwen3.5 interleave Gated DeltaNet linear-attention layers, which have no attention
        map and so no heads vheads can capture, mask or steer); every layer otherwise.
        Head indices ``(layer, head)`` keep the model's own layer numbering.
        """
        n = text_config.num_hidden_layers
        types = getattr(text_config, "layer_types", None)
        if not types:
            return tuple(range(n))
        return tuple(i for i, t in enumerate(types[:n]) if t in SOFTMAX_LAYER_TYPES)

    # ---- one vision pass for a batch of copies of one prompt ---------------------------------
    def vision_module(self, model):
        """The vision tower module whose output is repeated for a batch of identical images
        (None: the tower runs on every copy; :meth:`batch_pixel_inputs` then gives all copies)."""
        raise NotImplementedError

    def batch_pixel_inputs(self, inputs: dict[str, torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
        """Pixel inputs for ``batch`` copies of one prompt, as the model's forward expects
        them when the vision tower is run once (see :func:`vheads.engine` runner).

        Default: each of :attr:`pixel_keys` of one copy ([n, ...], n images or tiles)
        repeated along dim 0 ([batch * n, ...]); a view, no copy, when n is 1 and
        :attr:`expand_pixels` (a model that flattens the batch with ``.view`` needs copies).
        """
        return {k: v.expand(batch, *v.shape[1:]) if v.shape[0] == 1 and self.expand_pixels else v.repeat(batch, *([1] * (v.dim() - 1)))
                for k, v in inputs.items() if k in self.pixel_keys}

    def single_vision_call(self, args: tuple, kwargs: dict, batch: int) -> tuple[tuple, dict]:
        """The vision tower call for one copy, from the call the model makes for ``batch``.

        Default: the first 1/batch of ``pixel_values`` (first positional argument or keyword).
        """
        if args:
            return (args[0][: len(args[0]) // batch], *args[1:]), kwargs
        kwargs = dict(kwargs)
        kwargs["pixel_values"] = kwargs["pixel_values"][: len(kwargs["pixel_values"]) // batch]
        return args, kwargs

    # ---- one vision pass for a batch of rows from several items ------------------------------
    def items_pixel_inputs(self, per_item: list[dict[str, torch.Tensor]], counts: list[int]) -> dict[str, torch.Tensor]:
        """Pixel inputs for a batch whose ``counts[u]`` consecutive rows show item u's image
        (``per_item[u]``: that prompt's own pixel inputs), as the model's forward expects them
        when the vision tower runs once over the distinct images. Families that set
        ``cross_item`` override this; the default handles one item (copies of one prompt)."""
        if len(per_item) != 1:
            raise NotImplementedError(f"the {self.family} adapter batches one item per forward (cross_item is False)")
        return dict(per_item[0]) if counts[0] == 1 else self.batch_pixel_inputs(per_item[0], counts[0])

    def items_vision_call(self, args: tuple, kwargs: dict, counts: list[int]) -> tuple[tuple, dict]:
        """The vision tower call over the distinct images, from the call the model makes for
        the batch built by :meth:`items_pixel_inputs` (the engine repeats its output)."""
        if len(counts) != 1:
            raise NotImplementedError(f"the {self.family} adapter batches one item per forward (cross_item is False)")
        return self.single_vision_call(args, kwargs, counts[0])

    # ---- shared ------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "model_types": list(self.model_types),
            "image_token": self.image_token,
            "template": "the checkpoint's chat template; " + (
                "fallback without one: " + repr(self.user_prefix + self.image_prefix + "<image>" + self.image_suffix + "{question}" + self.assistant_prefix)
                if self.user_prefix is not None else "no fallback (a checkpoint without a template is refused)"),
            "template_image": f"{self.placeholder!r} -> {self.wrap[0]!r} + image block + {self.wrap[1]!r}",
            "image_tokens": self.image_structure,
            "box_to_tokens": self.box_mapping,
            "softmax_layers": self.softmax_layers_rule,
            "tested_with_transformers": list(TESTED_TRANSFORMERS),
            "notes": self.notes,
        }

    def tokenizer(self, processor: Any):
        return getattr(processor, "tokenizer", processor)

    def letter_token_ids(self, processor: Any) -> list[int]:
        """Token ids of the four option letters as the first answer token."""
        tok = self.tokenizer(processor)
        ids = []
        for letter in OPTION_LETTERS:
            enc = tok(letter, add_special_tokens=False)["input_ids"]
            if len(enc) != 1:
                raise ValueError(f"option letter {letter!r} is not a single token for this tokenizer: {enc}")
            ids.append(enc[0])
        return ids

    @property
    def placeholder(self) -> str:
        return self.template_image if self.template_image is not None else self.image_token

    @property
    def wrap(self) -> tuple[str, str]:
        return self.template_wrap if self.template_wrap is not None else (self.image_prefix, self.image_suffix)

    def chat_template(self, processor: Any) -> str | None:
        """The chat template prompts are rendered with: the loaded bundle's (the checkpoint's,
        or a ``chat_template`` file's), else the tokenizer's; None: the hand-written fallback."""
        own = getattr(processor, "chat_template", None)
        return own if own is not None else getattr(self.tokenizer(processor), "chat_template", None)

    def render(self, processor: Any, question: str, image_text: str | None, answer_text: str | None = None) -> tuple[str, dict[str, tuple[int, int]]]:
        """The prompt text of one item and the character span of each piece in it.

        ``question`` is the question with its options, ``image_text`` the image block's
        text (None: no image). Pieces: ``image`` (the image block with its wrap),
        ``question`` (``question`` as given), ``answer``. With a chat template the text is
        the template's rendering of one user message (image, then the question) with the
        generation prompt; without one the adapter's hand-written pieces.
        """
        template = self.chat_template(processor)
        if template is None:
            if self.user_prefix is None:
                raise VheadsError(f"the {self.family} checkpoint has no chat template and the {self.family} adapter no "
                                  "fallback; pass a chat_template file")
            parts = [("prefix", self.user_prefix)]
            if image_text is not None:
                parts.append(("image", self.image_prefix + image_text + self.image_suffix))
            parts += [("question", question), ("assistant", self.assistant_prefix)]
        else:
            parts = self._template_parts(processor, template, question, image_text)
        if answer_text is not None:
            parts.append(("answer", answer_text))
        text, starts = "", {}
        for name, piece in parts:
            starts[name] = (len(text), len(text) + len(piece))
            text += piece
        return text, starts

    def _template_parts(self, processor: Any, template: str, question: str, image_text: str | None) -> list[tuple[str, str]]:
        """The template's rendering cut into named pieces (image block expanded)."""
        rendered = render_chat(self.tokenizer(processor), template, _QUESTION_MARK, image_text is not None,
                               getattr(processor, "system_prompt", None))
        if rendered.count(_QUESTION_MARK) != 1:
            raise VheadsError(f"the chat template renders the question {rendered.count(_QUESTION_MARK)} times, not once")
        real = render_chat(self.tokenizer(processor), template, question, image_text is not None,
                           getattr(processor, "system_prompt", None))
        if real != rendered.replace(_QUESTION_MARK, question):
            raise VheadsError("the chat template rewrites the question text (vheads cannot place its spans); "
                              "pass a chat_template file that writes the message text as given")
        cuts = [(rendered.index(_QUESTION_MARK), len(_QUESTION_MARK), "question", question)]
        if image_text is not None:
            if rendered.count(self.placeholder) != 1:
                raise VheadsError(f"the chat template renders the image placeholder {self.placeholder!r} "
                                  f"{rendered.count(self.placeholder)} times for one image, not once")
            cuts.append((rendered.index(self.placeholder), len(self.placeholder), "image", self.wrap[0] + image_text + self.wrap[1]))
        parts, at = [], 0
        for i, (pos, n, name, piece) in enumerate(sorted(cuts)):
            parts += [(f"text{i}", rendered[at:pos]), (name, piece)]
            at = pos + n
        return parts + [("rest", rendered[at:])]

    def build(self, item: Item, processor: Any, answer_text: str | None = None, min_cover: float = 0.5, require_image: bool = True) -> Prompt:
        """Tokenize ``item`` with the checkpoint's chat template (see :meth:`render`) and
        return its layout.

        ``answer_text``, when given, is appended after the generation prompt (teacher
        forcing); its tokens form the ``answer`` span. Spans are found from character
        offsets, so any fast tokenizer works. A rendered template is tokenized as the
        processors' ``apply_chat_template`` does: with the tokenizer's special tokens unless
        the text already starts with its BOS token.
        """
        if require_image and item.image is None:
            raise ValueError(
                f"item {item.id!r} has no image: vheads prompts need one (give text-only items a "
                "blank image, or pass require_image=False)"
            )
        tok = self.tokenizer(processor)
        block = self.image_block(processor, item.image.convert("RGB")) if item.image is not None else None
        options = format_options(item.options) if item.options else ""
        text, starts = self.render(processor, item.question + options, None if block is None else block.text, answer_text)
        q0 = starts["question"][0]
        starts["question"], starts["options"] = (q0, q0 + len(item.question)), (q0 + len(item.question), starts["question"][1])
        # as the family's processor tokenizes a rendered template: with the tokenizer's special
        # tokens (LLaVA's <s>) unless the rendering starts with its BOS (Gemma writes <bos>)
        bos = getattr(tok, "bos_token", None)
        special = self.chat_template(processor) is not None and not (bos and text.startswith(bos))
        enc = tok(text, add_special_tokens=special, return_offsets_mapping=True)
        ids = torch.tensor(enc["input_ids"])
        offsets = [tuple(o) for o in enc["offset_mapping"]]
        image_token_id = tok.convert_tokens_to_ids(self.image_token)
        image_mask = ids == image_token_id  # every image-token slot the vision tower fills
        slots = image_mask.nonzero().flatten()
        n_slots = 0 if block is None else (len(block.boxes) if block.is_pixel is None else len(block.is_pixel))
        if len(slots) != n_slots:
            raise ValueError(
                f"item {item.id!r}: the tokenizer produced {len(slots)} image tokens where the image "
                f"processor's output needs {n_slots}; is {self.image_token!r} a special token of this tokenizer?"
            )
        image_positions = slots if block is None or block.is_pixel is None else slots[block.is_pixel]
        spans = {
            name: char_span_to_positions(offsets, *starts[name])
            for name in ("question", "options", "answer")
            if name in starts and starts[name][1] > starts[name][0]
        }
        if item.query_span is not None:
            spans["query"] = char_span_to_positions(offsets, q0 + item.query_span[0], q0 + item.query_span[1])
        n_prompt = len(ids) if answer_text is None else min(spans.get("answer", [len(ids)]))
        spans["last"] = [n_prompt - 1]
        spans["prompt"] = list(range(n_prompt))
        size = item.image.size if item.image is not None else (0, 0)
        block = block or ImageBlock.single_grid({}, self.image_token, 0, 0, torch.zeros(0, 4))
        # one past the image block (markers that take vision-side embeddings included)
        vision_end = max(char_span_to_positions(offsets, *starts["image"]), default=-1) + 1 if "image" in starts else 0
        layout = TokenLayout(len(ids), image_positions, block.rc, block.grid, block.boxes, size, spans,
                             image_tile=block.tile, tiles=block.tiles, vision_end=vision_end)
        for name, box in item.regions.items():
            layout.regions[name] = layout.region_tokens(box, min_cover=min_cover)
        inputs = {"input_ids": ids[None], "attention_mask": torch.ones(1, len(ids), dtype=torch.long), **block.pixel_inputs}
        inputs.update(self.extra_inputs(ids[None], image_mask[None]))
        return Prompt(item=item, inputs=inputs, layout=layout, text=text)

    def summary(self, prompt: Prompt) -> str:
        """``prompt.text`` with each run of image tokens summarised (``<|image_pad|>×64``)."""
        tok = re.escape(self.image_token)
        return re.sub(f"(?:{tok})+", lambda m: f"{self.image_token}×{len(m.group(0)) // len(self.image_token)}", prompt.text)


def prompt_examples(adapter: Adapter, processor: Any, templates=None, seed: int = 0) -> dict[str, str]:
    """The rendered prompt of one synthetic item of every kind (``vheads.data.synthetic``
    kinds; strips from the ``comics`` corpus), image block summarised
    (:meth:`Adapter.summary`): {kind: text}. ``templates``: the questions asked (default:
    the tiny model's)."""
    from vheads.data import DEFAULT_TEMPLATES
    from vheads.data import synthetic as syn

    return {kind: adapter.summary(adapter.build(syn.kind_items(kind, 1, seed, templates=templates or DEFAULT_TEMPLATES)[0], processor))
            for kind in syn.ALL_KINDS}


#: stands for the question while the template is rendered (a private-use character pair no
#: template writes), so that the question's place in the rendering is known exactly
_QUESTION_MARK = "\ue000vheads-question\ue001"


def render_chat(tokenizer: Any, template: str, text: str, image: bool, system_prompt: str | None = None) -> str:
    """``template`` rendered for one user message holding an image (when ``image``) and then
    ``text``, with the generation prompt and the template's own defaults; a system turn
    first when ``system_prompt`` is given.

    The system turn's content is a list of text blocks, as the user turn's; a template that
    writes a system turn's content as a string (Gemma 4's ``messages[0]['content'] | trim``)
    would write the list's Python repr, so there it is the plain string."""
    content = ([{"type": "image"}] if image else []) + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    blocks = [{"type": "text", "text": system_prompt}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": blocks})
    try:
        out = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, add_generation_prompt=True)
        if system_prompt and str(blocks) in out:
            messages[0]["content"] = system_prompt
            out = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, add_generation_prompt=True)
        return out
    except VheadsError:
        raise
    except Exception as e:  # noqa: BLE001 - a template's own raise_exception, an undefined name...
        raise VheadsError(f"the chat template fails to render one user message with an image and a question: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None


def read_chat_template(path: str | Path) -> str:
    """The text of a ``chat_template`` file: a Jinja template (``.jinja``, any name) or a
    ``chat_template.json`` (``{"chat_template": "..."}``); :class:`VheadsError` naming the
    file when it is missing, unreadable or not valid Jinja."""
    import json

    p = Path(path)
    if not p.is_file():
        raise MissingFileError(f"chat_template file {str(p)!r} does not exist")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise VheadsError(f"chat_template file {str(p)!r} cannot be read: {e}") from None
    if p.suffix == ".json":
        try:
            text = json.loads(text)["chat_template"]
        except (ValueError, KeyError, TypeError):
            raise VheadsError(f"chat_template file {str(p)!r} is JSON without a string 'chat_template' key") from None
        if not isinstance(text, str):
            raise VheadsError(f"chat_template file {str(p)!r}: 'chat_template' is not a string")
    check_jinja(text, f"chat_template file {str(p)!r}")
    return text


def check_jinja(template: str, where: str) -> None:
    """:class:`VheadsError` naming ``where`` (and the line) when ``template`` is not valid Jinja."""
    import jinja2
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        _compile_jinja_template(template)
    except jinja2.TemplateSyntaxError as e:
        raise VheadsError(f"{where} is not a valid Jinja template (line {e.lineno}: {e.message})") from None


def check_prompt_setup(adapter: Adapter, processor: Any, where: str) -> None:
    """Refuse, before any work, a checkpoint whose prompts cannot be built: no chat template
    and no adapter fallback, a template that does not parse, fails to render, or renders no
    (or more than one) image placeholder. ``where`` names the template's file or folder."""
    template = adapter.chat_template(processor)
    if template is None:
        if adapter.user_prefix is None:
            raise VheadsError(f"{where} has no chat template and the {adapter.family} adapter has no fallback; "
                              "pass a chat_template file (config key chat_template, --chat-template)")
        return
    check_jinja(template, f"the chat template of {where}")
    try:
        adapter._template_parts(processor, template, "what is in panel 1 ?", "")
    except VheadsError as e:
        raise VheadsError(f"{where}: {e}") from None


def call_with_supported(fn, **kwargs):
    """Call ``fn`` with the subset of ``kwargs`` its signature accepts."""
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kwargs.items() if k in params})
