"""The error a user can act on, and the guards that keep data from choosing where files go.

:class:`VheadsError` is the project's one error type for bad input and for a run that
cannot go on (damaged store, full or read-only disk). Its message is one line that says
what was wrong, with the value or file, and what to do; the CLI prints it as
``error: <message>`` and exits 2, with no traceback. It subclasses ``ValueError`` (and
:class:`MissingFileError` also ``FileNotFoundError``) so callers that catch those keep
working.

Names read from data (a ``strips.json``'s ``corpus`` / ``abbrev``, an image's name) may
become parts of file names. :func:`safe_name` accepts only plain identifiers, and
:func:`path_inside` resolves every output path and refuses one outside its root folder;
:func:`inside_data_folder` does the same for a file read from a data folder (a symlink or
a metadata path leading out of it). :func:`plain_text` checks a label read from data.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import unicodedata
from pathlib import Path


class VheadsError(ValueError):
    """Bad input, or a run that cannot go on: one line for a person, exit 2 in the CLI."""


class MissingFileError(VheadsError, FileNotFoundError):
    """An input file or folder that does not exist."""


#: letters, digits and ``_ . + -``, starting with a letter or digit, at most 64 characters
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")


#: items (or half-splits) above this are a typo, not a study: every command and config key bounds its counts here
MAX_ITEMS = 1_000_000
#: seeds are 0 … 2**63 − 1 (they are stored as SQLite's signed 64-bit integers)
MAX_SEED = (1 << 63) - 1


def check_range(what: str, value: object, lo: int, hi: int) -> int:
    """``value`` if it is an integer in ``lo … hi``, else :class:`VheadsError` naming ``what``
    (a flag such as ``--seed``, or a config key) and the value."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise VheadsError(f"{what} must be an integer from {lo:,} to {hi:,}, got {value!r}")
    return value


def safe_name(value: object, what: str, allowed: re.Pattern = SAFE_NAME) -> str:
    """``value`` if it is a safe identifier (see :data:`SAFE_NAME`), else :class:`VheadsError`.

    ``what`` names where the value came from (``"strips.json key 'abbrev'"``).
    """
    if not isinstance(value, str) or not allowed.fullmatch(value) or value in (".", ".."):
        raise VheadsError(
            f"{what} must be a plain name ({allowed.pattern}), got {value!r}; names read from data "
            "become parts of file names, so path separators and other characters are refused"
        )
    return value


def plain_text(value: object, what: str, multiline: bool = False) -> str:
    """``value`` if it is a non-empty string without control characters, else :class:`VheadsError`.

    For labels, class names and answer choices read from data (``what`` names the file and
    entry): a list or number is refused rather than turned into the text ``"['a', 'b']"``,
    and a newline, NUL or other control character (Unicode category ``Cc``) is refused
    rather than passed into a prompt or a table. ``multiline=True`` (question texts)
    allows newlines and tabs.
    """
    if not isinstance(value, str):
        raise VheadsError(f"{what} must be a non-empty string, got {type(value).__name__} {value!r:.80}")
    if not value.strip():
        raise VheadsError(f"{what} must be a non-empty string, got {value!r:.80}")
    allowed = "\n\r\t" if multiline else ""
    bad = next((ch for ch in value if unicodedata.category(ch) == "Cc" and ch not in allowed), None)
    if bad is not None:
        raise VheadsError(f"{what} holds the control character {bad!r} ({value!r:.80}); remove it from the data")
    return value


def path_inside(root: str | Path, *parts: str) -> Path:
    """``root / parts…``, resolved, refused (:class:`VheadsError`) unless it lies inside ``root``."""
    base = Path(root).resolve()
    p = base.joinpath(*parts).resolve()
    if p != base and base not in p.parents:
        raise VheadsError(f"refusing to write {p}: it lies outside the output folder {base}")
    return p


def inside_data_folder(root: str | Path, path: str | Path, what: str) -> Path:
    """``path`` (a file found in, or named by, the data folder ``root``) if it resolves inside
    ``root``; a symlink or a metadata entry that leads out of it is a :class:`VheadsError`
    (``what`` names the source), so a data folder can only show what it holds."""
    base, p = Path(root).resolve(), Path(path).resolve()
    if p != base and base not in p.parents:
        raise VheadsError(f"{what}: {path} leads outside the data folder {base} (to {p}); "
                          "copy the file into the folder instead of linking to it")
    return Path(path)


