"""Every code block of the README and of ``docs/*.md`` runs as written.

A page is read as a reader follows it: its blocks run in order in one scratch folder
(where ``.venv`` is this test's environment), its ``python`` blocks in one interpreter
session (a later block may use an earlier block's names), its ``bash`` blocks in bash with
``-euo pipefail``; a block that fails fails the page, naming the block. Other kinds:

- ``toml`` blocks are study-config fragments: parsed, then validated by
  :func:`vheads.study.config_from_dict`;
- a block that only includes a file (``--8<-- "path"``) is checked to exist and parse
  (its Python is run by ``tests/test_interop.py``), and the scratch folder gets a copy of
  it, as a reader who saves the shown code would have;
- ``text`` blocks are diagrams and synopses, not code;
- a block whose first line is ``# not run: <why>`` is skipped (a whole study, an install; a TOML block for another model than the tiny one):
  the reason is written in the block, where the reader sees it.

``docs/index.md``'s table of model families is checked against the adapter registry.
The README's walk and the pages whose blocks run the model several times (``docs/cli.md``'s
walk: several CLI runs on the built-in model, about a minute on a busy 2-core machine;
``vheads doctor`` in ``docs/models.md``; the causal maps of ``docs/causal.md``) run with the
slow tests; the other pages run always.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
INCLUDE = re.compile(r'^--8<-- "([^"]+)"\s*$')
NOT_RUN = "# not run:"
KINDS = {"python", "bash", "toml", "json", "text"}
#: pages whose blocks run the model several times (the walk: several command-line runs, each
#: loading the model, about a minute on a busy 2-core machine; the doctor and the causal maps,
#: 10-20 s each), slow as the README's blocks are (issue 42 moves them to these pages)
SLOW_PAGES = {"README.md", "docs/cli.md", "docs/models.md", "docs/causal.md"}


def blocks(page: str) -> list[tuple[str, str]]:
    """``(kind, source)`` of every fenced block of ``page``, in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer((REPO / page).read_text())]


def include_of(src: str) -> Path | None:
    m = INCLUDE.match(src.strip())
    return None if m is None else REPO / m.group(1)


def runnable(page: str) -> list[tuple[str, str]]:
    return [(kind, src) for kind, src in blocks(page)
            if kind in ("python", "bash") and not src.startswith(NOT_RUN) and include_of(src) is None]


#: runs one page's blocks in order: python blocks in this interpreter's namespace, bash blocks in bash
DRIVER = """
import json, subprocess, sys, traceback
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for i, (kind, src) in enumerate(blocks):
    print(f"--- block {i + 1} ({kind})", flush=True)
    if kind == "python":
        try:
            exec(compile(src, f"<block {i + 1}>", "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            sys.exit(f"block {i + 1} ({kind}) failed")
    elif subprocess.run(["bash", "-euo", "pipefail", "-c", src]).returncode != 0:
        sys.exit(f"block {i + 1} ({kind}) failed")
"""


def test_every_block_is_of_a_known_kind_and_every_skip_says_why():
    for page in PAGES:
        for kind, src in blocks(page):
            assert kind in KINDS, f"{page}: a code block of kind {kind or '(none)'!r}; use one of {sorted(KINDS)}"
            first = src.splitlines()[0] if src.strip() else ""
            if first.startswith(NOT_RUN):
                assert kind in ("python", "bash", "toml") and len(first) > len(NOT_RUN) + 3, f"{page}: {first!r} gives no reason"


def test_included_files_exist_and_parse():
    seen = 0
    for page in PAGES:
        for kind, src in blocks(page):
            path = include_of(src)
            if path is None:
                continue
            seen += 1
            assert path.is_file(), f"{page} includes {path}, which does not exist"
            if kind == "python":
                compile(path.read_text(), str(path), "exec")
            elif kind == "json":
                json.loads(path.read_text())
    assert seen >= 3  # the two interop examples and the schema


def test_toml_blocks_are_valid_study_config_fragments():
    from vheads.study import config_from_dict

    seen = 0
    for page in PAGES:
        for kind, src in blocks(page):
            if kind == "toml" and not src.startswith(NOT_RUN):  # a set for another model than the tiny one
                seen += 1
                config_from_dict(tomllib.loads(src))  # raises naming the key
    assert seen >= 2


def test_the_checks_refuse_a_bad_block():
    from vheads.study import config_from_dict

    with pytest.raises(ValueError, match="templates.ordinal"):
        config_from_dict(tomllib.loads('[templates]\nordinal = "what is in panel ?"'))
    page = "```python\nx = 1\n```\n\n```bash\n# not run: a whole study\nvheads study\n```\n"
    assert [(m.group(1), m.group(2)) for m in FENCE.finditer(page)] == [("python", "x = 1\n"),
                                                                      ("bash", "# not run: a whole study\nvheads study\n")]


def families_table() -> str:
    """The table of model families ``docs/index.md`` shows, from the registry."""
    from vheads.models import describe_adapters

    rows = describe_adapters()
    n_types = sum(len(r["model_types"]) for r in rows)
    lines = [f"vheads serves {n_types} model types (`config.model_type`) in {len(rows)} families; "
             "`vheads models` prints what each adapter knows.", "", "| family | model types |", "|---|---|"]
    lines += [f"| {r['family']} | {', '.join(f'`{t}`' for t in r['model_types'])} |" for r in rows]
    return "\n".join(lines)


def test_index_lists_the_registered_model_families():
    text = (REPO / "docs" / "index.md").read_text()
    m = re.search(r"<!-- families: begin[^\n]*-->\n(.*?)<!-- families: end -->", text, re.S)
    assert m, "docs/index.md lost its families markers"
    want = families_table()
    assert m.group(1).strip() == want, f"docs/index.md's families table is out of date; put this between the markers:\n{want}"


def run_page(page: str, tmp_path: Path) -> None:
    todo = runnable(page)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    for kind, src in blocks(page):  # the shown files, saved as a reader would
        path = include_of(src)
        if path is not None and kind == "python":
            (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / ".blocks.json").write_text(json.dumps(todo))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p)}
    r = subprocess.run([sys.executable, "-c", DRIVER, ".blocks.json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, f"{page}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}\n" \
                              f"{r.stdout[-3000:]}\n{r.stderr[-5000:]}"


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW_PAGES else p
                                  for p in PAGES if runnable(p)])
def test_page_runs_as_written(page, tmp_path):
    run_page(page, tmp_path)
