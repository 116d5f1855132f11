"""o2iblnd on the simulator (testbed/sim/o2ibsim.py), issue 28: an ``o2ib`` net runs the
emulated o2iblnd (nodes/o2ib/o2iblnd.py), not the socklnd model, and LNet works over it:
ping, discovery, PUT and GET of 1 MiB (RDMA), routing to tcp through two routers (lst brw
through them: tests/lutf/suite_o2ib, on both backends).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import testbed
from nodes.o2ib import ibfaults
from testbed.sim import SimTestbed

C1, S1_IB = "10.30.0.1@o2ib", "10.30.0.2@o2ib"
S1_TCP = "10.10.0.3@tcp"
PAIR = textwrap.dedent("""\
    name: o2pair
    global: {health_sensitivity: 100, retry_count: 2, transaction_timeout: 10}
    networks:
      ibnet: {lnet: o2ib, subnet: 10.30.0.0/24}
    nodes:
      c1: {interfaces: [ibnet], peers: [s1]}
      s1: {interfaces: [ibnet], peers: [c1]}
    """)


@pytest.fixture
def pair(tmp_path: Path) -> SimTestbed:
    (tmp_path / "o2pair.yaml").write_text(PAIR)
    tb = testbed.up(str(tmp_path / "o2pair.yaml"), backend="sim", seed=3)
    assert isinstance(tb, SimTestbed)
    return tb


def counts(tb: SimTestbed, node: str) -> dict[str, int]:
    return tb.fabric.o2ib.lnds[node].msg_counts


def test_o2ib_net_runs_o2iblnd_ping_put_get(pair: SimTestbed) -> None:
    tb = pair
    doc = tb.node("c1").lnetctl_yaml(f"ping {S1_IB}")
    assert doc["ping"][0]["peer_ni"] == [{"nid": S1_IB}]
    assert tb.node("c1").put(S1_IB, count=8, size=1 << 20)["completed"] == 8
    assert tb.node("c1").get(S1_IB, count=4, size=1 << 20)["completed"] == 4
    c, s = counts(tb, "c1"), counts(tb, "s1")
    assert c["PUT_REQ"] >= 8 and c["PUT_DONE"] >= 8 and s["PUT_ACK"] >= 8
    assert c["GET_REQ"] >= 4 and s["GET_DONE"] >= 4
    assert c["IMMEDIATE"] >= 1  # the ping's GET/REPLY are small
    assert tb.status()["nodes"]["c1"]["interfaces"]["ib0"]["nid"] == C1


def test_o2ib_discover_and_8_byte_puts(pair: SimTestbed) -> None:
    tb = pair
    doc = tb.node("c1").lnetctl_yaml(f"discover {S1_IB}")
    assert doc["discover"][0]["primary nid"] == S1_IB
    assert tb.node("c1").put(S1_IB, count=200, size=8)["completed"] == 200
    assert counts(tb, "c1")["IMMEDIATE"] >= 200
    # credits are conserved at rest: what one side may send plus what the other owes it is
    # the negotiated queue depth (the LNet ACKs carried them back; kiblnd_handle_rx)
    tb.advance(1.0)  # (the last ACKs' SENDs land)
    (pc,) = tb.fabric.o2ib.lnds["c1"].peers.values()
    (ps,) = tb.fabric.o2ib.lnds["s1"].peers.values()
    (cc,), (cs) = pc.conns, ps.conns[0]
    assert cc.credits + cs.outstanding == cc.queue_depth == 8
    assert cs.credits + cc.outstanding == 8


@pytest.mark.requirement("hlth-lnd-drain-qp")
def test_qp_error_in_sim_fails_posted_tx_remote_dropped(pair: SimTestbed) -> None:
    """A QP forced into ERROR mid-transfer flushes what was posted: each engine tx completes
    -EIO with REMOTE_DROPPED (kiblnd_tx_complete) and LNet hears the peer NI is dead
    (kiblnd_peer_notify); the next message makes a new connection and goes through."""
    tb = pair
    assert tb.node("c1").put(S1_IB, count=1, size=8)["completed"] == 1
    fab, o2 = tb.fabric, tb.fabric.o2ib
    lnd = o2.lnds["c1"]
    start = len(tb.events())
    fab.at(fab.now + 0.0025, lambda: o2.run("c1", ibfaults.qp_error(lnd)))
    assert tb.node("c1").put(S1_IB, count=4, size=1 << 20)["failed"] == 4
    done = [e for e in tb.events()[start:] if e["kind"] == "tx_done" and e["node"] == "c1"]
    assert lnd.qp_errors == 1
    assert [(e["rc"], e["hstatus"]) for e in done] == [(-5, "REMOTE_DROPPED")] * 4
    assert [(e["lpni"], e["alive"]) for e in tb.events()[start:]
            if e["kind"] == "peer_notify"] == [(S1_IB, False)]
    assert tb.node("c1").put(S1_IB, count=2, size=1 << 20)["completed"] == 2


@pytest.fixture
def routed() -> SimTestbed:
    tb = testbed.up("o2ib-tcp-routers", backend="sim", seed=5)
    assert isinstance(tb, SimTestbed)
    return tb


def test_o2ib_tcp_routers_routes_up_and_traffic_through_both(routed: SimTestbed) -> None:
    tb = routed
    routes = tb.node("c1").lnetctl_yaml("route show -v")["route"]
    assert sorted(r["state"] for r in routes) == ["up", "up"]
    assert tb.node("c1").put(S1_TCP, count=20, size=1 << 20)["completed"] == 20
    assert tb.node("c1").get(S1_TCP, count=4, size=1 << 20)["completed"] == 4
    used = {r: counts(tb, r).get("PUT_REQ", 0) for r in ("r1", "r2")}
    assert all(n > 0 for n in used.values()), used  # REPLYs come back RDMA'd via both
    assert counts(tb, "c1")["PUT_REQ"] >= 20
    gw = {str(k[1]) for k in tb.fabric.o2ib.lnds["c1"].peers}
    assert gw == {"10.40.0.3@o2ib", "10.40.0.4@o2ib"}


def test_a_restarted_node_s_new_streams_do_not_take_its_old_streams_bytes(
        pair: SimTestbed) -> None:
    """A restarted node's new o2iblnd numbers its streams from 1 again: the stream map must
    forget the old incarnation's streams (its QPs died with it), else the peer's old
    connection (its DREQ when it closes it) lands in the new connect, whose CM then refused
    it ("DREQ received in state idle") and left the peer connecting for ever. Found by
    explore on o2ib-tcp-routers (seeds 4, 15: c1 killed, its route via r1 down for good)."""
    tb = pair
    assert tb.node("c1").lnetctl_yaml(f"ping {S1_IB}")["ping"][0]["peer_ni"] == [{"nid": S1_IB}]
    assert tb.fabric.o2ib.ends  # c1's stream to s1
    tb.restart("c1")
    assert tb.node("c1").put(S1_IB, count=2, size=8)["completed"] == 2
    ends = tb.fabric.o2ib.ends
    assert any(k[0] == "c1" for k in ends)
    assert all(ends.get(v) == k for k, v in ends.items())  # every stream pairs both ways
    assert tb.fabric.o2ib.lnds["c1"].errors == []