def storage_error(e: BaseException, where: str | Path | None = None) -> VheadsError | None:
    """One line for a failed write or a damaged SQLite store (``None`` if ``e`` is neither).

    Says what happened, what is safe and what to do: every finished work unit of a study
    is committed atomically, so rerunning the same command resumes after the cause is fixed.
    """
    where = str(where or getattr(e, "filename", None) or "the run folder")
    msg = str(e).lower()
    if isinstance(e, OSError) and e.errno == errno.ENOSPC or "disk is full" in msg:
        what = f"the disk is full (writing {where})"
    elif isinstance(e, OSError) and e.errno == errno.EROFS or "readonly" in msg or "read-only" in msg:
        what = f"{where} is on a read-only file system"
    elif isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM):
        what = f"no permission to write {where}"
    elif isinstance(e, sqlite3.DatabaseError) and ("not a database" in msg or "malformed" in msg or "corrupt" in msg):
        return VheadsError(
            f"results store {where} is damaged ({e}); nothing was changed. Move the run folder's results.sqlite "
            "aside and rerun the same command to recompute the run (figures and strips are rebuilt from it)"
        )
    elif isinstance(e, sqlite3.DatabaseError):
        what = f"the results store {where} failed ({e})"
    else:
        return None
    return VheadsError(
        f"{what}; no partial file was kept (files are written whole or not at all) and work already committed to "
        "a run's results.sqlite is safe. Fix the cause (free space, a writable folder) and rerun the same command "
        "(a study resumes where it stopped)"
    )


def check_output_path(path: str | Path, what: str = "--out") -> Path:
    """``path`` if a command may make it (or write into it) as its output folder, else
    :class:`VheadsError` naming ``what`` and the value, before anything is written:
    a name longer than the file system allows (usually 255 bytes a name), the file
    system's root (``--out /``), or a path below a file (``--out notes.txt/run``)."""
    path = Path(path)
    full = path.absolute()

    def exists(p: Path) -> bool:
        try:
            return p.exists() or p.is_symlink()
        except OSError:  # a name too long to look up
            return False

    existing = next((p for p in [full, *full.parents] if exists(p)), Path(full.anchor))
    try:
        name_max = os.pathconf(existing if existing.is_dir() else existing.parent, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        name_max = 255
    long = next((part for part in full.parts if len(os.fsencode(part)) > name_max), None)
    if long is not None:
        raise VheadsError(f"{what} {str(path)[:60]!r}…: the name {long[:40]!r}… has {len(os.fsencode(long))} bytes, "
                          f"more than the file system's limit of {name_max}; choose a shorter name")
    if full == Path(full.anchor) or path.resolve() == Path(path.resolve().anchor):
        raise VheadsError(f"{what} {str(path)!r} is the file system's root; pass a folder of its own for the output")
    if existing == full and not existing.is_dir():
        raise VheadsError(f"{what} {str(path)!r} is a file, not a folder; pass a folder (a new name or a run folder)")
    if not existing.is_dir():
        raise VheadsError(f"{what} {str(path)!r} lies below {str(existing)!r}, which is a file, not a folder")
    return path


def check_output_file(path: str | Path, what: str = "--out", suffix: str | None = None) -> Path:
    """``path`` if a command may write it as one output file (a rerun overwrites it), else
    :class:`VheadsError` naming ``what``: a folder (with the name to pass instead), another
    suffix than ``suffix``, a folder that does not exist, or a name :func:`check_output_path` refuses."""
    path = Path(path)
    if path.is_dir():
        example = path / f"results{suffix or '.json'}"
        raise VheadsError(f"{what} {str(path)!r} is a folder; pass a file name{f' ({suffix})' if suffix else ''}, e.g. {str(example)!r}")
    if suffix is not None and path.suffix.lower() != suffix:
        raise VheadsError(f"{what} must be a {suffix} file, got {str(path)!r}")
    if not path.parent.is_dir():
        raise MissingFileError(f"folder {str(path.parent)!r} of {what} does not exist")
    if not path.exists():
        check_output_path(path, what)  # a name too long, or below a file
    return path


def make_output_folder(path: str | Path, hint: str = "pass --out to a writable folder") -> Path:
    """``mkdir -p path``; a read-only or full disk is one line that says the input is untouched."""
    path = check_output_path(Path(path), "output folder")
    if path.exists() and not path.is_dir():
        raise VheadsError(f"output folder {path} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".vheads-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise VheadsError(f"cannot write to {path} ({e.strerror or e}); nothing was changed: {hint}") from None
    return path
