"""The set-up (issue 34 point 13): the Makefile's torch line, checked by a dry run of its
logic (``make -n -B``: the commands, none run), and the version check at start."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vheads._errors import VheadsError
from vheads._versions import check_versions, requirements

REPO = Path(__file__).resolve().parents[1]
INDEX = "https://download.pytorch.org/whl/cu128"


def dry_run(*args: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    r = subprocess.run(["make", "-n", "-B", "-C", str(REPO), "setup", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if "pip install" in line and "torch" in line]


def test_the_default_setup_keeps_a_torch_already_in_the_venv():
    (line,) = dry_run()
    assert line.startswith('.venv/bin/python -c "import torch" 2>/dev/null ||') and "torch==2.13.0" in line
    assert "--index-url" not in line and "--force-reinstall" not in line


def test_a_gpu_setup_installs_the_cuda_build_from_the_pytorch_index():
    (line,) = dry_run(f"TORCH_INDEX={INDEX}")
    assert f"--force-reinstall --no-deps torch==2.13.0 --index-url {INDEX}" in line  # replaces a CPU torch
    assert "import torch" not in line  # not skipped because some torch is there
    (line,) = dry_run("TORCH=torch==2.12.1", f"TORCH_INDEX={INDEX}")
    assert "torch==2.12.1 --index-url" in line


def test_setup_ends_with_the_version_check():
    r = subprocess.run(["make", "-n", "-B", "-C", str(REPO), "setup"], capture_output=True, text=True, timeout=60)
    lines = r.stdout.splitlines()
    assert any(line.endswith("-m vheads._versions") for line in lines)


def test_versions_outside_the_declared_range_are_one_clear_line():
    need = {"transformers": ">=5.20,<6", "torch": ">=2.4"}
    check_versions({"transformers": "5.24.0", "torch": "2.13.0+cu128"}, need)  # a CUDA build's local tag is fine
    with pytest.raises(VheadsError) as e:
        check_versions({"transformers": "4.57.1", "torch": "2.13.0"}, need)
    assert str(e.value).startswith("transformers 4.57.1 is installed, but vheads needs transformers<6,>=5.20") \
        or str(e.value).startswith("transformers 4.57.1 is installed, but vheads needs transformers>=5.20,<6")
    with pytest.raises(VheadsError, match="torch is not installed"):
        check_versions({"transformers": "5.24.0"}, need)


def test_the_declared_ranges_are_pyprojects():
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    got = requirements()
    if not got:
        pytest.skip("vheads is not installed (run from a source tree)")
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    for line in declared:
        r = Requirement(line)
        if r.name in got:
            assert SpecifierSet(got[r.name]) == r.specifier
    check_versions()  # this environment fits
