"""``lnetctl peer del`` as ``lnet_del_peer_ni`` checks it (spec §1.3, cfg-070).

Any peer may be deleted, configured or learnt by traffic and discovery; the NID given must be
the peer's primary (-ENODEV otherwise); a gateway that routes still use is -EBUSY.
"""

from __future__ import annotations

import errno

import pytest

from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID, Net
from tests.unit.enginekit import S, mr2_fabric


def _discovered_only() -> tuple[object, object]:
    """c1 learns s1 by traffic (no ``peer add``), then discovery completes."""
    fab = mr2_fabric(mr=False)
    c = fab.engines["c1"]
    fab.call("c1", c.put, fab.now, S[0], payload=b"x", portal=52)
    fab.run_until(fab.now + 1.0)
    return fab, c


def test_discovered_peer_can_be_deleted() -> None:
    _fab, c = _discovered_only()
    peer = c.peers.find_peer(S[0])
    assert peer is not None and {lp.nid for lp in peer.lpnis} == set(S)  # discovered both
    c.peer_del(S[0], [])
    assert c.peers.find_peer(S[0]) is None and c.peers.find_peer(S[1]) is None


def test_non_primary_nid_is_enodev_and_unknown_is_enoent() -> None:
    _fab, c = _discovered_only()
    with pytest.raises(LNetConfigError) as exc:
        c.peer_del(S[1], [])
    assert exc.value.errno == -errno.ENODEV
    with pytest.raises(LNetConfigError) as exc:
        c.peer_del(NID.parse("10.99.0.9@tcp"), [])
    assert exc.value.errno == -errno.ENOENT


def test_gateway_in_use_is_ebusy() -> None:
    fab, c = _discovered_only()
    c.router.add(Net.parse("tcp9"), S[0], None, 0, fab.now)
    with pytest.raises(LNetConfigError) as exc:
        c.peer_del(S[0], [])
    assert exc.value.errno == -errno.EBUSY
    assert c.peers.find_peer(S[0]) is not None


def test_net_del_cleans_peer_table_lu20403() -> None:
    """peer.c ``lnet_peer_table_cleanup_locked`` when local net tcp5 goes (``net del``):
    a peer with a NID on a surviving local net keeps every NID (those on tcp5 stay as remote
    peer NIs), its primary moved there if it was on tcp5 (LU-20403); a peer with none loses
    its tcp5 NIDs, and goes whole when its primary was one of them."""
    from nodes.lnet.engine import LNetEngine

    tcp, tcp5 = Net.parse("tcp"), Net.parse("tcp5")
    eng = LNetEngine(incarnation=1)
    eng.configure()
    eng.net_add(tcp, "eth0", NID.parse("10.10.0.1@tcp"))
    eng.net_add(tcp5, "eth1", NID.parse("10.15.0.1@tcp5"))
    only5, mixed, second5 = (NID.parse("10.15.0.7@tcp5"), NID.parse("10.15.0.8@tcp5"),
                             NID.parse("10.15.0.9@tcp5"))
    far = NID.parse("10.99.0.9@tcp9")  # not a local net: no rail
    eng.peer_add(only5, [far])
    eng.peer_add(mixed, [NID.parse("10.10.0.8@tcp")])
    eng.peer_add(NID.parse("10.10.0.9@tcp"), [NID.parse("10.15.0.6@tcp5")])
    eng.peer_add(NID.parse("10.98.0.9@tcp8"), [second5])
    eng.net_del(tcp5)
    assert eng.peers.find_peer(only5) is None and eng.peers.find_peer(far) is None
    peer = eng.peers.find_peer(mixed)
    assert peer is not None and str(peer.primary_nid) == "10.10.0.8@tcp"
    assert {str(lp.nid) for lp in peer.lpnis} == {"10.15.0.8@tcp5", "10.10.0.8@tcp"}
    assert eng.peers.find_lpni(second5) is None
    assert eng.peers.find_peer(NID.parse("10.98.0.9@tcp8")) is not None
    kept = eng.peers.find_lpni(NID.parse("10.15.0.6@tcp5"))
    assert kept is not None and str(kept.peer.primary_nid) == "10.10.0.9@tcp"
