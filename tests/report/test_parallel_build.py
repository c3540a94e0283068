"""The report's sections built in forked worker processes make the same page as built in
one process (the order, every table, every figure's bytes, every warning)."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from vheads.report import build_sections, load_run
from vheads.report._build import report_workers
from vheads.report._doc import Figure, Table

from tests.report.synth import make_run

pytestmark = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="this platform cannot fork")


def _flat(sections):
    out = []
    for s in sections:
        out.append(("section", s.id, s.title))
        for b in s.blocks:
            if isinstance(b, Table):
                out.append(("table", b.title, tuple(map(tuple, b.rows))))
            elif isinstance(b, Figure):
                out.append(("figure", b.name, b.png))
            elif isinstance(b, list):
                out.append(("checks", tuple((c.item, c.warning) for c in b)))
            else:
                out.append(("text", str(b)))
    return out


def test_two_workers_build_the_page_one_process_builds(tmp_path):
    run = load_run(make_run(tmp_path, settings=["cm-ord-last", "cm-ref-qsp", "ph-ord-last"], R=9, causal=True, atp=True))
    one, w1 = build_sections(run, workers=1)
    two, w2 = build_sections(run, workers=2)
    assert [s.id for s in one] == [s.id for s in two]
    assert _flat(one) == _flat(two)
    assert w1 == w2
    assert any(isinstance(b, Figure) for s in two for b in s.blocks)


def test_the_worker_count_follows_the_environment(monkeypatch):
    monkeypatch.setenv("VHEADS_REPORT_WORKERS", "1")
    assert report_workers() == 1
    monkeypatch.setenv("VHEADS_REPORT_WORKERS", "3")
    assert report_workers() == 3
    monkeypatch.setenv("VHEADS_REPORT_WORKERS", "many")
    assert report_workers() == 1


def test_workers_under_the_study_sigterm_handler_end_without_a_traceback(tmp_path, capfd):
    """`vheads study` raises KeyboardInterrupt on SIGTERM (to stop with a resume line); the
    forked section workers must not inherit it, or ending the pool prints ForkPoolWorker
    tracebacks after a successful study (issue 44)."""
    import signal

    def on_term(signum, frame):
        raise KeyboardInterrupt("SIGTERM")

    run = load_run(make_run(tmp_path, settings=["cm-ord-last", "cm-ref-qsp"], R=3, n_items=6))
    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        sections, _ = build_sections(run, workers=2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capfd.readouterr().err
    assert sections
    assert "Traceback" not in err and "ForkPoolWorker" not in err and "KeyboardInterrupt" not in err, err
