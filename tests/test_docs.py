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


def test_readme_is_short():
    """The README is the front page (what vheads is, the quick start, the API in ten lines, the
    commands, the data a user brings); everything else lives in ``docs/`` (issue 42)."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into a docs/ page"


def cli_commands() -> list[str]:
    """Every ``vheads`` subcommand, as ``vheads --help`` lists it (groups with their subcommands)."""
    import typer.main

    from vheads.cli import app

    names = []
    for name, cmd in typer.main.get_command(app).commands.items():
        sub = getattr(cmd, "commands", None)
        names += [f"{name} {s}" for s in sub] if sub else [name]
    return names


def table_commands(page: str) -> set[str]:
    """The ``vheads …`` commands named in the first cell of a Markdown table row of ``page``
    (``vheads tiny train --out DIR`` names ``tiny train``; options and arguments are not names)."""
    first_cells = [line.split(" | ")[0] for line in (REPO / page).read_text().splitlines() if line.startswith("| `vheads ")]
    return {name for cell in first_cells for name in re.findall(r"`vheads ([a-z][a-z-]*(?: [a-z][a-z-]*)?)", cell)}


def test_every_command_has_a_row_in_the_readme_and_in_the_cli_page():
    commands = cli_commands()
    assert {"study", "causal-map", "data preview", "tiny train", "tiny eval"} <= set(commands)
    for page in ("README.md", "docs/cli.md"):
        missing = [c for c in commands if c not in table_commands(page)]
        assert missing == [], f"{page}'s command table has no row for: {', '.join('vheads ' + c for c in missing)}"


LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"^```.*?^```[ \t]*$|`[^`\n]*`", re.M | re.S)


def heading_slugs(page: Path) -> set[str]:
    """The anchors of ``page``'s headings, as the site makes them (Python-Markdown's toc) and as
    GitHub does (lower case, punctuation dropped, each space a hyphen)."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"^```.*?^```[ \t]*$", "", page.read_text(), flags=re.M | re.S)
    slugs = set()
    for title in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "").replace("*", "")
        slugs.add(slugify(plain, "-"))
        slugs.add(re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-"))
    return slugs


def test_every_relative_link_of_the_readme_and_the_docs_resolves():
    """Each relative link of README.md and docs/*.md (code aside) names a file that exists, and a
    ``#anchor`` names a heading of that page (the README's moved text must stay reachable)."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken, checked = [], 0
    for page in pages:
        for target in LINK.findall(CODE.sub("", page.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            checked += 1
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no file {path})")
            elif anchor and dest.suffix == ".md" and anchor not in heading_slugs(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no heading #{anchor} in {dest.relative_to(REPO)})")
    assert checked >= 40
    assert broken == [], "broken links:\n" + "\n".join(broken)
