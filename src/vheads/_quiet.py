"""Quiet output: ``--quiet`` on every command that computes, and no weight-loading bar.

Imports the standard library only at module level (transformers inside the functions), so
the CLI modules can import it and still answer ``--help`` at once.
"""

from __future__ import annotations

import contextlib
import os
import warnings


@contextlib.contextmanager
def quiet_libraries(quiet: bool = True):
    """``--quiet``: no progress bar and no chatter from the libraries vheads drives
    (transformers' info and warning logs, the hub's download bars); its errors, and every
    Python warning, still print, a warning on one line. Everything is restored on leaving,
    so a command run in-process (a notebook, a test) leaves transformers' logging as it
    found it."""
    if not quiet:
        yield
        return
    from transformers.utils import logging as hf_logging

    env = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    verbosity, fmt = hf_logging.get_verbosity(), warnings.formatwarning
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    hf_logging.set_verbosity_error()
    warnings.formatwarning = one_line_warning
    try:
        with no_progress_bars():
            yield
    finally:
        warnings.formatwarning = fmt
        hf_logging.set_verbosity(verbosity)
        if env is None:
            os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = env


@contextlib.contextmanager
def no_progress_bars():
    """transformers' own progress bars (its "Loading weights" bar) off inside, as they were after."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A Python warning as one line: ``warning: FIRST LINE (Category)``."""
    first = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
    return f"warning: {first} ({category.__name__})\n"
