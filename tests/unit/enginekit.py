"""Shared scaffolding of the engine unit tests: the seed 000 Figure 2 pair on the fabric.

Client ``c1`` (C) and server ``s1`` (S), two NIs each on net ``tcp``; ``s1`` posts a sink on
the lnet_selftest bulk portal so PUTs are accepted.
"""

from __future__ import annotations

from typing import Any

from nodes.lnet import discovery
from nodes.lnet.engine import LNetEngine
from nodes.lnet.nid import NID, Net
from testbed.sim.fabric import Fabric

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


def settle_discovery(fab: Fabric, nids: dict[str, list[NID]] | None = None) -> Fabric:
    """Bring every peer up to date before a test counts messages (spec §5.2 ``is_uptodate``).

    Discovery is on, as in real LNet, so the first message to a peer that is not up to date
    waits for a ping (and push) round (spec §2.2 step 5, §5.3). Tests that count exact
    messages, credits or health changes run ``lnetctl discover`` (``discovery.discover``) on
    every peer each engine knows (plus ``nids[node]``), let it finish, then zero the
    statistics and forget the recorded events and transmissions, so they see only their own
    traffic.
    """
    for name, eng in fab.engines.items():
        targets = [p.primary_nid for p in eng.peers.peers] + list((nids or {}).get(name, []))
        for nid in targets:
            fab.call(name, discovery.discover, eng, nid, fab.now)
    busy = True
    while busy and fab.now < 10.0:  # a few ms of virtual time: ping, reply, push, ACK
        busy = bool(fab.sched.pending()) or any(e.dc.request or e.dc.working
                                                for e in fab.engines.values())
        if busy and not fab.step():
            break
    for name, eng in fab.engines.items():
        assert not eng.dc.request and not eng.dc.working, f"{name}: discovery still running"
        eng.stats_reset()
        fab.events[name].clear()
    fab.transmits.clear()
    return fab


def mr2_fabric(*, c_numa: list[int | None] | None = None, s_nids: list[NID] = S,
               mr: bool = True, s_knows_c: bool = True, settle: bool = True) -> Fabric:
    """c1 and s1 on a fabric; with ``mr`` c1 knows s1 as a static MR peer (and s1 knows c1
    unless ``s_knows_c`` is false). With ``settle`` the static peers are discovered first
    (``settle_discovery``), so the test starts with both peers up to date."""
    fab = Fabric()
    c, s = make_node(11, C, c_numa), make_node(22, s_nids)
    if mr:
        c.peer_add(s_nids[0], s_nids[1:])
        if s_knows_c:
            s.peer_add(C[0], [C[1]])
    s.attach_me(PORTAL, 0, 2**64 - 1)
    fab.add("c1", c)
    fab.add("s1", s)
    return settle_discovery(fab) if settle and mr else fab


def settle_sim(tb: Any) -> Any:
    """``settle_discovery`` for a sim testbed, the way a user would: ``lnetctl discover`` of
    every peer each node knows, then ``lnetctl stats reset`` on every node."""
    for name, rt in tb.runtimes.items():
        for peer in list(rt.engine.peers.peers):
            res = tb.node(name).lnetctl(f"discover {peer.primary_nid}")
            assert res.rc == 0, f"{name}: discover {peer.primary_nid}: {res.err}"
    for name in tb.runtimes:
        assert tb.node(name).lnetctl("stats reset").rc == 0
    return tb
