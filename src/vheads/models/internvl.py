"""InternVL 3 / 3.5 (``internvl``): dynamic tiling into square tiles plus a thumbnail.

The image processor (GotOcr2, ``crop_to_patches``) picks a cols x rows canvas of S x S tiles
whose aspect ratio is closest to the image's, resizes the image onto it, cuts the tiles
(row-major) and, when there is more than one tile, appends the whole image resized to
S x S (the thumbnail). Each view becomes ``(S / patch · downsample_ratio)²`` image tokens
(pixel shuffle merges 2x2 patches, row-major), all inside one ``<img> … </img>`` block.
A pixel box therefore maps to tokens in every tile it overlaps *and* in the thumbnail.
"""

from __future__ import annotations

from typing import Any

from vheads.models._adapter import Adapter, register_adapter
from vheads.models._layout import ImageBlock, tiled_views, views_token_grid


@register_adapter
class InternVLAdapter(Adapter):
    family = "internvl"
    model_types = ("internvl",)
    image_token = "<IMG_CONTEXT>"
    user_prefix = "<|im_start|>user\n"
    image_prefix = "<img>"
    image_suffix = "</img>\n"
    assistant_prefix = "<|im_end|>\n<|im_start|>assistant\n"
    template_image = "<IMG_CONTEXT>"  # the processor expands it to <img> + tokens + </img>
    template_wrap = ("<img>", "</img>")
    image_structure = (
        "<img>, then per view (tiles row-major, then the thumbnail when tiled) "
        "(S/patch*downsample_ratio)^2 <IMG_CONTEXT> tokens row-major, then </img>; "
        "<img> and </img> count as text"
    )
    box_mapping = (
        "per view: the box scaled into the tile's (or thumbnail's) token grid; a box selects "
        "tokens in every tile it overlaps and in the thumbnail"
    )
    notes = "GotOcr2 crop_to_patches tiling (min/max_patches of the image processor); plain 1-D positions."

    def image_block(self, processor: Any, image) -> ImageBlock:
        from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import get_optimal_tiled_canvas

        ip = processor.image_processor
        out = ip(images=[image], crop_to_patches=True, return_tensors="pt")
        pv = out["pixel_values"]  # [V, 3, S, S]
        n_views = int(out["num_patches"][0])
        s_h, s_w = pv.shape[-2:]
        ratio = float(processor.config.downsample_ratio)
        rows, cols = int(s_h // processor.patch_size * ratio), int(s_w // processor.patch_size * ratio)
        w, h = image.size
        if n_views > 1:
            t_cols, t_rows = get_optimal_tiled_canvas((h, w), (s_h, s_w), ip.min_patches, ip.max_patches)
        else:
            t_cols = t_rows = 1
        views, names = tiled_views(w, h, t_cols, t_rows, thumbnail=True)
        if len(views) != n_views:
            raise ValueError(f"InternVL image processor returned {n_views} views; the {t_cols}x{t_rows} tiling needs {len(views)}")
        boxes, rc, tile = views_token_grid(views, rows, cols)
        return ImageBlock({"pixel_values": pv}, self.image_token * len(boxes), boxes, rc, tile, names, (rows, cols))

    def vision_module(self, model):
        return model.model.vision_tower
