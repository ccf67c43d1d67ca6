"""map/ imports point one way: down to the raw handle, and out of the package only to the
layers below it (design.md, "Layers"). The public ``Map`` that needs the codecs lives above,
in :mod:`bpfbatch.api`; an import circle inside map/ (or an import of records/, which sits
above map/) is what these tests refuse — at module level, inside a function or under
``TYPE_CHECKING`` alike, since a lazy import is still an import."""

from __future__ import annotations

from tests.unit.importgraph import cycle, graph, modules, outside

PACKAGE = "bpfbatch.map"
#: What map/ may import from the rest of the package: the layers below it.
ALLOWED_BELOW = ("bpfbatch.map", "bpfbatch._sys", "bpfbatch.errors", "bpfbatch.interrupts",
                 "bpfbatch.delivery", "bpfbatch._numpy")


def map_modules() -> dict[str, str]:
    return modules(PACKAGE)


def test_the_import_walk_sees_imports_inside_functions():
    edges = graph(map_modules())
    assert f"{PACKAGE}.cursor" in edges[f"{PACKAGE}.inventory"]  # imported in a function
    assert f"{PACKAGE}.handle" in edges[f"{PACKAGE}.probes"]  # likewise


def test_a_circle_through_a_function_level_import_is_found():
    edges = graph({f"{PACKAGE}.a": "from .b import x\n",
                   f"{PACKAGE}.b": "def f():\n    from . import a\n"})
    assert cycle(edges) == [f"{PACKAGE}.a", f"{PACKAGE}.b", f"{PACKAGE}.a"]


def test_no_import_circle_in_map():
    assert cycle(graph(map_modules())) is None


def test_the_handle_imports_nothing_else_of_map():
    assert {m for m in graph(map_modules())[f"{PACKAGE}.handle"]
            if m.startswith(PACKAGE + ".")} == set()


def test_map_imports_only_the_layers_below_it():
    for name, imported in graph(map_modules()).items():
        above = outside(imported, ALLOWED_BELOW)
        assert not above, f"{name} imports {above}: map/ may import only {ALLOWED_BELOW}"
