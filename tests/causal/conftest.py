"""Fixtures of the causal-map tests."""

import pytest


@pytest.fixture(scope="module")
def tiny():
    """The built-in tiny model (skipped where it is not built)."""
    from vheads.models import load_model

    try:
        return load_model("tiny")
    except FileNotFoundError:
        pytest.skip("the built-in tiny model is not built")
