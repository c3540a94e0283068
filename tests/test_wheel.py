"""The wheel: built from a copy of the source, it carries the tiny model and the head-set
schema, installs into a fresh venv, and its ``vheads`` command works there with no source
tree on the path.

The fresh venv has no pip of its own and no third-party packages: it is given the test
interpreter's site-packages (torch, transformers, …) through a ``.pth`` line. Lines of a
``.pth`` file only add a folder to ``sys.path`` — the ``.pth`` files inside that folder
(such as an editable install of vheads) are not run — so ``vheads`` can only come from
the wheel, which the tests check (``vheads.__file__`` lies in the new venv).
"""

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """``pip wheel`` of a copy of the project (the worktree is left untouched)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "project"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(root / "dist"), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = (root / "dist").glob("vheads-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel installed; third-party packages come from the test's site-packages."""
    root = tmp_path_factory.mktemp("venv")
    env_dir = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=300)
    py = env_dir / "bin" / "python"
    purelib = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    # install first, into a venv that sees nothing else (a vheads elsewhere must not make pip skip the wheel)
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                        "--ignore-installed", "-q", str(wheel)], env=clean_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert list(purelib.glob("vheads-*.dist-info")), f"pip did not install the wheel into {purelib}: {r.stdout[-2000:]}"
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    (purelib / "zz_shared_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    return env_dir


def clean_env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_in(venv_dir, args, cwd, timeout=600):
    r = subprocess.run(args, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args}: exit {r.returncode}\n{r.stderr[-3000:]}"
    return r.stdout


def test_wheel_carries_the_tiny_model_the_schema_and_the_adapter_table(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = sorted(p.name for p in (REPO / "src" / "vheads" / "tiny" / "weights").iterdir())
    for name in shipped:
        assert f"vheads/tiny/weights/{name}" in names, f"{name} of the tiny model is not in the wheel"
    assert "vheads/schemas/headset.schema.json" in names
    assert "vheads/models/adapters.json" in names  # what `vheads models` prints
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert entry and "vheads = vheads.cli:app" in zipfile.ZipFile(wheel).read(entry[0]).decode()


def test_vheads_comes_from_the_wheel(venv, tmp_path):
    py = venv / "bin" / "python"
    out = run_in(venv, [str(py), "-c", "import json, vheads; from vheads.models import tiny_model_path; "
                        "print(json.dumps([vheads.__file__, vheads.__version__, str(tiny_model_path())]))"], tmp_path)
    file, version, weights = json.loads(out.strip().splitlines()[-1])
    assert Path(file).resolve().is_relative_to(venv.resolve()), file
    assert Path(weights).resolve().is_relative_to(venv.resolve()), weights
    assert not Path(file).resolve().is_relative_to(REPO.resolve())
    import tomllib

    assert version == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.slow
def test_the_installed_command_runs_tiny_eval(venv, tmp_path):
    vh = str(venv / "bin" / "vheads")
    res = json.loads(run_in(venv, [vh, "tiny", "eval", "--n", "20", "--json"], tmp_path))
    assert res and all(r["n"] == 20 for r in res.values()), res
    # the shipped weights were loaded: it answers what a random model could not (docs/tiny_model.md: 1.000)
    assert res["grid-oracle"]["accuracy"] >= 0.9 and res["strip-referring/comics"]["accuracy"] >= 0.9, res


def test_the_installed_command_runs_discover(venv, tmp_path):
    vh = str(venv / "bin" / "vheads")
    out = tmp_path / "headsets"
    run_in(venv, [vh, "discover", "--n", "8", "--corpus", "comics", "--query", "referring", "--source", "last", "--k", "4",
                  "--out", str(out)], tmp_path)
    d = json.loads((out / "cm-ref-last.json").read_text())
    assert d["model"]["id"] == "tiny" and len(d["heads"]) == 4
    assert d["vheads_version"] == json.loads(run_in(venv, [str(venv / "bin" / "python"), "-c",
                                                          "import json, vheads; print(json.dumps(vheads.__version__))"], tmp_path))
