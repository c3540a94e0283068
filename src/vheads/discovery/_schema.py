"""The JSON Schema of head-set files (``vheads/schemas/headset.schema.json``).

The schema ships inside the package so that a head-set file is readable without vheads:
any JSON Schema validator (draft 2020-12) checks a file against it. vheads itself checks
every file it writes and reads against the same schema (:func:`validate_headset_json`),
then the cross-field rules a schema cannot state (scores are ``n_layers x n_heads``, heads
in range) in :func:`vheads.discovery.load_headset`.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any


@cache
def headset_schema() -> dict[str, Any]:
    """The head-set JSON Schema as a dict (read from the installed package)."""
    return json.loads(files("vheads").joinpath("schemas", "headset.schema.json").read_text(encoding="utf-8"))


def headset_schema_errors(d: Any) -> list[str]:
    """Every way ``d`` breaks the schema, one line each, ``at <json path>: <what>``."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(headset_schema())
    errors = sorted(validator.iter_errors(d), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"at {'/'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}" for e in errors]


def validate_headset_json(d: Any, where: str = "head-set") -> None:
    """Raise ``ValueError`` naming the first offending key if ``d`` breaks the schema."""
    errors = headset_schema_errors(d)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ValueError(f"{where}: not a valid vheads.headset/1 file: {errors[0]}{more}")
