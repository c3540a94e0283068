"""Opening one input image, for every source, with the error a person needs: which file
(and row) was bad.

:func:`open_rgb` is the one way vheads reads an image (``strips:``, ``coco:``, ``comics:``,
``imagefolder:`` / ``imagenet:``, ``hf:`` and the benchmark readers all call it): every PIL
mode becomes the 8-bit RGB it means (:func:`image_to_rgb`), or the image is refused.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from vheads._errors import MissingFileError, VheadsError

#: the colour transparent pixels are composited on (alpha, LA, RGBA, palette transparency)
BACKGROUND = (255, 255, 255)
#: images with a side below this are refused: too small to hold a strip's panels or a grid cell
MIN_SIDE = 8
#: width / height (or height / width) above this is refused: VLM processors reject it
MAX_ASPECT = 100.0


def image_to_rgb(im: Image.Image, where: str) -> Image.Image:
    """``im`` as 8-bit RGB, every PIL mode converted by its meaning, or :class:`VheadsError`.

    - ``RGB``, ``L``, ``1``, ``CMYK``, ``YCbCr``, ``P`` without transparency: PIL's conversion;
    - alpha (``RGBA``, ``LA``, ``PA``, ``RGBa``, ``La``, ``P`` with transparency): composited
      on :data:`BACKGROUND` (white), ``out = a·c + (1 − a)·255``;
    - 16-bit (``I;16*``, and ``I`` with values in 0…65535, as 16-bit PNGs open): ``v / 257``
      rounded, so 0 → 0 and 65535 → 255 (PIL's own conversion clips to 255: a white image);
    - ``F`` with values in [0, 1]: ``v · 255`` rounded;
    - anything else (``I`` or ``F`` outside those ranges, ``LAB``, ``HSV``, …) is refused
      with the file named: guessing a range would silently change what the model sees.
    """
    mode = im.mode
    if mode in ("RGB", "L", "1", "CMYK", "YCbCr") or (mode == "P" and "transparency" not in im.info):
        return im.convert("RGB")
    if mode in ("RGBA", "LA", "PA", "RGBa", "La", "P"):
        rgba = im.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", im.size, BACKGROUND + (255,)), rgba).convert("RGB")
    if mode.startswith("I;16") or mode in ("I", "F"):
        a = np.asarray(im, dtype=np.float64)
        lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
        if mode == "F":
            if not (np.isfinite(a).all() and lo >= 0.0 and hi <= 1.0):
                raise VheadsError(f"{where}: float image (mode F) with values in [{lo:g}, {hi:g}], not [0, 1]; save it as 8-bit RGB")
            v = a * 255.0
        else:
            if lo < 0 or hi > 65535:
                raise VheadsError(f"{where}: 32-bit integer image (mode {mode}) with values in [{lo:g}, {hi:g}], not 16-bit; save it as 8-bit RGB")
            v = a / 257.0
        grey = np.clip(np.rint(v), 0, 255).astype(np.uint8)
        return Image.fromarray(np.repeat(grey[..., None], 3, axis=2), "RGB")
    raise VheadsError(f"{where}: image mode {mode!r} is not supported; save it as 8-bit RGB (or L, RGBA, 16-bit grey)")


def open_rgb(src: Path | bytes, where: str) -> Image.Image:
    """The image at ``src`` (a file, or encoded bytes) as 8-bit RGB (:func:`image_to_rgb`).

    A missing file is a :class:`MissingFileError`; an empty file, empty bytes, an
    undecodable image, a mode that has no faithful RGB, a side under :data:`MIN_SIDE`
    pixels or an aspect ratio above :data:`MAX_ASPECT` is a :class:`VheadsError`. Every
    message starts with ``where`` (the source, file and row) and names the file.
    """
    if isinstance(src, Path):
        if not src.is_file():
            raise MissingFileError(f"{where}: image file {src} is missing")
        if src.stat().st_size == 0:
            raise VheadsError(f"{where}: image file {src} is empty (0 bytes)")
        data = src.read_bytes()
        where = where if str(src) in where else f"{where}: {src}"  # every message below names the file
    else:
        data = src
        if not data:
            raise VheadsError(f"{where}: holds no image bytes")
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            if im.width == 0 or im.height == 0:
                raise OSError("zero-size image")
            rgb = image_to_rgb(im, where)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        if isinstance(e, VheadsError):
            raise
        raise VheadsError(f"{where}: not a readable image ({e})") from None
    w, h = rgb.size
    if min(w, h) < MIN_SIDE:
        raise VheadsError(f"{where}: the image is {w}x{h} pixels; images need at least {MIN_SIDE} pixels a side")
    if max(w, h) / min(w, h) > MAX_ASPECT:
        raise VheadsError(f"{where}: the image is {w}x{h} pixels, an aspect ratio above {MAX_ASPECT:g}; VLM processors refuse it")
    return rgb
