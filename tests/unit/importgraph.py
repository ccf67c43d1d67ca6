"""The package's import graph, read from source with :mod:`ast`: what the layer tests
(``test_*_layers.py``) judge. Every import counts — at module level, inside a function or
under ``TYPE_CHECKING`` alike, since a lazy import is still an import."""

from __future__ import annotations

import ast
from pathlib import Path

import bpfbatch

ROOT = Path(bpfbatch.__file__).parent


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(source: str, package: str) -> set[str]:
    """Every ``bpfbatch`` module ``source`` (a module of ``package``) imports, anywhere in
    it; ``from PKG import name`` counts as ``PKG.name`` when that is a module (or ``PKG``
    is ``bpfbatch`` or the importer's own package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(node, package)
            for alias in node.names:
                name = f"{module}.{alias.name}"
                found.add(name if module in ("bpfbatch", package) or _is_module(name)
                          else module)
    return {name for name in found if name == "bpfbatch" or name.startswith("bpfbatch.")}


def graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """``{module: the modules it imports}`` for ``{module: source}``."""
    return {name: imports_of(source, name.rsplit(".", 1)[0]) for name, source in sources.items()}


def modules(package: str) -> dict[str, str]:
    """``{module: source}`` of every module of ``package`` (a folder of bpfbatch)."""
    folder = ROOT.joinpath(*package.split(".")[1:])
    return {f"{package}.{path.stem}": path.read_text() for path in folder.glob("*.py")
            if path.stem != "__init__"}


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


def outside(imported: set[str], allowed: tuple[str, ...]) -> list[str]:
    """The modules of ``imported`` that are none of ``allowed`` nor inside one of them."""
    return sorted(m for m in imported
                  if not any(m == ok or m.startswith(ok + ".") for ok in allowed))
