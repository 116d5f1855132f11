"""The DLC views of LNet's statistics and health APIs against known traffic (seed 000 dbg-080).

Real lnetctl is a front end of the kernel's APIs: ``stats show``/``stats reset`` (global
counters, spec §4.5), ``net show -v 3`` and ``peer show -v 3`` (per NI and per peer NI
counters, spec §4.6) and ``debug recovery --local|--peer`` (the recovery queues, spec §3.5).
Here a burst of PUTs whose every message is known is driven through the real daemons, and
each view must show exactly those numbers, on both ends. Module-scoped default topology.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, delta, local_nis, ok, peer_nis, reset_nodes, stats
from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

BURST = 40
SIZE = 4096


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def _sum(view: dict[str, dict[str, Any]], block: str, key: str) -> int:
    return sum(v[block][key] for v in view.values())


def _ni_counts(node: Any) -> dict[str, int]:
    view = local_nis(node)
    return {"put_sent": _sum(view, "sent_stats", "put"),
            "ack_sent": _sum(view, "sent_stats", "ack"),
            "put_rcvd": _sum(view, "received_stats", "put"),
            "ack_rcvd": _sum(view, "received_stats", "ack"),
            "send_count": _sum(view, "statistics", "send_count"),
            "recv_count": _sum(view, "statistics", "recv_count")}


def _peer_ni_counts(node: Any, prim: str) -> dict[str, int]:
    view = peer_nis(node, prim)
    return {"send_count": _sum(view, "statistics", "send_count"),
            "recv_count": _sum(view, "statistics", "recv_count")}


@pytest.mark.requirement("dbg-080", "dbg-045", "dbg-095", "dbg-100", "dbg-010", "dbg-015",
                         "dbg-050", "dbg-055", "dbg-120")
def test_stats_and_ni_views_count_a_known_burst(tb: Any) -> None:
    """``stats reset`` zeroes the global counters; after N PUTs of S bytes c1 → s1 (each
    ACKed) ``stats show`` says c1 sent N messages / N*S bytes and received N ACKs, s1 the
    reverse; the per-NI (``net show -v 3``) and per-peer-NI (``peer show -v 3``) counters
    add up to the same N on both nodes; nothing was dropped or resent."""
    reset_nodes(tb)
    c1, s1 = tb.node("c1"), tb.node("s1")
    for node, peer in ((c1, S1_NIDS[0]), (s1, C1_NIDS[0])):  # first-use work (discovery)
        ok(node, "lnetctl", f"discover {peer}")
        assert node.put(peer, count=2, size=SIZE)["completed"] == 2
    for node in (c1, s1):
        ok(node, "lnetctl", "stats reset")
        assert {k: v for k, v in stats(node).items() if v and k != "msgs_max"} == {}
    ni0 = {n.name: _ni_counts(n) for n in (c1, s1)}
    pni0 = {c1.name: _peer_ni_counts(c1, S1_NIDS[0]), s1.name: _peer_ni_counts(s1, C1_NIDS[0])}
    reply = c1.put(S1_NIDS[0], count=BURST, size=SIZE)
    assert reply["ok"] and reply["completed"] == BURST, reply
    sc, ss = stats(c1), stats(s1)
    assert (sc["send_count"], sc["send_length"], sc["recv_count"], sc["recv_length"]) == (
        BURST, BURST * SIZE, BURST, 0), sc
    assert (ss["send_count"], ss["send_length"], ss["recv_count"], ss["recv_length"]) == (
        BURST, 0, BURST, BURST * SIZE), ss
    for st in (sc, ss):
        assert st["drop_count"] == st["resend_count"] == st["errors"] == 0, st
    assert delta(_ni_counts(c1), ni0["c1"]) == {
        "put_sent": BURST, "ack_sent": 0, "put_rcvd": 0, "ack_rcvd": BURST,
        "send_count": BURST, "recv_count": BURST}
    assert delta(_ni_counts(s1), ni0["s1"]) == {
        "put_sent": 0, "ack_sent": BURST, "put_rcvd": BURST, "ack_rcvd": 0,
        "send_count": BURST, "recv_count": BURST}
    for node, prim in ((c1, S1_NIDS[0]), (s1, C1_NIDS[0])):
        assert delta(_peer_ni_counts(node, prim), pni0[node.name]) == {
            "send_count": BURST, "recv_count": BURST}
    ok(c1, "lnetctl", "stats reset")
    assert stats(c1)["send_count"] == stats(c1)["send_length"] == 0


@pytest.mark.requirement("dbg-080")
def test_debug_recovery_lists_the_queued_nis(tb: Any) -> None:
    """``debug recovery --local`` lists the local NIs in recovery, ``--peer`` the peer NIs
    (lnetctl's ``Local NI recovery`` / ``Peer NI recovery`` blocks, nothing when empty): a
    local NI whose link is down and whose health was lowered stays queued (its recovery
    pings fail), a peer NI whose health was lowered is queued until pings bring it back."""
    reset_nodes(tb)
    c1 = tb.node("c1")
    assert c1.lnetctl("debug recovery --local").out == ""
    try:
        tb.link("c1", "eth1", "down")
        wait_for(lambda: local_nis(c1)[C1_NIDS[1]]["status"] == "down", 10)
        ok(c1, "lnetctl", f"net set --nid {C1_NIDS[1]} --health 300")
        ok(c1, "lnetctl", f"peer set --nid {S1_NIDS[1]} --health 300")
        local = c1.yaml("debug recovery --local")
        assert list(local["Local NI recovery"].values()) == [C1_NIDS[1]], local
        assert local_nis(c1)[C1_NIDS[1]]["health stats"]["health value"] == 300
        peer = c1.yaml("debug recovery --peer")
        assert S1_NIDS[1] in peer["Peer NI recovery"].values(), peer
    finally:
        tb.link("c1", "eth1", "up")
        reset_nodes(tb)  # health back to 1000: the NI is up once its carrier is seen
        wait_for(lambda: local_nis(c1)[C1_NIDS[1]]["status"] == "up", 10)


    def queue_empty() -> bool:
        tb.advance(0.2)  # the next recovery pass drops healthy NIs (virtual time on sim)
        return c1.lnetctl("debug recovery --local").out == ""

    wait_for(queue_empty, 10, message="local recovery queue empty again")
