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
