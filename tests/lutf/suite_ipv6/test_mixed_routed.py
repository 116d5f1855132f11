"""Routes between an IPv6 net and an IPv4 net (issue 26 item 8), and what today's LNet
carries across them.

topologies/mixed-v4v6-routed.yaml: c1 2001:db8:16::1@tcp6 (IPv6 only, large NID) -- r1
(2001:db8:16::2@tcp6 and 10.40.0.1@tcp, routing) -- s1 10.40.0.2@tcp (IPv4 only). The socklnd
protocol follows the socket's address family (socklnd.c ``ksocknal_create_conn``): r1 speaks
V4 (``lnet_hdr_nid16``) to c1 and V3 (``lnet_hdr_nid4``) to s1, and a V3 header holds a large
NID only as ``lnet_nid_to_nid4`` (its net and first 32 bits): a message between c1 and s1
crosses the V3 hop with c1's NID cut to ``32.1.13.184@tcp6``, and the reply goes nowhere.
Both backends do exactly that (the simulator's fabric applies ``wire6.v3_view`` on an IPv4
hop). What works across the families is every path whose V3 hops carry only nid4s. One
module testbed.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import advance_until, ok, peer_nis

pytestmark = [pytest.mark.mininet, pytest.mark.topology("mixed-v4v6-routed"),
              pytest.mark.xdist_group("suite_ipv6_mixed")]

C1, R1_V6, R1_V4, S1 = ("2001:db8:16::1@tcp6", "2001:db8:16::2@tcp6", "10.40.0.1@tcp",
                        "10.40.0.2@tcp")
C1_CUT = "32.1.13.184@tcp6"  # lnet_nid_to_nid4(2001:db8:16::1@tcp6): 0x20010db8


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def _route_state(node: Any, net: str) -> str:
    view = node.yaml("route show -v") or {"route": []}
    return next(str(r["state"]) for r in view["route"] if r["net"] == net)


def test_routes_up_across_families(tb: Any) -> None:
    """c1's route to tcp through r1's large NID and s1's route to tcp6 through r1's IPv4 NID
    are both up: the router checker pings its gateway directly (one V4, one V3 hop)."""
    assert _route_state(tb.node("c1"), "tcp") == "up"
    assert _route_state(tb.node("s1"), "tcp6") == "up"


def test_router_ping_buffer_lists_both_families(tb: Any) -> None:
    """r1's buffer: its IPv4 NID in the fixed entries, its large NID in the large-address
    section, PRIMARY_LARGE (its first NI is large); either side reads both."""
    for node, target in (("c1", R1_V6), ("s1", R1_V4)):
        view = tb.node(node).yaml(f"ping {target}")["ping"][0]
        assert view["primary nid"] == R1_V6, view
        assert sorted(p["nid"] for p in view["peer_ni"]) == sorted([R1_V6, R1_V4])


def test_ipv6_node_reaches_the_routers_ipv4_nid_through_the_route(tb: Any) -> None:
    """c1 -> 10.40.0.1@tcp goes through the route to tcp (gateway r1, a V4 hop, which carries
    a nid4 destination whole): PUTs complete and ``lctl ping`` lists r1's NIDs."""
    c1 = tb.node("c1")
    res = c1.put(R1_V4, count=8, size=4096)
    assert res["completed"] == 8, res
    assert sorted(ok(c1, "lctl", f"ping {R1_V4}").split()) == sorted(
        ["12345-0@lo", f"12345-{R1_V6}", f"12345-{R1_V4}"])


def test_large_source_cut_on_the_ipv4_hop(tb: Any) -> None:
    """c1 -> s1: r1 forwards the PUT over V3, where ``lnet_hdr_to_nid4`` cuts c1's NID to
    32.1.13.184@tcp6; s1 receives it from that NID and its ACK has no way back, so the PUTs
    fail (timed out) -- today's LNet needs large NIDs on every hop of such a path."""
    c1, s1 = tb.node("c1"), tb.node("s1")
    res = c1.put(S1, count=2, size=1024)
    assert res["completed"] == 0 and res["failed"] == 2, res
    seen = advance_until(tb, lambda: set(peer_nis(s1)) or None, what="s1's peers")
    assert C1_CUT in seen and C1 not in seen, seen
