"""A forward that runs out of device memory is split in half and retried, down to one row.

Rows do not depend on the rows they share a forward with (:class:`vheads.engine.RowBatch`),
so the halves give what the whole would have given. Evaluation's probe forwards and
discovery's capture forwards both run through :func:`split_on_oom`; discovery's greedy
answers (one row each) fail with :func:`one_row_out_of_memory`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import torch

from vheads._errors import VheadsError

LOG = logging.getLogger("vheads")

W = TypeVar("W")  # a forward's work (its rows)
R = TypeVar("R")  # what the forward gives for its work


def one_row_out_of_memory(model: str) -> VheadsError:
    """The error for a forward of one row (or one greedy generation) that does not fit on the device."""
    return VheadsError(f"out of memory on a forward of one row of model {model}: lowering [run] batch_size or token_budget "
                       "cannot help; use a smaller dtype (dtype = \"bfloat16\"), device_map = \"auto\" or a GPU with more memory")


def split_on_oom(run: Callable[[W], R], work: W, n_rows: Callable[[W], int], halve: Callable[[W, int], tuple[W, W]],
                 join: Callable[[R, R], R], model: str) -> R:
    """``run(work)``; on ``torch.OutOfMemoryError``, ``join`` of the same on the two halves
    ``halve(work, n_rows(work) // 2)`` (recursively), with a warning on the ``vheads`` logger.

    ``halve(work, k)`` must keep the row order, its first part holding ``k`` rows, and
    ``join`` must put the two parts' results back in that order. A forward of one row that
    does not fit is a :class:`VheadsError` naming ``model`` and what to change.
    """
    try:
        return run(work)
    except torch.OutOfMemoryError:
        pass  # retried outside the handler: its traceback holds the failed forward's tensors
    rows = n_rows(work)
    if rows <= 1:
        raise one_row_out_of_memory(model)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    LOG.warning("out of memory on a forward of %d rows of model %s; split into forwards of %d and %d rows and retried "
                "(lower [run] batch_size or token_budget to avoid the retry)", rows, model, rows // 2, rows - rows // 2)
    first, second = halve(work, rows // 2)
    return join(split_on_oom(run, first, n_rows, halve, join, model), split_on_oom(run, second, n_rows, halve, join, model))
