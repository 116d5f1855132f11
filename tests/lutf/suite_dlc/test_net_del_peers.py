"""``net del`` of a whole local net and the peer table (peer.c ``lnet_peer_tables_cleanup``,
called by api-ni.c ``lnet_shutdown_lndnet``), on the two-net ``hetero-failover`` topology:
s1 is known to c1 by 10.20.0.2@tcp (primary) and 10.21.0.2@tcp1.

Each test deletes c1's tcp net, so each gets its own testbed (the ``topology`` fixture).
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import ok

pytestmark = [pytest.mark.mininet, pytest.mark.topology("hetero-failover")]

S1_TCP, S1_TCP1 = "10.20.0.2@tcp", "10.21.0.2@tcp1"


def _peers(node: Any) -> dict[str, list[str]]:
    """primary NID -> the peer's NIDs, from ``peer show``."""
    view = node.yaml("peer show") or {"peer": []}
    return {p["primary nid"]: [n["nid"] for n in p["peer ni"]] for p in view["peer"]}


@pytest.mark.requirement("cfg-075")
def test_net_del_rehomes_primary_nid_lu20403(topology: Any) -> None:
    """LU-20403, peer.c ``lnet_peer_table_cleanup_locked``: tearing down the local net that
    holds an MR peer's primary NID keeps the peer, since it is still reachable over another
    local net; its primary NID moves to the surviving NID (tcp1) and the NID on the deleted
    net stays as a remote peer NI. Traffic to the peer then goes over tcp1."""
    c1 = topology.node("c1")
    ok(c1, "lnetctl", f"discover {S1_TCP}")
    assert _peers(c1) == {S1_TCP: [S1_TCP, S1_TCP1]}
    ok(c1, "lnetctl", "net del --net tcp")
    assert _peers(c1) == {S1_TCP1: [S1_TCP, S1_TCP1]}
    assert c1.put(S1_TCP1, count=5, size=0)["completed"] == 5


@pytest.mark.requirement("cfg-075")
def test_net_del_keeps_locked_primary_nid_lu20403(topology: Any) -> None:
    """The same teardown leaves a locked primary NID (``peer add --lock_prim``,
    LNET_PEER_LOCK_PRIMARY) where it is: ``lnet_peer_table_cleanup_locked`` re-homes only an
    unlocked one; the peer stays as well."""
    c1 = topology.node("c1")
    ok(c1, "lnetctl", f"peer del --prim_nid {S1_TCP}")
    ok(c1, "lnetctl", f"peer add --prim_nid {S1_TCP} --nid {S1_TCP1} --lock_prim")
    ok(c1, "lnetctl", "net del --net tcp")
    assert _peers(c1) == {S1_TCP: [S1_TCP, S1_TCP1]}
