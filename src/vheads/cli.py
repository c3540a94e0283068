"""The ``vheads`` command's entry point (``[project.scripts]``, ``python -m vheads.cli``).

The commands live in :mod:`vheads._cli`, one module each; this module keeps the name the
entry point, ``python -m vheads`` and the tests import.
"""

from __future__ import annotations

from vheads._cli import COMMAND_ORDER, app, main  # noqa: F401  (re-exported)
from vheads._quiet import quiet_libraries as _quiet_libraries  # noqa: F401  (tests/study/test_quiet.py)

if __name__ == "__main__":
    app()
