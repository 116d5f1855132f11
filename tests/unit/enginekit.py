"""Shared scaffolding of the engine unit tests: the seed 000 Figure 2 pair on the fabric.

Client ``c1`` (C) and server ``s1`` (S), two NIs each on net ``tcp``; ``s1`` posts a sink on
the lnet_selftest bulk portal so PUTs are accepted.
"""

from __future__ import annotations

from nodes.lnet.engine import LNetEngine
from nodes.lnet.nid import NID, Net
from testbed.fabric import Fabric

TCP = Net.parse("tcp")
C = [NID.parse("10.10.0.1@tcp"), NID.parse("10.11.0.1@tcp")]
S = [NID.parse("10.10.0.2@tcp"), NID.parse("10.11.0.2@tcp")]
PORTAL = 52


def make_node(inc: int, nids: list[NID], numa: list[int | None] | None = None) -> LNetEngine:
    """A configured engine with one NI per NID, ``eth0``, ``eth1``... (optionally NUMA)."""
    eng = LNetEngine(incarnation=inc)
    eng.configure()
    for i, nid in enumerate(nids):
        eng.net_add(TCP, f"eth{i}", nid, numa=numa[i] if numa else None)
    return eng


def mr2_fabric(*, c_numa: list[int | None] | None = None, s_nids: list[NID] = S,
               mr: bool = True, s_knows_c: bool = True) -> Fabric:
    """c1 and s1 on a fabric; with ``mr`` c1 knows s1 as a static MR peer (and s1 knows c1
    unless ``s_knows_c`` is false)."""
    fab = Fabric()
    c, s = make_node(11, C, c_numa), make_node(22, s_nids)
    if mr:
        c.peer_add(s_nids[0], s_nids[1:])
        if s_knows_c:
            s.peer_add(C[0], [C[1]])
    s.attach_me(PORTAL, 0, 2**64 - 1)
    fab.add("c1", c)
    fab.add("s1", s)
    return fab
