"""The simulator's parts talk through public members (issue 29 item 3: "the simulator's
scheduler, paths and fabric as separate objects composed, not inherited"; a part composed
but reaching into another's private state is the old inheritance chain in disguise).

Read from the sources with ``ast``: no module of ``testbed/sim`` reads, writes or calls an
underscore member of another object (``fab._deliver``, ``paths._stalled``,
``conns._reset_pending``...); a part's own (``self._x``) is its business. What ``Paths`` asks
of the fabric is ``paths.Wire``, a typed protocol ``Fabric`` implements (``mypy --strict``
holds the fabric to it where it hands itself to ``Paths``; the test here holds the names).
The inheritance rule between the parts is ``test_layout_sim.py``'s
(``test_no_sim_class_inherits_another_sim_class``). Each check is also run on a planted
offence: a check that cannot fail proves nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "testbed" / "sim"
#: (module, expression) pairs still reaching a private member of another object; may only
#: shrink. ``CtlTestbed._ctl`` is the process clients' request method (testbed/ctlclient.py,
#: not a part of the simulator: ``testbed/commands/lst.py`` calls it too).
ALLOWED = {("testbed/sim/client.py", "self.testbed._ctl")}


def _sources(root: Path) -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(root.rglob("*.py"))}


def private_reaches(sources: dict[str, str]) -> set[tuple[str, str]]:
    """(module, ``owner._member``): an underscore member (not ``__dunder__``) of anything
    but ``self``/``cls`` (another part, the fabric, a part's part)."""
    found = set()
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            found.add((path, ast.unparse(node)))
    return found


def test_no_sim_part_reaches_into_another() -> None:
    assert private_reaches(_sources(SIM)) - ALLOWED == set()


def test_the_allow_list_only_shrinks() -> None:
    assert private_reaches(_sources(SIM)) >= ALLOWED


def test_the_check_catches_a_part_calling_the_fabrics_private_moves() -> None:
    """The shapes of main before this step: ``Paths`` calling the fabric's ``_deliver``,
    the fabric reading ``Paths``' and ``Conns``' private sets, a fault model ``fab._at``."""
    planted = {"testbed/sim/paths.py": "class Paths:\n    def retry(self, name, act):\n"
                                       "        self.fab._deliver(name, act)\n"
                                       "        self._held.clear()\n",
               "testbed/sim/fabric.py": "def deliver(fab, paths, conns, key):\n"
                                        "    paths._stalled.discard(key)\n"
                                        "    return key in conns._reset_pending\n",
               "testbed/sim/netmodels.py": "def hold(fab, t, fn):\n    fab._at(t, fn)\n",
               "testbed/sim/ok.py": "import os\nclass A:\n    def f(cls):\n"
                                    "        return self._x, cls._y, os.__name__\n"}
    assert private_reaches(planted) == {
        ("testbed/sim/paths.py", "self.fab._deliver"),
        ("testbed/sim/fabric.py", "paths._stalled"),
        ("testbed/sim/fabric.py", "conns._reset_pending"),
        ("testbed/sim/netmodels.py", "fab._at")}


def test_the_fabric_offers_what_paths_asks() -> None:
    """Every member of ``paths.Wire`` is a public callable of a built fabric (the unit
    fabric and the sim backend's), the one ``Paths`` was given."""
    from testbed.sim.fabric import Fabric
    from testbed.sim.paths import Wire
    from testbed.sim.simfabric import sim_fabric

    wanted = {n for n, v in vars(Wire).items() if callable(v) and not n.startswith("_")}
    assert wanted == {"link", "changed", "record", "deliver", "fail", "complete"}
    for fab in (Fabric(), sim_fabric()):
        assert fab.paths.fab is fab
        assert all(callable(getattr(fab, n)) for n in wanted)
