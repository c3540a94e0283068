"""The documentation site builds with no warnings (``mkdocs build --strict``), and its pages
carry what they promise: formulas from the docstrings, the tested interop examples and
the shipped schema."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_docs_build_strict(tmp_path):
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(site)],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stderr[-4000:]}"

    def text(page):
        return re.sub(r"<[^>]+>", "", (site / page / "index.html").read_text())

    # a metric's formula comes from its function's docstring (mkdocstrings rendered it)
    assert "Steerability on 2x2 grids" in text("metrics")
    # the interop page includes the example files that tests/test_interop.py runs
    for example in ("mask_with_hooks.py", "mask_with_nnsight.py"):
        first_def = re.search(r"^def (\w+)", (REPO / "docs" / "examples" / example).read_text(), re.M).group(1)
        assert f"def {first_def}" in text("interop")
    assert "vheads.headset/1" in text("headset_schema") and "prefixItems" in text("headset_schema")


def test_docs_point_only_inside_the_repository():
    """README, docs, DESIGN.md and the sources never point to ``../shared`` (absent from a
    clone); the README cites the seed study by its title, and DESIGN.md, which the
    docstrings cite, is in the repository."""
    files = [REPO / "README.md", REPO / "DESIGN.md", *(REPO / "docs").rglob("*.md"), *(REPO / "src").rglob("*.py")]
    outside = [str(f.relative_to(REPO)) for f in files if re.search(r"\.\./shared|shared/seeds", f.read_text())]
    assert outside == []
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "Kadir and Daniel Sonntag, *What Do Visual-Head Discovery Scores Actually Find?" in readme
    assert (REPO / "DESIGN.md").read_text().startswith("# vheads — design")
