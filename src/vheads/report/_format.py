"""How the report prints a number, a p, an interval and a verdict, one place for every table:
``–`` for a missing value, no ``-0.000``, a p below 0.001 in scientific notation.
"""

from __future__ import annotations

import numpy as np

from vheads.evaluation import Interval


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.000"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_ci(iv: Interval | None, s: np.ndarray | None = None) -> str:
    if iv is not None:
        return f"{fmt(iv.mean)} [{fmt(iv.low)}, {fmt(iv.high)}]"
    if s is not None and len(s):
        return f"{fmt(float(np.mean(s)))} [n={len(s)}]"
    return "–"


def fmt_verdict(v: str | None) -> str:
    """A verdict as the tables print it: **yes**, no, cannot tell; – when not read."""
    return "–" if v is None else "**yes**" if v == "yes" else v
