"""Layout proofs of the front end (issue 29 item 1): one front end over one complete
``Runtime`` protocol (``nodes/dlc/runtime.py``).

* no ``getattr``/``hasattr``/``isinstance`` on a runtime object in the node driver, the verbs
  or the rest of ``nodes/dlc``: what a backend lacks it says through a protocol member;
* no import between ``nodes/dlc`` and ``nodes/daemon`` in either direction, lazy and
  TYPE_CHECKING imports counted, but for the daemon's entry point (``__main__``), which
  hands the front end to the control server and the FUSE server;
* every implementation of ``Runtime`` (the daemon's, the simulator's, the unit tests'
  double) and of ``NodeHost`` / ``SockTables`` has every member of its protocol, with the
  same parameters (names, kinds, defaults) and the same kind (property or data, method,
  coroutine).

All read the sources (``ast``), so they hold for compiled modules too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = ROOT / "nodes/dlc/runtime.py"
#: (protocol, implementation file, class)
IMPLEMENTATIONS = [
    ("Runtime", "nodes/daemon/runtime.py", "NodeRuntime"),
    ("Runtime", "testbed/sim/runtime.py", "SimRuntime"),
    ("Runtime", "tests/unit/rtdouble.py", "RuntimeDouble"),
    ("NodeHost", "nodes/daemon/host.py", "DaemonHost"),
    ("NodeHost", "testbed/sim/runtime.py", "SimHost"),
    ("NodeHost", "tests/unit/rtdouble.py", "HostDouble"),
    ("SockTables", "nodes/lnd/socklnd.py", "SockLND"),
    ("SockTables", "testbed/sim/socktables.py", "SimSockTables"),
    ("SockTables", "tests/unit/rtdouble.py", "_NoTables"),
]
#: names a runtime object goes by in the front end and the driver
RUNTIME_NAMES = {"rt", "runtime", "node_rt"}
#: the one module of nodes/daemon that may import nodes/dlc: the daemon's entry point
ENTRY_POINT = ROOT / "nodes/daemon/__main__.py"


def _front_files() -> list[Path]:
    files = sorted((ROOT / "nodes/dlc").rglob("*.py"))
    files += sorted((ROOT / "nodes").glob("driver*.py"))
    assert ROOT / "nodes/dlc/verbs/lnetctl_cmd.py" in files and len(files) > 30
    return files


def _names_runtime(node: ast.expr) -> bool:
    """``rt``, ``runtime``, ``self.rt``, ``rt.driver``, ``getattr(rt, ...)``...: an
    expression on a runtime object. Through ``.engine`` it is the engine's public surface
    (``rt.engine.tunables``), not the runtime."""
    chain = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    if "engine" in chain:
        return False
    if isinstance(node, ast.Name):
        return node.id in RUNTIME_NAMES or bool(RUNTIME_NAMES & set(chain))
    if isinstance(node, ast.Call):  # getattr(getattr(rt, "driver", None), ...)
        return any(_names_runtime(a) for a in node.args[:1])
    return False


def runtime_probes(path: Path) -> list[str]:
    """Every ``getattr``/``hasattr``/``isinstance`` whose object is a runtime, in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "isinstance") and node.args \
                and _names_runtime(node.args[0]):
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_probe_of_a_runtime_in_the_driver_or_the_front_end() -> None:
    probes = [p for path in _front_files() for p in runtime_probes(path)]
    assert probes == []


def test_the_probe_finder_sees_a_probe() -> None:
    """The finder itself: a getattr on ``rt``, ``self.rt.driver`` or a getattr of one is
    one; one on an engine (``eng``, ``rt.engine.tunables``) is not."""
    src = ("def f(rt, eng):\n    getattr(rt, 'lnd', None)\n    hasattr(eng, 'x')\n"
           "    isinstance(self.rt.driver, int)\n    getattr(rt.engine.tunables, 'x')\n"
           "    getattr(getattr(rt, 'driver', None), 'lnd_params', None)\n")
    tree = ast.parse(src)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id != "f" and n.args
             and _names_runtime(n.args[0])]
    assert sorted(c.lineno for c in calls) == [2, 4, 6, 6]


