"""The report's sections are registered parts: every module of ``vheads.report.sections``
registers one section, the builder shows them in their order, and what each section
shows is what it declares (its tables' titles, its figures' names, the store tables it
reads)."""

from __future__ import annotations

import pkgutil

import pytest

import vheads.report.sections as sections_pkg
from vheads.report import build_sections, load_run
from vheads.report._doc import Figure, Table
from vheads.report._registry import SECTIONS, registered_sections, section
from vheads.store import TABLES

from tests.report.synth import make_run


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = make_run(tmp_path_factory.mktemp("reg"), settings=["cm-ord-last", "cm-ref-qsp", "ph-ord-last"], R=9,
                 causal=True, atp=True)
    return build_sections(load_run(d))


def test_every_section_module_registers_one_section():
    modules = {m.name for m in pkgutil.iter_modules(sections_pkg.__path__)}
    specs = registered_sections()
    assert len(specs) == len(modules) == len({s.id for s in specs})
    assert {s.build.__module__.rsplit(".", 1)[-1] for s in specs} == modules


def test_sections_come_in_registered_order(built):
    sections, _ = built
    order = {s.id: s.order for s in registered_sections()}
    shown = [order[s.id] for s in sections]
    assert shown == sorted(shown) and len(sections) >= 8


def test_each_section_shows_only_what_it_declares(built):
    sections, _ = built
    specs = {s.id: s for s in registered_sections()}
    for s in sections:
        spec = specs[s.id]
        for b in s.blocks:
            if isinstance(b, Table):
                assert spec.shows_table(b.title), f"section {s.id} shows table {b.title!r}, not in its tables={spec.tables}"
            elif isinstance(b, Figure):
                assert spec.shows_figure(b.name), f"section {s.id} shows figure {b.name!r}, not in its figures={spec.figures}"


def test_needs_name_results_store_tables():
    from vheads.study._stage import registered_stages

    registered_stages()  # a stage's own tables (vheads.store.register_table) are registered when it is imported
    for spec in registered_sections():
        assert set(spec.needs) <= set(TABLES), f"{spec.id}: needs {set(spec.needs) - set(TABLES)}"


def test_a_new_section_is_one_decorated_function(built, tmp_path):
    """Registering a section puts it into the next report at its order, with no other edit."""

    @section("zz-test", "A section of this test", "Read it.", order=15, tables=("*",))
    def extra(run):
        return ["one paragraph", None]

    try:
        run = load_run(make_run(tmp_path, settings=["cm-ord-last"], R=3))
        sections, _ = build_sections(run)
        ids = [s.id for s in sections]
        assert ids.index("zz-test") == ids.index("protocol") + 1
        assert sections[ids.index("zz-test")].blocks == ["one paragraph"]
    finally:
        del SECTIONS["zz-test"]


def test_registering_an_id_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        section("protocol", "again", "", order=1)(lambda run: [])
