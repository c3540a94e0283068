"""Stable derived seeds: one named draw, one seed, independent of Python's hash salt."""

from __future__ import annotations

import hashlib
from typing import Any


def derived_seed(seed: int, *parts: Any) -> int:
    """A 32-bit seed for the draw named by ``parts`` under the run's ``seed``."""
    h = hashlib.sha256("|".join([str(seed), *map(str, parts)]).encode()).hexdigest()
    return int(h[:8], 16)
