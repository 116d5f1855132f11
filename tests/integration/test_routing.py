"""Routing on the real thing (seed 001, seed 002 rtr-*, spec §6): the example topologies
topologies/routed.yaml, multihop.yaml and mr-routers.yaml brought up with Mininet, real
socklnd connections, routers forwarding through their buffers.

Timing: the example topologies ping gateways every alive_router_check_interval = 5 s, so a
dead far side is seen within seconds; ``testbed up`` returns with the routes up (bring-up
order, test_bringup_order.py), and each test still checks them first (bounded).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from itkit import pytestmark  # noqa: F401  (the marks)

from testbed.mininet import MininetNode, MininetTestbed

TOPO = Path(__file__).resolve().parents[2] / "topologies"
CHECK_INTERVAL = 5.0  # alive_router_check_interval of the example topologies
ROUTE_BOUND = 3 * CHECK_INTERVAL + 2


def routes(node: MininetNode) -> dict[tuple[str, str], dict[str, Any]]:
    view = node.lnetctl_yaml("route", "show", "-v")
    return {(r["net"], r["gateway"]): r for r in (view or {}).get("route", [])}


def wait_routes(node: MininetNode, want: str = "up", n: int | None = None,
                bound: float = ROUTE_BOUND) -> dict[tuple[str, str], dict[str, Any]]:
    end = time.monotonic() + bound
    while True:
        shown = routes(node)
        states = [r["state"] for r in shown.values()]
        if states and (all(s == want for s in states) if n is None
                       else states.count(want) >= n):
            return shown
        if time.monotonic() > end:
            raise AssertionError(f"{node.name}: routes not {want} within {bound}s: {shown}")
        time.sleep(0.25)


def route_count(node: MininetNode) -> int:
    return int(node.lnetctl_yaml("stats", "show")["statistics"]["route_count"])


def nid_of(tb: MininetTestbed, node: str, net: str) -> str:
    nids = [ni["nid"] for n in tb.node(node).lnetctl_yaml("net", "show")["net"]
            if n["net type"] == net for ni in n["local NI(s)"]]
    assert nids, (node, net)
    return nids[0]


def test_routed_traffic_shared_then_moves_off_a_dead_router(testbed_factory: Any) -> None:
    """rtr-multi-gw, rtr-route-down, rtr-gw-asym: c1 -> s1 across r1 and r2 uses both; when
    r1's far-side (tcp1) link dies, r1 reports that NI DOWN in its ping, c1's route through
    r1 shows ``state: down`` in ``route show -v`` and every later PUT goes through r2."""
    tb = testbed_factory(TOPO / "routed.yaml")
    c1, r1, r2 = tb.node("c1"), tb.node("r1"), tb.node("r2")
    s1 = nid_of(tb, "s1", "tcp1")
    for name in ("c1", "s1"):
        wait_routes(tb.node(name))
    b1, b2 = route_count(r1), route_count(r2)
    res = c1.put(s1, count=200, size=4096)
    assert res["completed"] == 200 and res["failed"] == 0, res
    d1, d2 = route_count(r1) - b1, route_count(r2) - b2
    assert d1 >= 100 and d2 >= 100 and d1 + d2 >= 400, (d1, d2)  # PUTs and ACKs, shared

    r1_tcp = nid_of(tb, "r1", "tcp")
    tb.link("r1", "eth1", "down")
    t0 = time.monotonic()
    shown = wait_routes(c1, "down", n=1)
    assert shown[("tcp1", r1_tcp)]["state"] == "down", shown
    assert [r["state"] for k, r in shown.items() if k[1] != r1_tcp] == ["up"]
    assert time.monotonic() - t0 < 2 * CHECK_INTERVAL + 2
    b1, b2 = route_count(r1), route_count(r2)
    res = c1.put(s1, count=200, size=4096)
    assert res["completed"] == 200 and res["failed"] == 0, res
    assert route_count(r1) == b1 and route_count(r2) - b2 >= 200
    g = c1.lnetctl_yaml("global", "show")["global"]
    assert g["retry_count"] >= 1

    tb.link("r1", "eth1", "up")
    wait_routes(c1, "up")


def test_multihop_delivery(testbed_factory: Any) -> None:
    """Spec §6.6: c1 (tcp) -> r1 -> r2 -> s1 (tcp2) and back; the hop-2 route is multi-hop
    and not subject to the asym remote-net check."""
    tb = testbed_factory(TOPO / "multihop.yaml")
    c1, r1, r2 = tb.node("c1"), tb.node("r1"), tb.node("r2")
    for name in ("c1", "r1", "r2", "s1"):
        wait_routes(tb.node(name))
    s1 = nid_of(tb, "s1", "tcp2")
    b1, b2 = route_count(r1), route_count(r2)
    res = c1.put(s1, count=50, size=65536)
    assert res["completed"] == 50 and res["failed"] == 0, res
    assert route_count(r1) - b1 >= 100 and route_count(r2) - b2 >= 100
    shown = routes(c1)
    far = shown[("tcp2", nid_of(tb, "r1", "tcp"))]
    assert (far["hop"], far["type"], far["state"]) == (2, "multi-hop", "up")
    ping = c1.lnetctl("ping", s1)
    assert ping.rc == 0, ping.err


def test_mr_routers_spread_over_gateway_nis(testbed_factory: Any) -> None:
    """rtr-discover-first-use, rtr-select-hops-priority: routes name one NID per router;
    discovery finds the routers' other NIs and c1 spreads its sends over both NIs of each
    gateway on tcp (the Multi-Rail choice among the gateway's NIs)."""
    tb = testbed_factory(TOPO / "mr-routers.yaml")
    c1 = tb.node("c1")
    for name in ("c1", "s1"):
        wait_routes(tb.node(name))
    s1 = nid_of(tb, "s1", "tcp1")
    res = c1.put(s1, count=400, size=4096)
    assert res["completed"] == 400 and res["failed"] == 0, res
    peers = c1.lnetctl_yaml("peer", "show", "-v")["peer"]
    used = 0
    for rname in ("r1", "r2"):
        prim = nid_of(tb, rname, "tcp")
        peer = next(p for p in peers if p["primary nid"] == prim)
        nis = {p["nid"]: p["statistics"]["send_count"] for p in peer["peer ni"]}
        assert len(nis) == 4, nis  # discovered: two NIs per side
        tcp_sends = [v for k, v in nis.items() if k.endswith("@tcp")]
        assert all(v > 0 for v in tcp_sends), nis
        used += sum(tcp_sends)
    assert used >= 400
