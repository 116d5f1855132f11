"""Health checks of forwarded messages on topologies/routed.yaml (issue 26 item 6): lib-msg.c
``lnet_health_check`` runs once for a message committed for both directions, on the send
side, so a router forwarding c1's PUT does not touch c1's peer NI health on receipt.

The test changes tunables and drop rules of several nodes: it gets its own testbed.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import ok, peer_nis

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed")]



def _rx_gets(node: Any) -> int:
    view = node.yaml("net show -v 2")
    return sum(ni["received_stats"]["get"] for net in view["net"] if net["net type"] != "lo"
               for ni in net["local NI(s)"])


@pytest.mark.requirement("rtr-router-peer-up-rx", "hlth-lnt-peer-ni-health")
def test_forwarding_leaves_the_senders_health_alone(topology: Any) -> None:
    """Both routers hold c1's peer NI at 500, and nothing else reaches them from c1: c1's
    router checker waits an hour, the routers drop the ACKs and REPLYs s1 sends back as they
    arrive (forwarding one to c1 would restore it, as in real LNet), ``net_drop_add -m``,
    and ``recovery_limit 1`` ages c1's peer NI out of recovery. c1 then pings s1: the
    router that forwards the GET leaves c1's peer NI at 500 (before, the receipt's own
    health check set it to 1000, as a router does for a peer NI it hears from)."""
    c1, s1 = topology.node("c1"), topology.node("s1")
    (C1,), (S1,) = c1.lctl("list_nids").out.split(), s1.lctl("list_nids").out.split()
    routers = [topology.node("r1"), topology.node("r2")]
    ok(c1, "lnetctl", "set alive_router_check_interval 3600")
    assert c1.put(S1, count=4, size=0)["completed"] == 4  # peers and routes settled
    for r in routers:
        ok(r, "lnetctl", "set alive_router_check_interval 3600")
        ok(r, "lnetctl", "set recovery_limit 1")
        for mtype in ("ack", "reply"):
            ok(r, "lctl", f"net_drop_add -s {S1} -d * -m {mtype} -r 1")
    topology.advance(7.0)  # past a gateway ping c1 had armed (every 5 s in routed.yaml)
    for r in routers:
        ok(r, "lnetctl", f"peer set --nid {C1} --health 500")
    before = _rx_gets(s1)
    try:
        # lnetctl ping: a GET through a router, its REPLY dropped there; the caller gives up
        # after 1 s, before any recovery or response timeout could move c1's health
        assert c1.lnetctl(f"ping --timeout 1 {S1}").rc != 0
        assert _rx_gets(s1) == before + 1  # forwarded
        health = [peer_nis(r)[C1]["health stats"]["health value"] for r in routers]
        assert health == [500, 500], health
    finally:
        for r in routers:
            ok(r, "lctl", "net_drop_del -a")
