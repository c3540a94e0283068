"""The report stage takes a screenshot only when asked (``vheads report --screenshot``): the
study's report stage never pays for a browser."""

from __future__ import annotations

import vheads.report as report_pkg
from vheads.study import build_report_if_available

from tests.report.synth import make_run


def test_the_screenshot_is_taken_only_when_asked(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(report_pkg, "screenshot", lambda html, png, **kw: calls.append((html, png)) or True)
    run = make_run(tmp_path / "run", settings=["cm-ord-last"], R=5)
    html = build_report_if_available(run)
    assert html.is_file() and calls == []
    html2 = build_report_if_available(run, screenshot_png=True)
    assert calls == [(html2, html2.parent / "report.png")]
