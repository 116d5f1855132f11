"""LNetAddPeer and the primary lock (peer.c ``LNetAddPeer``, ``lnet_peer_add``,
``lnet_peer_force_merge``, ``lnet_peer_add_nid``; nodes/lnet/addpeer.py), ``lctl
add_uuid``/``del_uuid`` (nodes/dlc/verbs/lctl_uuid.py), and the non-MR preferred NI forgotten when
a peer turns Multi-Rail (``lnet_peer_clr_non_mr_pref_nids``). docs/sanity-lnet.md E16."""

from __future__ import annotations

from typing import Any

from enginekit import C, S, mr2_fabric
from rtdouble import RuntimeDouble

from nodes.dlc.verbs import lctl_uuid
from nodes.lnet import discovery
from nodes.lnet.addpeer import lock_transfer
from nodes.lnet.engine import LNetEngine
from nodes.lnet.lpstate import BAD_CONFIG, LOCK_PRIMARY
from nodes.lnet.nid import NID
from nodes.lnet.peer import Peer, PeerTable
from testbed.sim.fabric import Fabric

P = NID.parse("10.10.0.2@tcp99")  # s1's primary as Lustre names it: no local NI on tcp99


def _pair() -> tuple[Fabric, LNetEngine]:
    """c1 and s1 with no static peers; c1 has discovered s1 (an up-to-date MR peer)."""
    fab = mr2_fabric(mr=False)
    c = fab.engines["c1"]
    fab.call("c1", discovery.discover, c, S[0], fab.now)
    fab.run_until(fab.now + 1)
    return fab, c


def test_add_peer_merges_the_discovered_secondary_into_the_locked_primary() -> None:
    fab, c = _pair()
    fab.call("c1", c.add_peer, [P], fab.now)
    fab.call("c1", c.add_peer, [P, S[0]], fab.now)
    fab.run_until(fab.now + 1)
    peer = c.peers.find_peer(S[0])
    assert peer is not None and peer is c.peers.find_peer(P)
    assert peer.primary_nid == P and peer.state & LOCK_PRIMARY
    assert [lpni.nid for lpni in peer.lpnis] == [S[0], S[1], P]  # the ping's primary first
    assert len(c.peers.peers) == 1 and peer.merge_primary_nid is None


def test_without_lock_prim_nid_the_discovered_peer_stays_apart() -> None:
    """``lock_prim_nid=0``: no primary lock, no forced merge of an up-to-date peer."""
    fab, c = _pair()
    c.tunables.lock_prim_nid = 0
    fab.call("c1", c.add_peer, [P, S[0]], fab.now)
    fab.run_until(fab.now + 1)
    assert c.peers.find_peer(S[0]) is not c.peers.find_peer(P)
    assert not any(p.state & LOCK_PRIMARY for p in c.peers.peers)


def test_discovery_off_skips_missing_nets_and_locks_each_nid() -> None:
    fab, c = _pair()
    c.set_tunable("discovery", 0)
    fab.call("c1", c.add_peer, [P, NID.parse("10.12.0.9@tcp")], fab.now)
    assert c.peers.find_peer(P) is None  # tcp99: no local net
    peer = c.peers.find_peer(NID.parse("10.12.0.9@tcp"))
    assert peer is not None and peer.state & LOCK_PRIMARY and not peer.multi_rail


def test_a_nid_of_a_locked_peer_names_that_peer() -> None:
    """-EALREADY: a NID already in a locked peer makes that peer's primary the one to use."""
    fab, c = _pair()
    fab.call("c1", c.add_peer, [P, S[0]], fab.now)
    fab.run_until(fab.now + 1)
    fab.call("c1", c.add_peer, [S[1], NID.parse("10.12.0.9@tcp")], fab.now)
    fab.run_until(fab.now + 1)
    assert c.peers.find_peer(S[1]).primary_nid == P  # type: ignore[union-attr]


def _locked(table: PeerTable, *nids: NID) -> Peer:
    peer = table.traffic_add(nids[0], 8).peer
    for nid in nids[1:]:
        table.add_nid(peer, nid, 8)
    table.lock_primary(peer)
    return peer


def test_lock_transfer_rules() -> None:
    """``lnet_peer_add_nid``: the earliest lock wins; a locked peer with more NIDs is a bad
    configuration and its primary does not move."""
    dc = LNetEngine().discovery  # (unused on these paths; the compiled engine checks its type)
    table = PeerTable()
    early, late = _locked(table, S[0]), _locked(table, C[0])
    assert lock_transfer(dc, late, early, S[0]) is None and late.primary_nid == S[0]
    assert late.prim_lock_ts == early.prim_lock_ts
    table2 = PeerTable()
    other = _locked(table2, S[0], S[1])
    peer = table2.traffic_add(C[0], 8).peer
    logs = lock_transfer(dc, peer, other, S[0])
    assert logs and "already locked" in logs[0].text  # type: ignore[attr-defined]
    assert peer.state & BAD_CONFIG and other.state & BAD_CONFIG and peer.primary_nid == C[0]


def test_non_mr_preferred_ni_is_forgotten_when_the_peer_turns_mr() -> None:
    fab = mr2_fabric(mr=False)
    c = fab.engines["c1"]
    fab.call("c1", c.ping, fab.now, S[0])
    fab.run_until(fab.now + 1)
    lpni = c.peers.find_lpni(S[0])
    assert lpni is not None and lpni.pref_nids and lpni.non_mr_pref
    fab.call("c1", discovery.discover, c, S[0], fab.now)
    fab.run_until(fab.now + 1)
    assert lpni.peer.multi_rail and lpni.pref_nids == [] and not lpni.non_mr_pref


def _configured_rt() -> RuntimeDouble:
    rt = RuntimeDouble()
    rt.engine.configure()
    return rt


def test_lctl_add_uuid_del_uuid() -> None:
    rt: Any = _configured_rt()
    assert lctl_uuid.add_uuid(rt, ["u1", "1.2.3.4@tcp9"]) == (
        0, "Added uuid u1: 1.2.3.4@tcp9\n", "")
    assert rt.engine.peers.find_peer(NID.parse("1.2.3.4@tcp9")).state & LOCK_PRIMARY
    assert lctl_uuid.add_uuid(rt, ["u1", "bogus"]) == (255, "", "Can't parse NID bogus\n")
    rc, _, err = lctl_uuid.add_uuid(rt, ["u1"])
    assert rc != 0 and "usage: add_uuid <uuid> <nid>" in err
    rc, _, err = lctl_uuid.add_uuid(rt, ["u" * 40, "1.2.3.4@tcp"])
    assert rc == 255 and "IOC_PORTAL_ADD_UUID failed" in err
    assert lctl_uuid.del_uuid(rt, ["u1"]) == (0, "", "")
    assert lctl_uuid.del_uuid(rt, ["u1"]) == (22, "", "error: del_uuid: Invalid argument\n")
    assert lctl_uuid.add_uuid(rt, ["u2", "1.2.3.5@tcp9"])[0] == 0
    assert lctl_uuid.del_uuid(rt, ["_all_"]) == (0, "", "")
    assert lctl_uuid.del_uuid(rt, ["u2"])[0] == 22
