"""The backend skeleton's shape (issue 29 item 3, acceptance "at most one control-server loop
and one fault-manager tick in the tree", "no import of an underscore name across packages").

Each check is a function of ``{path: source}`` so that it is run twice: on the tree as it is
(it must pass) and on the tree with one planted offence (it must fail): a check that cannot
fail proves nothing. The allow-lists name files of other streams of issue 29 that still
offend, with the stream that owns them; they may only shrink (a test holds each entry to a
file that still offends, so a fixed one must be removed from the list).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import backends

ROOT = Path(__file__).resolve().parents[2]
TREES = ("nodes", "testbed", "faults")
PROJECT = ("nodes", "testbed", "faults")

#: The one control-server loop: the node daemon's sockets and every testbed's ctl.sock
#: (testbed/ctlserver.py builds on it; nodes imports nothing of testbed).
THE_LOOP = "nodes/daemon/ctlloop.py"
#: Modules that make a ZeroMQ ROUTER and serve requests from it, besides THE_LOOP.
SERVER_ALLOWED: set[str] = set()  # (the daemon's own loop went to ctlloop: s29sim2)
#: Fault-manager ticks (a walk of ``timeline.due``) besides testbed/faultbook.py.
TICK_ALLOWED: set[str] = set()  # (the simulator's runs FaultBook.advance: s29sim2)
#: (importing module, name) pairs still crossing a module boundary with an underscore name.
UNDERSCORE_ALLOWED: set[tuple[str, str]] = set()  # (the last ones renamed at the merge)
#: Where backends are chosen: the CLI, the package's up/attach, the pytest plugin and fixtures
#: (the trace and report modules only name the backend a recorded result ran on).
CHOOSERS = ("testbed/cli.py", "testbed/commands/", "testbed/__init__.py",
            "testbed/pytest/plugin.py", "testbed/pytest/fixtures.py")
#: The backends' classes: reached through ``testbed.backends`` only, from the choosers.
BACKEND_CLASSES = {"MininetTestbed", "SimClient", "SimTestbed", "VagrantTestbed"}
BACKEND_MODULES = {"testbed.mininet", "testbed.mininet.client", "testbed.sim",
                   "testbed.sim.client", "testbed.sim.inproc", "testbed.vagrant.client",
                   "testbed.vagrant.cli"}


def tree_sources(tops: tuple[str, ...] = TREES) -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for top in tops
            for p in sorted((ROOT / top).rglob("*.py"))}


def _calls(tree: ast.AST, attr: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == attr:
            yield node


# -- the checks --------------------------------------------------------------------------------

def control_servers(sources: dict[str, str]) -> set[str]:
    """Modules with a control-server loop: a ``zmq.ROUTER`` socket and, inside a ``while``
    loop, a ``recv_multipart`` (the request read) — the shape every one of the three had."""
    found = set()
    for path, text in sources.items():
        tree = ast.parse(text)
        router = any(isinstance(n, ast.Attribute) and n.attr == "ROUTER"
                     for n in ast.walk(tree))
        loops = [w for w in ast.walk(tree) if isinstance(w, ast.While)]
        if router and any(any(True for _ in _calls(w, "recv_multipart"))
                          or any(True for _ in _calls(w, "poll")) for w in loops):
            found.add(path)
    return found


def fault_ticks(sources: dict[str, str]) -> set[str]:
    """Modules that walk a fault's schedule themselves: ``<...>.timeline.due(...)``."""
    found = set()
    for path, text in sources.items():
        for call in _calls(ast.parse(text), "due"):
            owner = call.func.value  # type: ignore[attr-defined]
            name = owner.attr if isinstance(owner, ast.Attribute) else \
                owner.id if isinstance(owner, ast.Name) else ""
            if name in ("timeline", "tl"):
                found.add(path)
    return found


def underscore_imports(sources: dict[str, str]) -> set[tuple[str, str]]:
    """(module, name): ``from project.module import _name`` or ``module._name`` where
    ``module`` is an imported project module (``__dunder__`` names aside)."""
    found = set()
    for path, text in sources.items():
        tree = ast.parse(text)
        modules: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                project = node.level > 0 or (node.module or "").split(".")[0] in PROJECT
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if project and private:
                        found.add((path, alias.name))
                    elif project:
                        modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PROJECT:
                        modules.add(alias.asname or alias.name.split(".")[0])
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                found.add((path, node.attr))
    return found


