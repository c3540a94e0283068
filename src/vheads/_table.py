"""Result objects as a notebook reads them: rows of plain values, a text table, a DataFrame.

:class:`~vheads.discovery.OverlapReport` and :class:`~vheads.evaluation.HeadsetResult` give
``to_records()`` (a list of flat dicts: one row per pair / per control), print as a text
table (their ``repr``), and ``to_frame()`` builds a pandas DataFrame of the same rows where
pandas is installed (it is not a dependency of vheads).
"""

from __future__ import annotations

import math


def _cell(v) -> str:
    if isinstance(v, float):
        return "nan" if not math.isfinite(v) else f"{v:.4g}"
    return "" if v is None else str(v)


def text_table(rows: list[dict], title: str = "") -> str:
    """``rows`` (flat dicts sharing their keys) as aligned text columns under ``title``."""
    if not rows:
        return f"{title}\n(no rows)" if title else "(no rows)"
    keys = list(rows[0])
    cells = [[_cell(r.get(k)) for k in keys] for r in rows]
    numeric = [all(isinstance(r.get(k), (int, float)) or r.get(k) is None for r in rows) for k in keys]  # right-aligned
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.rjust(w) if num else k.ljust(w) for k, w, num in zip(keys, widths, numeric))]
    lines += ["  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric)) for r in cells]
    return "\n".join(([title] if title else []) + lines)


def frame(rows: list[dict]):
    """The rows as a pandas DataFrame (pandas is optional: one clear error without it)."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("to_frame() needs pandas, which is not installed (pip install pandas); "
                          "to_records() gives the same rows as a list of dicts") from None
    return pd.DataFrame.from_records(rows)