def imports_of(path: Path) -> list[str]:
    """Every module ``path`` imports, at any depth (functions, TYPE_CHECKING blocks)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return out


def _crossing(package: str, other: str) -> list[str]:
    found = []
    for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py")):
        if path == ENTRY_POINT:
            continue
        found += [f"{path.relative_to(ROOT)}: {m}" for m in imports_of(path)
                  if m == other or m.startswith(other + ".")]
    return found


@pytest.mark.parametrize("package,other", [("nodes.dlc", "nodes.daemon"),
                                           ("nodes.daemon", "nodes.dlc")])
def test_no_import_between_the_front_end_and_the_daemon(package: str, other: str) -> None:
    assert _crossing(package, other) == []


def test_the_daemons_entry_point_is_where_the_two_meet() -> None:
    """``__main__`` is the exception above, and it is one: it wires the front end in."""
    assert any(m.startswith("nodes.dlc") for m in imports_of(ENTRY_POINT))


# ------------------------------------------------------------------ protocol conformance
def _class(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_text(), str(path))
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"{path}: no class {name}"
    return found[0]


def _shape(args: ast.arguments) -> tuple[object, ...]:
    """Parameters after ``self``: names and kinds, and which have defaults."""
    positional = [a.arg for a in args.posonlyargs + args.args][1:]
    return (tuple(positional), len(args.defaults), args.vararg is not None,
            tuple(a.arg for a in args.kwonlyargs),
            tuple(d is not None for d in args.kw_defaults), args.kwarg is not None)


def members(cls: ast.ClassDef) -> dict[str, tuple[str, object]]:
    """name -> (kind, shape): ``data`` (a property, a class attribute, or ``self.X`` set in
    ``__init__``), ``method``/``coroutine`` with their parameters' shape, ``callable`` (an
    attribute annotated ``Callable[[...], R]``) with its parameter count."""
    out: dict[str, tuple[str, object]] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = ("data", None)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = ("data", None)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            decorators = {ast.unparse(d) for d in node.decorator_list}
            if "property" in decorators:
                out[node.name] = ("data", None)
            elif isinstance(node, ast.AsyncFunctionDef) or (
                    node.returns is not None
                    and ast.unparse(node.returns).startswith("Coroutine")):
                out[node.name] = ("coroutine", _shape(node.args))
            else:
                out[node.name] = ("method", _shape(node.args))
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
                None)
    for node in ast.walk(init) if init is not None else ():
        target, annotation = None, None
        if isinstance(node, ast.AnnAssign):
            target, annotation = node.target, node.annotation
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                and target.value.id == "self" and target.attr not in out:
            if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == \
                    "Callable" and isinstance(annotation.slice, ast.Tuple) \
                    and isinstance(params := annotation.slice.elts[0], ast.List):
                out[target.attr] = ("callable", len(params.elts))
            else:
                out[target.attr] = ("data", None)
    return out


def conformance(protocol: str, path: str, name: str) -> list[str]:
    """What ``name`` (in ``path``) lacks or has otherwise than ``protocol`` says."""
    want = members(_class(PROTOCOLS, protocol))
    have = members(_class(ROOT / path, name))
    wrong = []
    for member, (kind, shape) in want.items():
        got = have.get(member)
        if got is None:
            wrong.append(f"{name}.{member}: missing")
        elif kind == "method" and got[0] == "callable":
            assert isinstance(shape, tuple)
            if shape[2] or shape[3] or shape[5] or got[1] != len(shape[0]):
                wrong.append(f"{name}.{member}: a callable of {got[1]} arguments, not {shape}")
        elif got != (kind, shape):
            wrong.append(f"{name}.{member}: {got}, the protocol says {(kind, shape)}")
    return wrong


def test_the_protocols_list_what_the_front_end_uses() -> None:
    runtime = members(_class(PROTOCOLS, "Runtime"))
    for member in ("engine", "dlc_state", "selftest", "host", "now", "execute", "wait_final",
                   "share", "flush_notices", "net_add", "net_del", "unconfigure",
                   "timeouts", "lnd_link", "set_bulk_port", "set_conns_per_peer",
                   "socklnd_tables"):
        assert member in runtime
    assert runtime["net_add"] == ("coroutine", (("net", "interface"), 0, False, ("address",),
                                                (True,), True))
    assert set(members(_class(PROTOCOLS, "NodeHost"))) == {
        "addresses", "interface_up", "resolve_host", "debug_clock", "engine_log"}


@pytest.mark.parametrize("protocol,path,name", IMPLEMENTATIONS,
                         ids=[i[2] for i in IMPLEMENTATIONS])
def test_every_implementation_has_the_whole_protocol(protocol: str, path: str,
                                                     name: str) -> None:
    assert conformance(protocol, path, name) == []


def test_conformance_sees_a_missing_member_and_a_wrong_signature() -> None:
    """The checker itself, on classes written here."""
    src = ("class NodeHost:\n"
           "    def addresses(self): ...\n"
           "    def interface_up(self, name, extra): ...\n"
           "    async def resolve_host(self, name): ...\n"
           "    def debug_clock(self): ...\n")
    cls = ast.parse(src).body[0]
    assert isinstance(cls, ast.ClassDef)
    have = members(cls)
    want = members(_class(PROTOCOLS, "NodeHost"))
    assert "engine_log" in want and "engine_log" not in have
    assert have["interface_up"] != want["interface_up"]
    assert have["resolve_host"][0] == "coroutine" != want["resolve_host"][0]
    assert have["debug_clock"] == want["debug_clock"]
