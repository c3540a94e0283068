"""The warnings at the top of the report are one line each (what, how many, which key to
change), and a check's long list of cases becomes a table of its own, folded in the HTML."""

from __future__ import annotations

import re

from tests.report.synth import SETTINGS, make_run
from vheads.report import build_report, build_sections, load_run
from vheads.report._doc import Table

LIMIT = 200  # characters of one warning line, "item: warning" (issue 36)


def _many_warnings(tmp_path):
    """Twelve settings, R = 9 of a configured 20, a bad audit, a fallback in every setting,
    control pools smaller than R, a β sweep with few draws: every long warning at once."""
    fallbacks = {s: [f"layer {i % 4}: S has 3 heads there but only {i % 2} other heads"] for i, s in enumerate(SETTINGS)}
    pools = {s: {"layer-matched": {"mode": "exact", "pool": 5, "n": 5, "R": 20}} for s in SETTINGS}
    return make_run(tmp_path, settings=SETTINGS, R=9, config_R=20, n_items=4, audit="bad",
                    meta_extra={"fallbacks": fallbacks, "control_pools": pools})


def test_every_warning_is_one_line_of_at_most_200_characters(tmp_path):
    d = _many_warnings(tmp_path)
    _, warnings = build_sections(load_run(d))
    assert len(warnings) >= 5  # the store meant to trip many checks does
    for w in warnings:
        assert "\n" not in w and len(w) <= LIMIT, (len(w), w)
    md = (build_report(d).parent / "report.md").read_text()
    top = md[:md.index("## Contents")]
    lines = [ln[len("> - ⚠ "):] for ln in top.splitlines() if ln.startswith("> - ⚠ ")]
    assert lines == warnings


def test_long_case_lists_are_a_folded_table_in_the_protocol_section(tmp_path):
    d = _many_warnings(tmp_path)
    sections, _ = build_sections(load_run(d))
    (protocol,) = [s for s in sections if s.id == "protocol"]
    checks = {c.item: c for c in protocol.blocks[0]}
    fb = checks["Layer-matched fallbacks"]
    # one fallback per setting: twelve cases, each a row of the table, none of them in the line
    assert isinstance(fb.cases, Table) and fb.cases.folded and fb.cases in protocol.blocks
    assert sorted(r[0] for r in fb.cases.rows) == sorted(SETTINGS)
    assert not any(s in fb.value for s in SETTINGS)
    assert "12 fallback(s)" in fb.warning
    html = build_report(d).read_text()
    folded = re.findall(r'<details class="cases"><summary>(.*?)</summary>', html)
    assert any("Layer-matched fallbacks" in f for f in folded)
    # the section's folded tables come after the checklist and inside the section
    sec = html[html.index('<section id="protocol"'):]
    sec = sec[:sec.index("</section>")]
    assert sec.index('<table class="check">') < sec.index('<details class="cases">')


def test_a_short_list_stays_in_its_line(tmp_path):
    d = make_run(tmp_path, settings=SETTINGS[:3], R=100, n_items=3, tests=("cers",), audit=None, sweeps=False,
                 meta_extra={"fallbacks": {"cm-ord-last": ["layer 3: S has 8 heads there but only 0 other heads"]}})
    fb = {c.item: c for c in build_sections(load_run(d))[0][1].blocks[0]}["Layer-matched fallbacks"]
    assert fb.cases is None and "cm-ord-last, layer-matched: layer 3: S has 8 heads there but only 0 other heads" in fb.value
