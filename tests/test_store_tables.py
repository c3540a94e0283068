"""A stage's own results-store table (vheads.store.register_table): created on write, shown
per model to a reader that never registered it, and refused when registered twice differently."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import vheads.store
from vheads.store import Store, register_table

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(autouse=True)
def _own_tables(monkeypatch):
    """The tables registered here are this module's only (every later store would make them)."""
    monkeypatch.setattr(vheads.store, "TABLES", dict(vheads.store.TABLES))


def test_a_registered_table_is_written_per_model_and_read_without_registering_it(tmp_path):
    register_table("test_extra", "setting TEXT, value REAL", "setting")
    for model, v in (("a", 1.0), ("b", 2.0)):
        st = Store(tmp_path, model=model)
        st.commit_unit("u", "extra", 0.0, {"test_extra": [("cm-ord-last", v)]})
        st.close()
    # a fresh interpreter: vheads without the registration, each model's view of the table
    code = ("import sys; from vheads.store import Store; "
            "print([Store(sys.argv[1], readonly=True, model=m).query('SELECT * FROM test_extra') for m in 'ab'])")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC)}).stdout
    assert out.strip() == "[[('cm-ord-last', 1.0)], [('cm-ord-last', 2.0)]]"


def test_a_table_registered_twice_with_other_columns_is_refused():
    register_table("test_twice", "a TEXT", "a")
    register_table("test_twice", "a TEXT", "a")  # the same table again: a module imported twice
    with pytest.raises(ValueError, match="'test_twice' is registered twice"):
        register_table("test_twice", "a TEXT, b REAL", "a")
    with pytest.raises(ValueError, match="one of vheads' own tables"):
        register_table("outcomes", "a TEXT", "a")
