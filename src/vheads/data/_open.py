"""Opening one input image, with the error a person needs: which file (and row) was bad."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image


def open_rgb(src: Path | bytes, where: str) -> Image.Image:
    """The image at ``src`` (a file, or encoded bytes) as RGB.

    A missing file is a FileNotFoundError; an empty file, empty bytes, a zero-size or an
    undecodable image is a ValueError; both start with ``where`` (file and row).
    """
    if isinstance(src, Path):
        if not src.is_file():
            raise FileNotFoundError(f"{where}: image file {src} is missing")
        if src.stat().st_size == 0:
            raise ValueError(f"{where}: image file {src} is empty (0 bytes)")
        data = src.read_bytes()
    else:
        data = src
        if not data:
            raise ValueError(f"{where}: holds no image bytes")
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            if im.width == 0 or im.height == 0:
                raise OSError("zero-size image")
            return im.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise ValueError(f"{where}: not a readable image ({e})") from None
