"""map/ imports point one way: down to the raw handle, and out of the package only to the
layers below it (design.md, "Layers"). The public ``Map`` that needs the codecs lives above,
in :mod:`bpfbatch.api`; an import circle inside map/ (or an import of records/, which sits
above map/) is what these tests refuse — at module level, inside a function or under
``TYPE_CHECKING`` alike, since a lazy import is still an import."""

from __future__ import annotations

import ast
from pathlib import Path

import bpfbatch.map

MAP_DIR = Path(bpfbatch.map.__file__).parent
PACKAGE = "bpfbatch.map"
#: What map/ may import from the rest of the package: the layers below it.
ALLOWED_BELOW = ("bpfbatch.map", "bpfbatch._sys", "bpfbatch.errors", "bpfbatch.interrupts",
                 "bpfbatch.delivery", "bpfbatch._numpy")


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def imports_of(source: str, package: str = PACKAGE) -> set[str]:
    """Every ``bpfbatch`` module ``source`` imports, anywhere in it; ``from PKG import name``
    counts as ``PKG.name`` when ``name`` is a module of map/ or of the package."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(node, package)
            if module in ("bpfbatch", PACKAGE):
                found.update(f"{module}.{alias.name}" for alias in node.names)
            else:
                found.add(module)
    return {name for name in found if name == "bpfbatch" or name.startswith("bpfbatch.")}


def graph(sources: dict[str, str]) -> dict[str, set[str]]:
    return {name: imports_of(source) for name, source in sources.items()}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle among the modules of ``edges``, or ``None``."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def walk(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for target in sorted(edges[name] & edges.keys()):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (found := walk(target)):
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(edges):
        if name not in state and (found := walk(name)):
            return found
    return None


def map_modules() -> dict[str, str]:
    return {f"{PACKAGE}.{path.stem}": path.read_text() for path in MAP_DIR.glob("*.py")
            if path.stem != "__init__"}


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
        above = sorted(m for m in imported
                       if not any(m == ok or m.startswith(ok + ".") for ok in ALLOWED_BELOW))
        assert not above, f"{name} imports {above}: map/ may import only {ALLOWED_BELOW}"
