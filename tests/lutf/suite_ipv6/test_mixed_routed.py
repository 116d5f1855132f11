"""Routing between an IPv6 net and an IPv4 net (issue 26 item 8).

topologies/mixed-v4v6-routed.yaml: c1 2001:db8:16::1@tcp6 (IPv6 only, large NID) -- r1
(2001:db8:16::2@tcp6 and 10.40.0.1@tcp, routing) -- s1 10.40.0.2@tcp (IPv4 only, LNet
without --large). A message keeps its source and destination NIDs end to end (lib-move.c
``lnet_parse_forward_locked`` forwards the header unchanged): s1 sees c1's large NID as the
source of a PUT that reached it over IPv4. On Mininet r1's socklnd speaks V4 (16-byte NIDs)
to c1 and V3 to s1 (``ksocknal_create_conn``: the protocol follows the peer's address
family). Both backends; one module testbed.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import advance_until, ok, peer_nis

pytestmark = [pytest.mark.mininet, pytest.mark.topology("mixed-v4v6-routed"),
              pytest.mark.xdist_group("suite_ipv6_mixed")]

C1, R1_V6, R1_V4, S1 = ("2001:db8:16::1@tcp6", "2001:db8:16::2@tcp6", "10.40.0.1@tcp",
                        "10.40.0.2@tcp")


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def _route_state(node: Any, net: str) -> str:
    view = node.yaml("route show -v") or {"route": []}
    return next(str(r["state"]) for r in view["route"] if r["net"] == net)


def test_routes_up_across_families(tb: Any) -> None:
    """c1's route to tcp through r1's large NID and s1's route to tcp6 through r1's IPv4 NID
    are both up (the router checker's pings of r1 got replies listing both of its NIs)."""
    assert _route_state(tb.node("c1"), "tcp") == "up"
    assert _route_state(tb.node("s1"), "tcp6") == "up"


def test_router_ping_buffer_lists_both_families(tb: Any) -> None:
    """r1's buffer: its IPv4 NID in the fixed entries, its large NID in the large-address
    section; ``lnetctl ping`` from either side lists both, the first NI (large) primary."""
    for node, target in (("c1", R1_V6), ("s1", R1_V4)):
        view = tb.node(node).yaml(f"ping {target}")["ping"][0]
        assert view["primary nid"] == R1_V6, view
        assert sorted(p["nid"] for p in view["peer_ni"]) == sorted([R1_V6, R1_V4])


def test_put_from_ipv6_to_ipv4_through_router(tb: Any) -> None:
    """PUTs from c1 reach s1 through r1: r1 received them from c1's large NID and sent them
    on to s1's IPv4 one (its peer NI counters, the immediate hops); s1 knows c1 by its large
    NID (the header's source NID), though it has no IPv6 path of its own."""
    c1, r1, s1 = tb.node("c1"), tb.node("r1"), tb.node("s1")
    before = peer_nis(r1)
    res = c1.put(S1, count=16, size=8192)
    assert res["completed"] == 16, res
    after = peer_nis(r1)

    def count(view: dict[str, Any], nid: str, key: str) -> int:
        return int(view[nid]["statistics"][key]) if nid in view else 0

    assert count(after, C1, "recv_count") - count(before, C1, "recv_count") >= 16
    assert count(after, S1, "send_count") - count(before, S1, "send_count") >= 16
    assert ok(c1, "lctl", f"ping {S1}").split() == ["12345-0@lo", f"12345-{S1}"]
    assert advance_until(tb, lambda: C1 in peer_nis(s1) or None)


def test_reply_from_ipv4_to_ipv6(tb: Any) -> None:
    """The other way: s1 pings c1's large NID over its route to tcp6."""
    view = tb.node("s1").yaml(f"ping {C1}")["ping"][0]
    assert [p["nid"] for p in view["peer_ni"]] == [C1]
    res = tb.node("s1").put(C1, count=8, size=1024)
    assert res["completed"] == 8, res