def backend_choices(sources: dict[str, str]) -> set[str]:
    """``path:line`` where a chooser compares a backend to a backend's name, or imports a
    backend's class or module itself instead of asking ``testbed.backends``."""
    names = set(backends.NAMES)
    found = set()
    for path, text in sources.items():
        if not path.startswith(CHOOSERS):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Compare):
                consts = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
                if consts & names and "backend" in ast.unparse(node):
                    found.add(f"{path}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom | ast.Import):
                module = node.module if isinstance(node, ast.ImportFrom) else None
                imported = {a.name for a in node.names}
                if module in BACKEND_MODULES or imported & (BACKEND_CLASSES | BACKEND_MODULES):
                    found.add(f"{path}:{node.lineno}")
    return found


# -- on the tree -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return tree_sources()


def test_one_control_server_loop(sources: dict[str, str]) -> None:
    assert control_servers(sources) - SERVER_ALLOWED == {THE_LOOP}


def test_one_fault_manager_tick(sources: dict[str, str]) -> None:
    assert fault_ticks(sources) - TICK_ALLOWED == {"testbed/faultbook.py"}


def test_no_underscore_name_crosses_a_module(sources: dict[str, str]) -> None:
    assert underscore_imports(sources) - UNDERSCORE_ALLOWED == set()


def bulk_bursts(sources: dict[str, str]) -> set[str]:
    """Modules that start LNet PUTs/GETs to the bulk portal themselves (an ``engine.put`` or
    ``engine.get`` call with a ``portal=`` keyword naming the bulk portal)."""
    found = set()
    for path, text in sources.items():
        tree = ast.parse(text)
        for attr in ("put", "get"):
            for call in _calls(tree, attr):
                portal = next((k.value for k in call.keywords if k.arg == "portal"), None)
                if isinstance(portal, ast.Name) and portal.id in (
                        "BULK_PORTAL", "SRPC_RDMA_PORTAL"):
                    found.add(path)
    return found


#: explore's replayed workload streams: messages spread over virtual time one by one, each
#: failure kept by its errno (their event logs are the explore hashes: sim_hash.py)
BURST_ALLOWED = {"testbed/explore/replay.py"}


def test_one_burst_implementation(sources: dict[str, str]) -> None:
    """The daemon's put/get verb and the sim's node both run ``nodes/burst.py`` (issue 29)."""
    assert bulk_bursts(sources) - BURST_ALLOWED == {"nodes/burst.py"}
    planted = {"x.py": "def f(engine, now, dst):\n"
                       "    return engine.put(now, dst, payload=b'', portal=SRPC_RDMA_PORTAL)\n"}
    assert bulk_bursts(planted) == {"x.py"}


def test_backends_are_chosen_through_the_registry(sources: dict[str, str]) -> None:
    assert backend_choices(sources) == set()


def test_allow_lists_only_shrink(sources: dict[str, str]) -> None:
    """Every allow-listed entry still offends: one that was fixed must leave the list."""
    assert control_servers(sources) >= SERVER_ALLOWED
    assert fault_ticks(sources) >= TICK_ALLOWED
    assert underscore_imports(sources) >= UNDERSCORE_ALLOWED


def test_no_import_cycle_through_the_registry() -> None:
    """The registry imports backends by name (``importlib``), which test_layout.py's lazy
    graph cannot see: its edges are added here and the testbed graph is checked again."""
    import test_layout as layout

    graph = layout._graph(lazy=True, prefix="testbed")
    named = {spec.partition(":")[0] for kind in backends.REGISTRY.values()
             for spec in (kind.client, kind.in_process, kind.cli_up, kind.oneshot) if spec}
    assert named <= set(graph), named - set(graph)
    graph["testbed.backends"] = set(graph["testbed.backends"]) | named
    assert layout._cycles(graph) == []
    graph["testbed.sim.client"] = set(graph["testbed.sim.client"]) | {"testbed.backends"}
    assert layout._cycles(graph) != []  # (a cycle through the registry is seen)


def test_every_backend_resolves_to_its_classes() -> None:
    """The registry's ``module:Class`` names import, and ``up``/``attach`` reach them."""
    for kind in backends.REGISTRY.values():
        cls = kind.client_class()
        assert callable(cls.up), kind.name
        if kind.in_process is not None:
            assert callable(backends.load(kind.in_process).up)
        if kind.cli_up is not None:
            assert callable(backends.load(kind.cli_up))
    assert backends.NAMES == ("mininet", "sim", "vagrant", "hosts")
    with pytest.raises(backends.TestbedError, match="unknown backend 'vmware'"):
        backends.get("vmware")


# -- each check fails on one planted offence --------------------------------------------------

SECOND_LOOP = '''
import zmq
def serve(sock):
    s = zmq.Context().socket(zmq.ROUTER)
    while True:
        frames = s.recv_multipart()
'''
SECOND_TICK = '''
def tick(self, now):
    for f in self.faults.values():
        for what, k in f.timeline.due(now):
            pass
'''


def test_the_checks_fail_on_a_planted_offence() -> None:
    """Each check, given one offence, names it (issue 29: a check that cannot fail proves
    nothing); the tree itself passes (above), so a planted file is all it takes."""
    assert control_servers({"testbed/planted.py": SECOND_LOOP}) == {"testbed/planted.py"}
    assert fault_ticks({"testbed/planted.py": SECOND_TICK}) == {"testbed/planted.py"}
    assert underscore_imports({"testbed/planted.py": "from testbed.ctlproto import _kind\n"}) \
        == {("testbed/planted.py", "_kind")}
    assert underscore_imports({"testbed/planted.py": "from .ctlproto import _kind\n"}) \
        == {("testbed/planted.py", "_kind")}
    assert underscore_imports({"testbed/planted.py": "from testbed import ctlproto\n"
                                                     "ctlproto._kind(1)\n"}) \
        == {("testbed/planted.py", "_kind")}
    assert underscore_imports({"testbed/planted.py": "import os\nos._exit(0)\n"}) == set()
    planted = {"testbed/commands/planted.py":
               'def f(args):\n    if args.backend == "sim":\n        pass\n'}
    assert backend_choices(planted) == {"testbed/commands/planted.py:2"}
    planted = {"testbed/pytest/fixtures.py": "from testbed.sim.client import SimClient\n"}
    assert backend_choices(planted) == {"testbed/pytest/fixtures.py:1"}


def test_the_checks_flag_main_before_issue_29() -> None:
    """The shapes the checks were written against, as they stood before this step: the
    Mininet supervisor's own loop, the vagrant fault table's own tick, the CLI's chain."""
    old_loop = '''
import zmq
class Supervisor:
    def serve(self):
        sock = zmq.Context().socket(zmq.ROUTER)
        while not _STOP["requested"]:
            if not sock.poll(500):
                continue
            frames = sock.recv_multipart(copy=False)
'''
    assert control_servers({"testbed/mininet/supervisor.py": old_loop})
    old_daemon = '''
import zmq
class ControlServer:
    def __init__(self, ctx):
        self.sock = ctx.socket(zmq.ROUTER)
    async def serve(self):
        while not self.stopping.is_set():
            done, _ = await asyncio.wait({*recvs, stop})
            for recv in [r for r in recvs if r in done]:
                recvs[asyncio.ensure_future(sock.recv_multipart(copy=False))] = sock
'''
    assert control_servers({"nodes/daemon/control.py": old_daemon})
    old_tick = '''
def tick(self):
    for f in list(self.faults.values()):
        for what, k in f.timeline.due(time.time()):
            self._apply(f, k)
'''
    assert fault_ticks({"testbed/vagrant/faults.py": old_tick})
    old_cli = 'def cmd_up(args):\n    if args.backend in ("vagrant", "hosts"):\n        pass\n'
    assert backend_choices({"testbed/commands/lifecycle.py": old_cli})
