"""The simulator's and the faults' shape (issue 29 items 2 and 3), read from the sources with
``ast``: the fabric's parts are composed, not inherited; one matcher decides whether a message
or segment matches a fault's ``match`` (the interposer and the simulator's fabric both ask
``faults.prefilter.Matcher``); the in-process simulator imports no process client.

Each check is a function of source texts, so each is also run once on a planted violation
(``test_*_catches_*``): a check that cannot fail proves nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "testbed" / "sim"
#: the process clients: the control-socket client and the sim server's own (``client.py``
#: is the sim's process client itself, for other processes; the simulator never uses it)
CLIENTS = ("testbed.ctlclient", "testbed.sim.client")
#: a fault's LNet match keys: read only by ``Match`` itself and the one matcher
LNET_KEYS = {"types", "src_nid", "dst_nid", "portal", "forwarded"}
MATCHER_HOME = ("faults/spec.py", "faults/prefilter.py")


def _sources(root: Path) -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(root.rglob("*.py"))}


def sim_class_bases(sources: dict[str, str]) -> list[str]:
    """``module.Class <- Base`` for every class of the given sim modules deriving from a
    class defined in one of them (imported by name or defined in the same module)."""
    trees = {path: ast.parse(text) for path, text in sources.items()}
    ours = {n.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}
    found = []
    for path, tree in trees.items():
        imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    and (n.module or "").startswith("testbed.sim") for a in n.names}
        local = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for base in cls.bases:
                name = base.id if isinstance(base, ast.Name) else \
                    base.attr if isinstance(base, ast.Attribute) else None
                if name in ours and (name in imported or name in local):
                    found.append(f"{path}:{cls.name} <- {name}")
    return found


def match_key_readers(sources: dict[str, str]) -> list[str]:
    """Where a fault's LNet match keys are read (``….match.src_nid``, ``match.types``...)
    outside ``Match`` and the one ``Matcher``: a second matcher in the making."""
    found = []
    for path, text in sources.items():
        if path in MATCHER_HOME:
            continue
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Attribute) and node.attr in LNET_KEYS):
                continue
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else \
                owner.attr if isinstance(owner, ast.Attribute) else ""
            if name in ("match", "m") or name.endswith("match"):
                found.append(f"{path}:{node.lineno} {name}.{node.attr}")
    return found


def matcher_users(sources: dict[str, str]) -> set[str]:
    """The modules that build ``faults.prefilter.Matcher``."""
    users = set()
    for path, text in sources.items():
        tree = ast.parse(text)
        names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                 and n.module == "faults.prefilter" for a in n.names}
        if "Matcher" in names and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                                      and n.func.id == "Matcher" for n in ast.walk(tree)):
            users.add(path)
    return users


def client_imports(sources: dict[str, str]) -> list[str]:
    """Modules of the in-process simulator importing a process client (``client.py``, the
    sim's own process client, aside)."""
    found = []
    for path, text in sources.items():
        if path.endswith("sim/client.py"):
            continue
        for node in ast.walk(ast.parse(text)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.ImportFrom) and node.module == "testbed.sim":
                mods = [f"testbed.sim.{a.name}" for a in node.names]
            found += [f"{path}: {m}" for m in mods if m in CLIENTS]
    return found


def test_no_sim_class_inherits_another_sim_class() -> None:
    assert sim_class_bases(_sources(SIM)) == []


def test_the_fabric_is_its_parts() -> None:
    """The composed parts exist and the fabric holds them (issue 29 item 3)."""
    from testbed.sim.fabric import Fabric
    from testbed.sim.simfabric import sim_fabric

    fab = sim_fabric()
    assert isinstance(fab, Fabric)
    assert {type(getattr(fab, p)).__name__ for p in ("sched", "paths", "conns", "links",
                                                     "observers")} == \
        {"Scheduler", "Paths", "Conns", "Links", "Observers"}
    assert Fabric.__mro__ == (Fabric, object)


def test_inheritance_check_catches_a_subclass() -> None:
    planted = {"testbed/sim/a.py": "class Scheduler:\n    pass\n",
               "testbed/sim/b.py": "from testbed.sim.a import Scheduler\n"
                                   "class Paths(Scheduler):\n    pass\n"}
    assert sim_class_bases(planted) == ["testbed/sim/b.py:Paths <- Scheduler"]


def test_one_matcher_for_the_interposer_and_the_fabric() -> None:
    sources = {**_sources(ROOT / "faults"), **_sources(ROOT / "testbed")}
    assert match_key_readers(sources) == []
    assert {"faults/interposer.py", "testbed/sim/netfaults.py"} <= matcher_users(sources)


def test_matcher_check_catches_a_second_matcher() -> None:
    """The simulator's own matcher as it was before issue 29 (netfaults ``Rule``)."""
    planted = {"testbed/sim/netfaults.py": "def rule(spec):\n    m = spec.match\n"
                                           "    return set(m.types), spec.match.portal\n"}
    assert sorted(match_key_readers(planted)) == ["testbed/sim/netfaults.py:3 m.types",
                                                  "testbed/sim/netfaults.py:3 match.portal"]
    assert matcher_users(planted) == set()


def test_the_simulator_imports_no_process_client() -> None:
    assert client_imports(_sources(SIM)) == []


def test_client_check_catches_the_self_client() -> None:
    planted = {"testbed/sim/netfaults.py": "from testbed.ctlclient import FaultHandle\n",
               "testbed/sim/x.py": "from testbed.sim import client\n"}
    assert client_imports(planted) == ["testbed/sim/netfaults.py: testbed.ctlclient",
                                       "testbed/sim/x.py: testbed.sim.client"]


def test_the_fabric_matches_as_the_interposer_does() -> None:
    """The same ``Match`` against the same LNet message, as the fabric carries it (typed
    header) and as the interposer reads it off the wire (NID keys): one verdict."""
    from faults.prefilter import Matcher
    from faults.spec import parse_match
    from faults.unit6 import nid_key
    from nodes.lnet.hdr import LNetHdr, MsgType
    from nodes.lnet.nid import NID

    a, b = NID.parse("10.0.0.1@tcp"), NID.parse("10.0.0.2@tcp")
    hdr = LNetHdr(dest_nid=b, src_nid=a, dest_pid=12345, src_pid=12345, type=MsgType.PUT,
                  payload_length=0, ptl_index=31)
    for raw, want in (({"type": ["PUT"], "portal": 31}, True),
                      ({"type": ["GET"]}, False),
                      ({"src_nid": str(a), "dst_nid": str(b)}, True),
                      ({"src_nid": str(b)}, False),
                      ({"portal": 4}, False)):
        m = Matcher(parse_match(raw))
        assert m.header(hdr) is want, raw
        assert m.fields("PUT", nid_key(a), nid_key(b), 31) is want, raw
