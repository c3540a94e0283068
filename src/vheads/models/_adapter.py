"""The small interface between a model family and the rest of vheads.

An adapter knows a family's chat template, how its image processor turns an image into a
block of image tokens (one grid, or tiles and a thumbnail with markers between them: see
:class:`~vheads.models._layout.ImageBlock`), and which sub-config is the language model. Everything else in
vheads (engine, discovery, evaluation) is family-agnostic.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any, ClassVar

import torch

from vheads.data import OPTION_LETTERS, Item
from vheads.models._layout import ImageBlock, Prompt, TokenLayout, char_span_to_positions

ADAPTERS: dict[str, type["Adapter"]] = {}

#: ``layer_types`` entries of a text config whose layers are softmax attention (they have
#: heads and attention maps); any other entry (``linear_attention``: Gated DeltaNet, …) has none
SOFTMAX_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
#: the transformers versions the adapters' tests ran on
TESTED_TRANSFORMERS = ("5.24.0",)


def check_attention_layers(layers: Iterable[int], attention_layers: Iterable[int], n_layers: int) -> None:
    """Raise ``ValueError`` if a layer of ``layers`` has no heads: it is not one of the
    model's softmax-attention layers ``attention_layers`` (hybrid models only)."""
    have = set(int(x) for x in attention_layers)
    bad = sorted({int(x) for x in layers} - have)
    if bad:
        raise ValueError(
            f"layer(s) {bad} of this model are linear-attention (Gated DeltaNet) layers with no attention "
            f"heads; heads exist only in its {len(have)} softmax-attention layers {sorted(have)} "
            f"(of {n_layers}); use a head index in one of those"
        )


def register_adapter(cls: type["Adapter"]) -> type["Adapter"]:
    """Class decorator: make ``cls`` the adapter for each of its ``model_types``."""
    for mt in cls.model_types:
        ADAPTERS[mt] = cls
    return cls


def adapter_for(model_type: str) -> "Adapter":
    if model_type not in ADAPTERS:
        raise ValueError(
            f"model type {model_type!r} is not a supported VLM family; supported: "
            f"{', '.join(sorted(ADAPTERS))} (see `vheads models`)"
        )
    return ADAPTERS[model_type]()


def describe_adapters() -> list[dict[str, Any]]:
    """Each registered adapter's :meth:`Adapter.describe`, once per class, in registration order.

    ``vheads models`` prints the copy of this list shipped as ``vheads/models/adapters.json``
    (read without importing torch); ``tests/test_cli_startup.py`` checks the copy is current.
    """
    return [cls().describe() for cls in dict.fromkeys(ADAPTERS.values())]


def format_options(options: tuple[str, ...]) -> str:
    """Lettered options as they follow the question: ``"\nA. red\nB. green ..."``."""
    return "".join(f"\n{letter}. {text}" for letter, text in zip(OPTION_LETTERS, options))


class Adapter:
    """Base class: subclasses set the class attributes and implement ``image_grid`` (one
    grid of image tokens) or ``image_block`` (tiles, thumbnails, tokens between rows)."""

    family: ClassVar[str]
    model_types: ClassVar[tuple[str, ...]]
    image_token: ClassVar[str]
    #: chat template pieces around the user turn: prefix, [image block], question, suffix
    user_prefix: ClassVar[str]
    image_prefix: ClassVar[str] = ""
    image_suffix: ClassVar[str] = ""
    assistant_prefix: ClassVar[str]
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
            "template": self.user_prefix + self.image_prefix + "<image>" + self.image_suffix + "{question}" + self.assistant_prefix,
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

    def build(self, item: Item, processor: Any, answer_text: str | None = None, min_cover: float = 0.5, require_image: bool = True) -> Prompt:
        """Tokenize ``item`` with this family's chat template and return its layout.

        ``answer_text``, when given, is appended after the assistant prefix (teacher
        forcing); its tokens form the ``answer`` span. Spans are found from character
        offsets, so any fast tokenizer works.
        """
        if require_image and item.image is None:
            raise ValueError(
                f"item {item.id!r} has no image: vheads prompts need one (give text-only items a "
                "blank image, or pass require_image=False)"
            )
        tok = self.tokenizer(processor)
        block = self.image_block(processor, item.image.convert("RGB")) if item.image is not None else None
        options = format_options(item.options) if item.options else ""
        parts: list[tuple[str, str]] = [("prefix", self.user_prefix)]
        if block is not None:
            parts.append(("image", self.image_prefix + block.text + self.image_suffix))
        parts += [("question", item.question), ("options", options), ("assistant", self.assistant_prefix)]
        if answer_text is not None:
            parts.append(("answer", answer_text))
        text, starts = "", {}
        for name, piece in parts:
            starts[name] = (len(text), len(text) + len(piece))
            text += piece
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
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
            q0 = starts["question"][0]
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


def call_with_supported(fn, **kwargs):
    """Call ``fn`` with the subset of ``kwargs`` its signature accepts."""
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kwargs.items() if k in params})
