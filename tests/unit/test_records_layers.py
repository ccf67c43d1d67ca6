"""records/ and formats/ import one way (design.md, "Layers"): records/ holds the layout tree
built from BTF and every job over it (values, encode, fill, codecs, JSON text, decoders, the
map's view, per-CPU sums, given types); formats/ holds the output and input formats, the one
output pipeline and its writer, built on records/. formats/ imports records/, never the
reverse, and neither imports the layers above them (the CLI, the API, exec, export, the
tools) — at module level or inside a function alike, since a lazy import is still an
import. A module lives in one of the two, never in both (no re-export left at an old
path)."""

from __future__ import annotations

from tests.unit.importgraph import ROOT, cycle, graph, modules, outside

RECORDS = "bpfbatch.records"
FORMATS = "bpfbatch.formats"
#: The layers below records/ (design.md): what records/ may import besides itself.
BELOW_RECORDS = ("bpfbatch.btf", "bpfbatch.map", "bpfbatch._sys", "bpfbatch.errors",
                 "bpfbatch.interrupts", "bpfbatch.delivery", "bpfbatch._numpy")


def test_the_walk_sees_a_package_import_and_a_lazy_one():
    edges = graph(modules(FORMATS))
    assert f"{RECORDS}.layout" in edges[f"{FORMATS}.typedjson"]  # from ..records import layout
    assert f"{RECORDS}.cpusum" in edges[f"{FORMATS}.pipeline"]  # imported in a function
    assert f"{FORMATS}.columnar" in edges[f"{FORMATS}.render"]  # likewise


def test_a_lazy_import_of_formats_from_records_is_refused():
    edges = graph({f"{RECORDS}.x": "def f():\n    from ..formats import render\n"})
    assert outside(edges[f"{RECORDS}.x"], (RECORDS, *BELOW_RECORDS)) == [f"{FORMATS}.render"]


def test_records_imports_only_itself_and_the_layers_below():
    allowed = (RECORDS, *BELOW_RECORDS)
    for name, imported in graph(modules(RECORDS)).items():
        above = outside(imported, allowed)
        assert not above, f"{name} imports {above}: records/ may import only {allowed}"


def test_formats_imports_only_records_and_the_layers_below():
    allowed = (FORMATS, RECORDS, *BELOW_RECORDS)
    for name, imported in graph(modules(FORMATS)).items():
        above = outside(imported, allowed)
        assert not above, f"{name} imports {above}: formats/ may import only {allowed}"


def test_no_import_circle_in_records():
    assert cycle(graph(modules(RECORDS))) is None


def test_no_module_stands_in_both():
    stems = {p.stem for p in (ROOT / "records").glob("*.py")} & \
        {p.stem for p in (ROOT / "formats").glob("*.py")}
    assert stems == {"__init__"}
