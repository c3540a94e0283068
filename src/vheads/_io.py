"""Reading the JSON files vheads takes as input, with errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: Path, what: str | None = None) -> Any:
    """Parse ``path``; invalid JSON is a ValueError "<what> is not valid JSON: …"."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{what or path} is not valid JSON: {e}") from None
