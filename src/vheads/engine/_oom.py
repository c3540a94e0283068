"""A forward that runs out of device memory is split in half and retried, down to one row; the size that fit is remembered.

Rows do not depend on the rows they share a forward with (:class:`vheads.engine.RowBatch`),
so the halves give what the whole would have given. Evaluation's probe forwards,
discovery's capture forwards and AtP's forward-and-backward passes all run through
:func:`split_on_oom` with their engine's :class:`RowLimit`: after a split, every later
forward of that engine starts at the size that was tried next (no forward runs out of
memory again for the same reason). Discovery's greedy answers (one row each) fail with
:func:`one_row_out_of_memory`. Both kinds of out-of-memory error count
(:func:`is_out_of_memory`): ``torch.OutOfMemoryError`` and the plain ``RuntimeError``
("CUDA out of memory", "out of memory" from other allocators and older kernels).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

from vheads._errors import VheadsError

LOG = logging.getLogger("vheads")

W = TypeVar("W")  # a forward's work (its rows)
R = TypeVar("R")  # what the forward gives for its work


@dataclass
class RowLimit:
    """The most batch rows one forward may hold, as learnt from out-of-memory errors (None:
    no limit learnt yet). An engine keeps one for all its forwards."""

    rows: int | None = None


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is a device running out of memory: ``torch.OutOfMemoryError``, or a
    ``RuntimeError`` whose message says "out of memory" (CUDA's plain form)."""
    return isinstance(exc, torch.OutOfMemoryError) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def one_row_out_of_memory(model: str) -> VheadsError:
    """The error for a forward of one row (or one greedy generation) that does not fit on the device."""
    return VheadsError(f"out of memory on a forward of one row of model {model}: lowering [run] batch_size or token_budget "
                       "cannot help; use a smaller dtype (dtype = \"bfloat16\"), device_map = \"auto\" or a GPU with more memory")


def split_on_oom(run: Callable[[W], R], work: W, n_rows: Callable[[W], int], halve: Callable[[W, int], tuple[W, W]],
                 join: Callable[[R, R], R], model: str, limit: RowLimit | None = None) -> R:
    """``run(work)``; on an out-of-memory error (:func:`is_out_of_memory`), ``join`` of the
    same on the two halves ``halve(work, n_rows(work) // 2)`` (recursively), with a warning
    on the ``vheads`` logger. With ``limit``, work of more than ``limit.rows`` rows is cut
    into forwards of ``limit.rows`` before it runs, and a split lowers ``limit.rows`` to the
    half it tries next: later calls start from the size that fits.

    ``halve(work, k)`` must keep the row order, its first part holding ``k`` rows, and
    ``join`` must put the two parts' results back in that order. A forward of one row that
    does not fit is a :class:`VheadsError` naming ``model`` and what to change.
    """
    rows = n_rows(work)
    if limit is not None and limit.rows is not None and rows > limit.rows:
        first, second = halve(work, limit.rows)
        return join(split_on_oom(run, first, n_rows, halve, join, model, limit), split_on_oom(run, second, n_rows, halve, join, model, limit))
    try:
        return run(work)
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
    # retried outside the handler: its traceback holds the failed forward's tensors
    if rows <= 1:
        raise one_row_out_of_memory(model)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if limit is not None:
        limit.rows = rows // 2
    LOG.warning("out of memory on a forward of %d rows of model %s; split into forwards of %d and %d rows and retried%s "
                "(lower [run] batch_size or token_budget to avoid the retry)", rows, model, rows // 2, rows - rows // 2,
                "; later forwards hold at most %d rows" % (rows // 2) if limit is not None else "")
    first, second = halve(work, rows // 2)
    return join(split_on_oom(run, first, n_rows, halve, join, model, limit), split_on_oom(run, second, n_rows, halve, join, model, limit))
