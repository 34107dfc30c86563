"""No import circles in the package: every ``import`` of a module of mtp_llm (at the top, inside a
function or under ``TYPE_CHECKING``) is an edge, and the graph has no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mtp_llm"


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (relative imports resolved)."""
    modules = {_module_name(p, package): p for p in package.rglob("*.py")}
    native = {_module_name(p, package) for p in package.rglob("*.pyi")}  # the extension (_core): imports nothing here
    graph: dict[str, set[str]] = {name: set() for name in [*modules, *native]}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                    module = ".".join([*base, node.module] if node.module else base)
                else:
                    module = node.module or ""
                # ``from . import x``: the submodule x when there is one, else the module itself.
                submodules = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in graph]
                targets = submodules if len(submodules) == len(node.names) else [module, *submodules]
            graph[name] |= {t for t in targets if t in graph and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_imports() -> None:
    graph = import_graph()
    assert "mtp_llm.session" in graph["mtp_llm.langchain"]
    assert "mtp_llm.bench.common" in graph["mtp_llm.bench.parallel"]  # relative, inside a function
    assert "mtp_llm.smollm2" in graph["mtp_llm.default_model"]  # relative, inside a function
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


def by_subpackage(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph with each subpackage's modules (``mtp_llm.gguf.*``, ``mtp_llm.bench.*``) as one node:
    ``gguf.synthetic -> default_model -> gguf.tiny_models`` is a circle between two parts of the package."""

    def part(name: str) -> str:
        return ".".join(name.split(".")[:2])

    collapsed: dict[str, set[str]] = {}
    for name, targets in graph.items():
        collapsed.setdefault(part(name), set()).update(part(t) for t in targets if part(t) != part(name))
    return collapsed


def test_no_import_circles() -> None:
    assert cycles(import_graph()) == []


def test_no_import_circles_between_subpackages_and_modules() -> None:
    assert cycles(by_subpackage(import_graph())) == []
