"""The report is built from the results store alone: `vheads report DIR` loads no torch and
no transformers (their import was most of the report's start), whatever sections it has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.report.synth import make_run

SRC = Path(__file__).resolve().parents[2] / "src"

DRIVER = """
import json, runpy, sys
sys.argv = ["vheads", "report", sys.argv[1]]
try:
    runpy.run_module("vheads", run_name="__main__")
except SystemExit as e:
    assert not e.code, e.code
print(json.dumps([m for m in ("torch", "transformers") if m in sys.modules]))
"""


def test_vheads_report_loads_no_torch(tmp_path):
    run = make_run(tmp_path / "run", settings=["cm-ord-last", "cm-ref-qsp"], R=5, causal=True, atp=True)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", DRIVER, str(run)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (run / "report.html").is_file()
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
