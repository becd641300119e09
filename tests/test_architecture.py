"""The rule of the arrows (docs/architecture.md), checked on the imports of every module of src.

Every import counts: at the top, inside functions, under ``if TYPE_CHECKING:``. Each failure
names the importing file and line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from paths import SRC

PACKAGE = SRC / "attntrace"

#: (importer, imported): the one import across a floor that the public API needs, with why.
ALLOWED_CROSSINGS: Mapping[tuple[str, str], str] = {
    ("attntrace.config.presets", "attntrace.engine.attention"): (
        "Preset.model_figures (public since the presets' whole-model figures) traces one layer; "
        "the import runs when it is called, never when config is imported"
    ),
}

#: The entry point of ``python -m attntrace``: the one module outside cli/ that may import it.
ENTRY_POINT = "attntrace.__main__"


@dataclass(frozen=True)
class Import:
    """One import of one attntrace module by another, where it is written."""

    source: str  # the importing module, e.g. attntrace.trace
    target: str  # the imported module (a package's __init__ for a name it defines)
    where: str  # file:line of the import statement

    def __str__(self) -> str:
        return f"{self.where}: {self.source} imports {self.target}"


@cache
def modules() -> dict[str, Path]:
    """Every module of src by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _targets(
    node: ast.Import | ast.ImportFrom, package: str, known: Mapping[str, Path]
) -> set[str]:
    """The attntrace modules one import statement imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        return {_deepest(name, known) for name in names if _deepest(name, known)}
    base = node.module or ""
    if node.level:  # from . import x, from ..y import z
        up = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*up, base] if base else up)
    out = set()
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.add(sub if sub in known else base)  # a submodule, else a name the module defines
    return {t for t in out if t in known}


def _deepest(dotted: str, known: Mapping[str, Path]) -> str:
    """``import a.b.c`` imports the deepest of a.b.c, a.b, a that is an attntrace module."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in known:
            return ".".join(parts[:n])
    return ""


@cache
def imports() -> tuple[Import, ...]:
    """Every import between attntrace modules, including those in functions and TYPE_CHECKING."""
    known = modules()
    found = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                where = f"{path.relative_to(SRC.parent)}:{node.lineno}"
                for target in sorted(_targets(node, package, known) - {name}):
                    found.append(Import(name, target, where))
    return tuple(found)


def _floor(module: str) -> str:
    """The subpackage a module lives in (``engine``), or the module itself at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _crossings(sources: Iterable[str], forbidden: Iterable[str]) -> list[str]:
    sources, forbidden = set(sources), set(forbidden)
    return [
        str(i)
        for i in imports()
        if _floor(i.source) in sources
        and _floor(i.target) in forbidden
        and (i.source, i.target) not in ALLOWED_CROSSINGS
    ]


def _none(found: list[str], rule: str) -> None:
    """Fail with every offending import (or name) on its own line."""
    assert not found, rule + ":\n" + "\n".join(found)


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[set[str]]:
    """The strongly connected components of ``graph`` (Tarjan's algorithm, without recursion).

    >>> sorted(map(sorted, strongly_connected({"a": ["b"], "b": ["a", "c"], "c": []})))
    [['a', 'b'], ['c']]
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                out.append(component)
    return out


def circles() -> list[frozenset[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for i in imports():
        graph[i.source].add(i.target)
    return [frozenset(c) for c in strongly_connected(graph) if len(c) > 1]


@pytest.mark.slow
def test_the_import_graph_sees_imports_in_functions_and_under_type_checking() -> None:
    """A guard on the guard: the parser finds an import made inside a function and one made
    only for the type checker, so the rules below read every import."""
    edges = {(i.source, i.target) for i in imports()}
    assert ("attntrace.config.presets", "attntrace.engine.attention") in edges  # in a method
    assert ("attntrace", "attntrace.engine.attention") in edges  # under TYPE_CHECKING
    assert ("attntrace.cli.typer_app", "attntrace.cli.registry") in edges  # at the top
    assert len(modules()) > 80


def test_engine_and_backends_know_nothing_of_rendering_or_the_cli() -> None:
    _none(_crossings({"engine", "backends"}, {"render", "cli"}), "engine/backends import")


def test_config_imports_neither_engine_nor_render_nor_cli() -> None:
    _none(_crossings({"config"}, {"engine", "render", "cli"}), "config (stage 1) imports")


def test_every_allowed_crossing_is_still_made() -> None:
    edges = {(i.source, i.target) for i in imports()}
    stale = [f"{a} -> {b}" for a, b in ALLOWED_CROSSINGS if (a, b) not in edges]
    _none(stale, "allowed crossings no longer made (remove them from ALLOWED_CROSSINGS)")


def test_capturing_does_not_import_diffing() -> None:
    _none(_crossings({"capturing"}, {"diffing"}), "capturing imports diffing")


def test_nothing_outside_cli_imports_cli() -> None:
    outside = [
        str(i)
        for i in imports()
        if _floor(i.target) == "cli" and _floor(i.source) != "cli" and i.source != ENTRY_POINT
    ]
    _none(outside, "cli/ imported from outside it")


def test_no_import_circle_between_modules() -> None:
    """Every strongly connected component of the module graph is one module; what two
    modules both need moves down a floor (docs/architecture.md)."""
    found = circles()
    lines = [
        str(i) for c in found for i in imports() if i.source in c and i.target in c
    ]  # the imports that close each circle, file:line
    _none(lines, "import circles (the imports that close them)")


def test_no_two_modules_share_a_file_name() -> None:
    seen: dict[str, list[str]] = {}
    for path in modules().values():
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(SRC.parent)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_no_subpackage_or_module_shares_its_name_with_a_public_name() -> None:
    """``attntrace.capture`` is a function, never also a package (importing a subpackage sets
    the attribute of its parent, which would hide the function)."""
    import attntrace

    public = set(attntrace.__all__)
    top = {name.split(".")[1] for name in modules() if name.count(".") >= 1}
    assert sorted(top & public) == []


@pytest.mark.parametrize(
    ("source", "package", "expected"),
    [
        (
            "from attntrace.files import declared as dec",
            "attntrace.files",
            {"attntrace.files.declared"},
        ),
        ("from attntrace.files import resolve_run", "attntrace.files", {"attntrace.files"}),
        ("from . import units", "attntrace", {"attntrace.units"}),
        ("from ..trace import Step", "attntrace.engine", {"attntrace.trace"}),
        ("import attntrace.engine.costs", "attntrace", {"attntrace.engine.costs"}),
        ("import numpy", "attntrace", set()),
    ],
)
def test_an_import_names_the_module_it_loads(source: str, package: str, expected: set[str]) -> None:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.Import | ast.ImportFrom)
    assert _targets(node, package, modules()) == expected
