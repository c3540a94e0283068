"""benchmarks/gpu_check: its CPU smoke run writes what the GPU run writes, and it refuses
what it cannot do with one line (exit 2). The figures themselves are measured on a GPU only
(benchmarks/README.md, "GPU check")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, cwd=ROOT, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHON": sys.executable}
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_gpu_check_smoke_writes_every_row_and_the_summary(tmp_path):
    out = tmp_path / "gc"
    r = _run(sys.executable, "benchmarks/gpu_check.py", "--smoke", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((out / "gpu_check.json").read_text())
    w = res["widths"]["smoke"]
    for key in ("forward", "capture / plain", "evaluation per-head-set / batched", "padded batch", "ablation zero", "bf16 vs fp32"):
        assert key in w, key
    # fp32 on a CPU: a padded batch of items of different lengths gives each item's own answer
    pb = w["padded batch"]
    assert len(set(pb["lengths"])) > 1
    assert pb["max_abs_dP"] < 1e-5
    assert w["evaluation per-head-set / batched"]["max_abs_dP"] < 1e-5
    # the saved summary is the printed one
    summary = (out / "gpu_check.txt").read_text().strip()
    assert summary and summary in r.stdout
    assert res["projection_gpu_hours"]["gpu_hours"] > 0


def test_gpu_check_refuses_a_file_as_out(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = _run(sys.executable, "benchmarks/gpu_check.py", "--smoke", "--out", str(f), timeout=120)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "is a file" in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: the script would run the check")
def test_gpu_check_sh_without_cuda_says_so_in_one_line(tmp_path):
    r = _run("bash", "benchmarks/gpu_check.sh", "--out", str(tmp_path / "gc"), timeout=120)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "no CUDA device" in r.stderr
    assert not (tmp_path / "gc").exists()
