"""The engine reads bottom-up: no import cycle of more than two modules in `torch_xla.lazy`,
counting imports inside functions, and the order documented in `lazy/__init__.py` holds."""

from __future__ import annotations

import ast
import pathlib
import re

import torch_xla

SRC = pathlib.Path(torch_xla.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in SRC.rglob("*.py")}


def _imports(path: pathlib.Path, modules: dict) -> set[str]:
    """Every torch_xla module `path` imports, at module level or inside a function.

    `from package import name` counts as importing the submodule `package.name` when there
    is one, else the package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return {m for m in found if m in modules}


def _graph(prefix: str) -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {m for m in _imports(path, modules) if m.startswith(prefix) and m != name}
        for name, path in modules.items()
        if name.startswith(prefix) and not path.name == "__init__.py"
    }


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            out.append(component)

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_components_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    cycles = [c for c in _components(graph) if len(c) > 1]
    assert cycles == [{"a", "b", "c"}]


def test_the_engine_has_no_import_cycle_of_more_than_two_modules():
    graph = _graph("torch_xla.lazy.")
    assert len(graph) >= 10, sorted(graph)
    big = [sorted(c) for c in _components(graph) if len(c) > 2]
    assert not big, f"import cycles in torch_xla.lazy: {big}"


def test_the_engine_modules_import_only_those_listed_before_them():
    doc = (SRC / "lazy" / "__init__.py").read_text()
    order = re.findall(r"^  (\w+) ", doc, re.MULTILINE)
    graph = _graph("torch_xla.lazy.")
    assert sorted(f"torch_xla.lazy.{m}" for m in order) == sorted(graph), "update the list"
    rank = {f"torch_xla.lazy.{m}": i for i, m in enumerate(order)}
    upward = [(m, d) for m, deps in graph.items() for d in deps if rank[d] >= rank[m]]
    assert not upward, f"modules importing one listed after them: {upward}"
