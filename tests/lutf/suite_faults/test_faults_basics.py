"""Faults on the wire while traffic runs (ARCHITECTURE "faults"; seed 003 hlth-dbg-*).

The fault API (``tb.fault``) is being added to ``testbed.api``; tests that need it use the
``lnet_fault`` fixture, which skips until it exists. Link flaps use ``tb.link`` today.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from lutf.lnet_views import S1_NIDS, peer_nis
from testbed.pytest.plugin import Traffic

pytestmark = [pytest.mark.mininet, pytest.mark.slow, pytest.mark.topology("short_timeouts.yaml")]


@pytest.mark.requirement("hlth-lnt-flapping", "hlth-lnt-decrement", "snd-050")
def test_traffic_survives_a_link_flap(topology: Any) -> None:
    """While a PUT stream runs, c1's eth1 goes down for a second and comes back: LNet keeps
    the stream going over the other rail (resends, health-based selection) and the flapped
    rail's peer NI is left less healthy, so it is favoured less (seed 003)."""
    c1 = topology.node("c1")
    with Traffic(c1, S1_NIDS[0], burst=20) as traffic:
        time.sleep(0.3)
        topology.link("c1", "eth1", "down")
        time.sleep(1.0)
        topology.link("c1", "eth1", "up")
        time.sleep(0.3)
    totals = traffic.totals()
    assert not totals["problems"], totals
    assert totals["completed"] >= 0.75 * totals["sent"] > 0, totals
    assert peer_nis(c1)[S1_NIDS[1]]["health stats"]["health value"] < 1000
    kinds = [e["kind"] for e in topology.events()]
    assert kinds.index("link_down") < kinds.index("link_up")


@pytest.mark.requirement("hlth-dbg-sim-network-timeout")
@pytest.mark.namespace_only("a loss rule needs the NFQUEUE interposer beside the node")
def test_dropped_puts_lower_peer_health(topology: Any, lnet_fault: Any) -> None:
    """A wire rule dropping every PUT from c1 on rail 1 makes those sends time out; LNet
    lowers that peer NI's health (seed 003 debugging hooks: simulate a network timeout)."""
    fault = lnet_fault(topology)  # skips while testbed.api.Testbed.fault does not exist
    rule = fault.loss(node="c1", iface="eth1", direction="out", rate=1.0,
                      match={"proto": "lnet", "type": "PUT"})
    try:
        reply = topology.node("c1").put(S1_NIDS[0], count=50, size=4096)
    finally:
        fault.delete(rule["id"])
    assert reply["ok"], reply
    assert peer_nis(topology.node("c1"))[S1_NIDS[1]]["health stats"]["health value"] < 1000
