"""The code's shape (issues 10, 12): no import cycle in ``testbed/`` and ``nodes/``; no module
in ``testbed/``, ``nodes/lnet``, ``nodes/lnd`` or ``nodes/selftest`` over 400 lines.

The import graph is read with ``ast`` from the sources, without the imports under
``if TYPE_CHECKING:`` (they never run). ``from pkg import name`` is an edge to ``pkg.name`` when
that is a module of ours, else to ``pkg``. Two graphs: the imports that run when a module is
imported (module level), over ``testbed/`` and ``nodes/``; and every import, lazy ones inside
functions too (a lazy import hides a cycle, it does not remove it), over ``testbed/`` and over
the engine (``nodes/lnet``, which has no function-level import at all: issue 12 item 1).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "nodes")
MAX_LINES = 400
#: Where no module may exceed MAX_LINES (STYLE: small modules with one job).
SIZED = ("testbed", "nodes/lnet", "nodes/lnd", "nodes/selftest")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, mods: dict[str, Path], lazy: bool = True) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if not lazy and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in mods else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in mods}


def _graph(lazy: bool, prefix: str = "") -> dict[str, set[str]]:
    mods = _modules()
    return {name: {m for m in _imports(ast.parse(path.read_text()), mods, lazy)
                   if m.startswith(prefix)} - {name}
            for name, path in mods.items() if name.startswith(prefix)}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_no_import_cycle_in_testbed_and_nodes() -> None:
    graph = _graph(lazy=False)
    assert "testbed.sim.inproc" in graph and "nodes.lnet.engine" in graph  # it saw the code
    assert "testbed.base" in graph["testbed.mininet.client"]  # and the edges
    assert _cycles(graph) == []


def test_no_import_cycle_in_testbed_even_through_lazy_imports() -> None:
    graph = _graph(lazy=True, prefix="testbed")
    assert "testbed.runstate" in graph["testbed"]  # attach()'s lazy import is an edge here
    # (backends' classes are imported by the registry: test_layout_backend.py adds those)
    assert _cycles(graph) == []


def test_no_import_cycle_in_the_engine_even_through_lazy_imports() -> None:
    graph = _graph(lazy=True, prefix="nodes.lnet")
    assert "nodes.lnet.health" in graph["nodes.lnet.engine"]  # it saw the engine's edges
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle() -> None:
    """The check itself can fail: a made-up cycle a -> b -> c -> a is reported."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    import testbed.sim.inproc\nimport testbed.base\n")
    assert _imports(tree, _modules()) == {"testbed.base"}
    tree = ast.parse("def f():\n    import testbed.base\n")
    assert _imports(tree, _modules()) == {"testbed.base"}
    assert _imports(tree, _modules(), lazy=False) == set()


def test_no_module_over_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for d in SIZED for p in (ROOT / d).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_backends_satisfy_the_protocols() -> None:
    """Every backend's classes offer what ``testbed.base`` promises (structural typing)."""
    import testbed
    from testbed.base import NodeHandle, Testbed
    from testbed.mininet import MininetNode, MininetTestbed
    from testbed.sim import SimNodeHandle, SimTestbed

    for cls, proto in ((MininetTestbed, Testbed), (SimTestbed, Testbed),
                       (MininetNode, NodeHandle), (SimNodeHandle, NodeHandle)):
        missing = [m for m in dir(proto) if not m.startswith("_") and not hasattr(cls, m)
                   and m not in getattr(proto, "__annotations__", {})]
        assert missing == [], (cls.__name__, missing)
    tb = testbed.up(backend="sim", seed=1)
    assert isinstance(tb.node("c1"), NodeHandle)
    tb.down()
