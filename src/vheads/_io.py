"""Reading the JSON files vheads takes as input, with errors that name the file, and
writing output files atomically."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vheads._errors import MissingFileError, VheadsError, storage_error


def read_text(path: Path, what: str | None = None) -> str:
    """The UTF-8 text of ``path``; a folder, a missing file, or bytes that are not UTF-8 text
    (a binary file: invalid UTF-8 or a NUL byte) is a :class:`VheadsError` naming the file."""
    path = Path(path)
    what = what or str(path)
    if path.is_dir():
        raise VheadsError(f"{what} is a folder, not a file")
    if not path.is_file():
        raise MissingFileError(f"{what} does not exist")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise VheadsError(f"{what} is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r}); is it a binary file?") from None
    if "\x00" in text:
        raise VheadsError(f"{what} holds a NUL byte (at character {text.index(chr(0))}); it is a binary file, not text")
    return text


def read_json(path: Path, what: str | None = None) -> Any:
    """Parse ``path``; invalid JSON is a :class:`VheadsError` "<what> is not valid JSON: …"."""
    path = Path(path)
    if path.is_dir():
        raise VheadsError(f"{what or path} is a folder, not a JSON file")
    text = read_text(path, what)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise VheadsError(f"{what or path} is not valid JSON: {e}") from None


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, ±inf) replaced by ``None`` (JSON ``null``)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[Any], None], mode: str = "w") -> Path:
    """Write ``path`` through ``write(fileobj)`` into a temp file, then ``os.replace`` it.

    A failure (full disk, kill) never leaves a partial or 0-byte ``path``; the file gets
    the permissions of the user's umask (``0o666 & ~umask``), like ``open(path, "w")``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        explained = storage_error(e, path) if isinstance(e, OSError) else None
        if explained is not None:
            raise explained from None
        raise
    return path
