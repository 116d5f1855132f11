"""Bring-up in the order a real cluster comes up (issue 10 point 5), on Mininet.

A two-router topology with LNet's default tunables (alive_router_check_interval 60 s): when
routes were added node by node, a client's route could be added before its gateway's acceptor
listened, the router checker's first ping was refused (ECONNREFUSED: peer NI health 900,
``dropped: 1``), the gateway was marked down and the next check came 60 s later, so a routed
ping failed for a minute after ``testbed up`` returned. Now every node's NIs come up before
any route is added, and ``up`` returns once the routes are up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from itkit import pytestmark  # noqa: F401  (the marks)

from testbed.plan import load_topology

HERE = Path(__file__).resolve().parent
S1_TCP1 = "10.20.0.3@tcp1"
C1_TCP = "10.10.0.1@tcp"
GATEWAYS = ("10.10.0.3@tcp", "10.10.0.4@tcp")


def test_routed_ping_right_after_up_with_default_tunables(testbed_factory: Any) -> None:
    tb = testbed_factory(HERE / "routed-defaults.yaml")
    c1, s1 = tb.node("c1"), tb.node("s1")
    ping = c1.lnetctl("ping", S1_TCP1)  # the first thing after `up` returned
    assert ping.rc == 0, ping.out + ping.err
    assert s1.lnetctl("ping", C1_TCP).rc == 0
    assert tb.warnings == []
    assert all(n.module_params == () for n in load_topology(HERE / "routed-defaults.yaml").nodes)
    routes = c1.lnetctl_yaml("route", "show", "-v")["route"]
    assert sorted((r["gateway"], r["state"]) for r in routes) == [(g, "up") for g in GATEWAYS]
    for gw in GATEWAYS:  # no refused first ping: full health, nothing dropped
        (peer,) = c1.lnetctl_yaml("peer", "show", "--nid", gw, "-v", "3")["peer"]
        ni = next(p for p in peer["peer ni"] if p["nid"] == gw)
        assert (ni["health stats"]["health value"], ni["health stats"]["dropped"]) == (1000, 0)
