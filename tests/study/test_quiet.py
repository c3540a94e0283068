"""``vheads study --quiet`` is quiet: a one-setting study on the built-in tiny model leaves
stderr empty (no progress bar of vheads or transformers, no matplotlib layout warning);
under ``--quiet`` a library's errors and every Python warning still print, a warning on
one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

ONE_SETTING = """\
model = "tiny"
corpora = ["comics"]
queries = ["ordinal"]
sources = ["last"]
n_discovery = 4
n_eval = 4
splits = 5
tests = ["cers", "ncs"]
row_groups = ["all"]
beta_sweep = []
k_sweep = []

[controls]
layer-matched = 3

[run]
shard_size = 2
batch_size = 16
"""


@pytest.mark.slow  # a whole (small) study in a fresh interpreter: about half a minute
def test_a_quiet_one_setting_study_prints_nothing_on_stderr(tmp_path):
    (tmp_path / "c.toml").write_text(ONE_SETTING)
    r = subprocess.run([sys.executable, "-m", "vheads", "study", "c.toml", "--out", "run", "--quiet"], cwd=tmp_path,
                       env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr == "", r.stderr[-3000:]
    assert "report: run/report.html" in r.stdout and (tmp_path / "run" / "report.html").is_file()


#: what a library may say during a study: a progress bar, an info and a warning log line,
#: an error log line, and a Python warning of several lines
CHATTER = """
import sys, warnings
if sys.argv[1] == "quiet":
    from vheads.cli import _quiet_libraries
    quiet = _quiet_libraries()
    quiet.__enter__()  # quiet for the rest of this script (held, so it is not closed)
from transformers.utils import logging
for _ in logging.tqdm(range(3), desc="Loading weights"):
    pass
log = logging.get_logger("transformers.modeling_utils")
log.info("some info")
log.warning("some weights were not used")
log.error("the checkpoint is damaged")
warnings.warn("the first line says what to do\\nand a second line adds detail", UserWarning)
"""


def chatter(mode: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", CHATTER, mode], env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return [line for line in r.stderr.splitlines() if line.strip()]


def test_quiet_keeps_errors_and_each_warning_on_one_line():
    loud = "\n".join(chatter("loud"))
    assert "Loading weights" in loud and "some weights were not used" in loud  # what quiet must remove is there
    error, warning = chatter("quiet")  # nothing else
    assert error.endswith("the checkpoint is damaged")
    assert warning == "warning: the first line says what to do (UserWarning)"


def test_quiet_restores_library_logging_on_leaving():
    """A command run in-process (a notebook, a test) leaves transformers' logging as it found it."""
    import warnings

    from transformers.utils import logging as hf_logging

    from vheads.cli import _quiet_libraries

    before, fmt = hf_logging.get_verbosity(), warnings.formatwarning
    with _quiet_libraries():
        assert hf_logging.get_verbosity() == hf_logging.ERROR and not hf_logging.is_progress_bar_enabled()
    assert hf_logging.get_verbosity() == before and hf_logging.is_progress_bar_enabled()
    assert warnings.formatwarning is fmt
