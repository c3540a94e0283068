"""Report sections from other packages: an entry point of the ``vheads.sections`` group names a
module that registers its section with the public ``vheads.report.section``; the report shows it,
and one that fails to import is left out with a warning naming it."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint

import pytest

import vheads.report._registry as R
from tests.report.synth import make_run
from vheads.report import build_sections, load_run


def _plugins(monkeypatch, tmp_path, *eps):
    (tmp_path / "vh_plugin_ok.py").write_text(
        "from vheads.report import section\n"
        "@section('plugin-demo', 'A plugin section', 'How to read it.', order=1e6)\n"
        "def demo(run):\n"
        "    return [f'{len(run.settings)} settings in this run']\n")
    (tmp_path / "vh_plugin_bad.py").write_text("raise RuntimeError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib.metadata as md

    monkeypatch.setattr(md, "entry_points", lambda group=None: [e for e in eps if e.group == group])
    monkeypatch.delitem(R.SECTIONS, "plugin-demo", raising=False)
    monkeypatch.setattr(R.SECTION_REGISTRY, "_plugins_loaded", False)  # the registry reads the entry points once


def test_a_plugin_section_is_shown_and_a_broken_one_is_named(monkeypatch, tmp_path):
    run_dir = make_run(tmp_path / "run")
    _plugins(monkeypatch, tmp_path,
             EntryPoint("demo", "vh_plugin_ok", "vheads.sections"), EntryPoint("bad", "vh_plugin_bad", "vheads.sections"),
             EntryPoint("other", "vh_plugin_bad", "some.other.group"))
    try:
        with pytest.warns(UserWarning, match=r"plugin 'bad' \(vh_plugin_bad\) failed to import.*broken on purpose"):
            sections, _ = build_sections(load_run(run_dir), workers=1)
        demo = [s for s in sections if s.id == "plugin-demo"]
        assert demo and demo[0].blocks == [f"{len(load_run(run_dir).settings)} settings in this run"]
        assert sections[-1].id == "plugin-demo"  # order 1e6: after every built-in section
    finally:
        R.SECTIONS.pop("plugin-demo", None)
        sys.modules.pop("vh_plugin_ok", None)
        sys.modules.pop("vh_plugin_bad", None)
