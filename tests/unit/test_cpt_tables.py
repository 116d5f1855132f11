"""Per-CPT peer tables and the large-NID CPT hash (issue 26 item 10; nodes/lnet/cpt.py,
nodes/lnet/peer.py ``PeerTable.walk``).

Real behaviour followed (lustre-release master): api-ni.c ``lnet_nid_cpt_hash``'s large-NID
branch (``hash_32`` chained over the four ``__be32`` address words, then the net, cut to
``LNET_CPT_BITS``, folded into the count) and ``lnet_peer_ni_show_start`` (the netlink
``peer show`` list: ``cfs_percpt_for_each`` over ``ln_peer_tables``, each ``pt_peer_list`` in
insertion order); peer.c ``lnet_peer_alloc`` (``lp_cpt`` = the hash of its first NID over
``LNET_CPT_NUMBER``), ``lnet_peer_attach_peer_ni`` (``list_add_tail`` to its CPT's list),
``lnet_get_peer_list`` and ``lnet_push_update_to_peers`` (the same walk)."""

from __future__ import annotations

from typing import Any

import pytest

from nodes.lnet import cpt
from nodes.lnet.engine import LNetEngine
from nodes.lnet.nid import NID, Net

V6 = ("2001:db8:6::1@tcp", "2001:db8:6::2@tcp", "2001:db8:7::1@tcp", "2001:db8:7::2@tcp",
      "2001:db8:6::3@tcp")


def test_hash_32_is_linux_golden_ratio_multiply() -> None:
    """include/linux/hash.h: ``hash_32(v, bits)`` = top ``bits`` of ``v * 0x61C88647`` (mod
    2^32): 1 * ratio is the ratio itself; 3 * ratio wraps past 2^32."""
    assert cpt.hash_32(1, 32) == 0x61C88647
    assert cpt.hash_32(3, 32) == 0x255992D5  # 0x1_2559_92D5 cut to 32 bits
    assert cpt.hash_32(1, 1) == 0 and cpt.hash_32(2, 1) == 1  # the top bit


@pytest.mark.parametrize(("number", "want"), [(2, [1, 0, 1, 1, 0]), (3, [0, 0, 0, 2, 1]),
                                              (4, [3, 0, 3, 3, 1]), (5, [4, 1, 4, 2, 3])])
def test_large_nid_cpt_hash_chains_hash_32(number: int, want: list[int]) -> None:
    """``lnet_nid_cpt_hash`` of large NIDs (values worked out apart from the engine, with
    ``struct.unpack("<4I")`` of the address as x86 reads ``nid_addr``). The nid4 byte sum the
    engine used before gave 0, 1, 0, 2 for 2001:db8:6::1@tcp (the net and 0x20010db8)."""
    assert [cpt.nid_cpt_hash(NID.parse(n), number) for n in V6] == want
    assert cpt.cpt_of_nid(NID.parse(V6[0]), tuple(range(10, 10 + number))) == 10 + want[0]


def test_large_nid_hash_takes_its_bits_from_the_node() -> None:
    """An NI on 2 of a node's 4 CPTs: ``LNET_CPT_BITS`` counts the node's 4 (2 bits), not
    the NI's 2; a 4-byte NID's byte sum does not depend on it."""
    assert [cpt.nid_cpt_hash(NID.parse(n), 2, 4) for n in V6] == [0, 0, 0, 0, 1]
    four = NID.parse("10.10.0.3@tcp")
    assert cpt.nid_cpt_hash(four, 2, 4) == cpt.nid_cpt_hash(four, 2) == (2 + 23) % 2


def _engine(ncpts: int, adds: list[str]) -> LNetEngine:
    """A node with ``ncpts`` CPTs, one NI, and a Multi-Rail peer per NID of ``adds``."""
    eng = LNetEngine()
    eng.set_cpu_param("libcfs.cpu_npartitions", str(ncpts))
    eng.configure()
    eng.net_add(Net.parse("tcp"), "eth0", NID.parse("10.10.0.1@tcp"))
    for nid in adds:
        eng.peer_add(NID.parse(nid), [])
    return eng


def _peer_show_order(ncpts: int, adds: list[str]) -> list[str]:
    eng = _engine(ncpts, adds)
    view: Any = eng.view("peer", nid=None, verbose=0)["peer"]
    return [str(p["primary nid"]) for p in view]


def test_peer_show_walks_the_peer_tables_cpt_by_cpt() -> None:
    """Two CPTs: 10.10.0.3 hashes to CPT 1 (2 + 10 + 10 + 3 = 25), .2 and .4 to CPT 0; added
    .3, .2, .4, ``peer show`` lists CPT 0's table (.2, .4, in the order added) then CPT 1's
    (.3). One CPT: the order added."""
    adds = ["10.10.0.3@tcp", "10.10.0.2@tcp", "10.10.0.4@tcp"]
    assert [cpt.nid_cpt_hash(NID.parse(n), 2) for n in adds] == [1, 0, 0]
    assert _peer_show_order(2, adds) == ["10.10.0.2@tcp", "10.10.0.4@tcp", "10.10.0.3@tcp"]
    assert _peer_show_order(1, adds) == adds


def test_a_peer_stays_in_the_table_of_its_first_nid() -> None:
    """``lp_cpt`` is fixed at ``lnet_peer_alloc``: a peer whose first NID hashed to CPT 1
    stays in CPT 1's table with NIDs of CPT 0 added to it."""
    eng = _engine(2, [])
    eng.peer_add(NID.parse("10.10.0.3@tcp"), [NID.parse("10.10.0.2@tcp")])
    eng.peer_add(NID.parse("10.10.0.4@tcp"), [])
    assert [p.cpt for p in eng.peers.walk()] == [0, 1]
    assert [str(p.primary_nid) for p in eng.peers.walk()] == ["10.10.0.4@tcp", "10.10.0.3@tcp"]


def _push_queue_order(ncpts: int, adds: list[str]) -> list[str]:
    eng = _engine(ncpts, adds)  # its peers behind our ping buffer's sequence
    assert eng.dc.request == []
    eng.net_add(Net.parse("tcp"), "eth1", NID.parse("10.11.0.1@tcp"))  # buffer seq + 1
    return [str(p.primary_nid) for p in eng.dc.request]


def test_pushes_after_an_ni_add_are_queued_cpt_by_cpt() -> None:
    """``lnet_push_update_to_peers`` walks the peer tables CPT by CPT: the MR peers needing
    our new ping buffer join the discovery request queue (and are pushed) in that order."""
    adds = ["10.10.0.3@tcp", "10.10.0.2@tcp", "10.10.0.4@tcp"]
    assert _push_queue_order(2, adds) == ["10.10.0.2@tcp", "10.10.0.4@tcp", "10.10.0.3@tcp"]
    assert _push_queue_order(1, adds) == adds
