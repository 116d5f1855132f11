"""Peer NI / gateway / route aliveness: ``lnet_notify``, the LNet -> LND "peer NI dead" call,
the transition tables, MR forwarding on the final hop, routes on peer consolidation (seed 001,
seed 002 rtr-*, spec §6.3/§6.4; nodes/lnet/rtralive.py, rtrstate.py, rtrpool.py).

Engines run with discovery on, LNet's default (``lnet_peer_discovery_disabled=0``, spec §5):
routers and destinations are discovered on first use, as on a real node.
"""

from __future__ import annotations

import itertools

import pytest

from nodes.lnet.actions import NotifyPeerDown, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.events import MessageReceived, PeerNotify, TxCompleted
from nodes.lnet.faultrule import MSG_BITS, FaultAttr
from nodes.lnet.hdr import (
    LNET_PID_LUSTRE,
    LNET_RESERVED_PORTAL,
    LNetHdr,
    MsgType,
    WireHandle,
)
from nodes.lnet.hstatus import HStatus
from nodes.lnet.lpstate import DISCOVERED, NIDS_UPTODATE
from nodes.lnet.lpstate import ROUTER_ENABLED as LNET_PEER_ROUTER_ENABLED
from nodes.lnet.nid import NID, Net
from nodes.lnet.rtrstate import MACHINES, RouterStateError, step
from testbed.sim.fabric import Fabric

TCP, TCP1 = Net.parse("tcp"), Net.parse("tcp1")
C1 = NID.parse("10.10.0.1@tcp")
R1 = [NID.parse("10.10.0.11@tcp"), NID.parse("10.20.0.11@tcp1")]
S1 = [NID.parse("10.20.0.1@tcp1"), NID.parse("10.21.0.1@tcp1")]
PORTAL = 52


def _eng(inc: int, nids: list[NID]) -> LNetEngine:
    eng = LNetEngine(incarnation=inc)
    eng.configure()
    for i, nid in enumerate(nids):
        eng.net_add(nid.net, f"eth{i}", nid)
    eng.attach_me(PORTAL, 0, 2**64 - 1)
    return eng


def _client_with_gateway() -> LNetEngine:
    """c1 with a route to tcp1 through r1, whose ping showed both its NIs and routing on."""
    c = _eng(1, [C1])
    c.router.add(TCP1, R1[0], 1, 0, 0.0)
    gw = c.router.checker.consolidate(c.peers.find_peer(R1[0]), R1)  # type: ignore[arg-type]
    gw.state |= LNET_PEER_ROUTER_ENABLED
    c.router.discovered.update(R1)
    return c


# ------------------------------------------------------------------ transition tables
@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_every_state_input_pair_has_a_transition(machine: str) -> None:
    """STYLE rule 2: every (state, input) of each aliveness machine is defined; an unknown
    input raises the local protocol error."""
    table, inputs = MACHINES[machine]
    states = {s for s, _ in table} | {n for _, n in table.values()}
    for state, event in itertools.product(states, inputs):
        _effect, nxt = step(machine, state, event)
        assert nxt in states
    with pytest.raises(RouterStateError):
        step(machine, next(iter(states)), "no-such-input")


def test_tables_say_what_seed_002_says() -> None:
    """rtr-gw-up: an unsolicited message revives a dead gateway; rtr-gw-down: a failed ping
    kills it; rtr-gw-asym: a reply without an UP remote NI takes a single-hop route down;
    only an UP->DOWN notification calls the LND (``lnd_notify_peer_down``)."""
    assert step("gateway", "dead", "rx") == (None, "alive")
    assert step("gateway", "alive", "ping_failed")[1] == "dead"
    assert step("gateway", "alive", "ping_reply_rte_disabled")[1] == "disabled"
    assert step("route", "up", "ping_remote_down")[1] == "down"
    assert step("lpni", "up", "notify_dead") == ("lnd_notify_peer_down", "down")
    assert step("lpni", "down", "notify_dead") == (None, "down")


# ------------------------------------------------------------------ lnet_notify
def test_lnd_notify_dead_then_alive_moves_gateway_ni_and_route() -> None:
    """rtr-mr-lnd-notify: the LND's death notice marks the gateway peer NI down (``state:``
    in ``peer show``), so the route is down (rtr-route-down); LNet passes it back to the LND
    once (NotifyPeerDown); an alive notice brings both back."""
    c = _client_with_gateway()
    route = c.router.all_routes()[0]
    assert c.router.route_alive(route)
    acts = c.handle(PeerNotify(ni=C1, nid=R1[0], alive=False), 5.0)
    assert [a for a in acts if isinstance(a, NotifyPeerDown)] == [NotifyPeerDown(lpni=R1[0])]
    assert c.view("peer", nid=str(R1[0]))["peer"][0]["peer ni"][0]["state"] == "down"
    assert not c.router.route_alive(route)
    again = c.handle(PeerNotify(ni=C1, nid=R1[0], alive=False), 6.0)  # old news
    assert not [a for a in again if isinstance(a, NotifyPeerDown)]
    c.handle(PeerNotify(ni=C1, nid=R1[0], alive=True), 7.0)
    assert c.router.route_alive(route)
    assert c.view("peer", nid=str(R1[0]))["peer"][0]["peer ni"][0]["state"] == "up"


def test_lnd_notify_reset_fully_recovers_health() -> None:
    """rtr-mr-lnd-notify: ``reset`` forces LNet to recover the peer NI's health to 1000;
    without it health is left alone."""
    c = _client_with_gateway()
    lpni = c.peers.find_lpni(R1[0])
    assert lpni is not None
    lpni.healthv = 300
    c.handle(PeerNotify(ni=C1, nid=R1[0], alive=True), 1.0)
    assert lpni.healthv == 300
    c.handle(PeerNotify(ni=C1, nid=R1[0], alive=True, reset=True), 2.0)
    assert lpni.healthv == 1000


def test_lnd_notify_ignores_other_net_future_and_stale() -> None:
    """router.c ``lnet_notify``: a notice about another net's NID or from the future is
    ignored; one older than the last is out of date."""
    c = _client_with_gateway()
    lpni = c.peers.find_lpni(R1[0])
    assert lpni is not None
    logs = c.handle(PeerNotify(ni=R1[1], nid=R1[0], alive=False), 5.0)
    assert "different net" in str(logs) and lpni.ns_status == 0x15AAC0DE
    c.handle(PeerNotify(ni=C1, nid=R1[0], alive=False, when=9.0), 5.0)
    assert lpni.ns_status == 0x15AAC0DE
    c.handle(PeerNotify(ni=C1, nid=R1[0], alive=False, when=4.0), 5.0)
    c.handle(PeerNotify(ni=C1, nid=R1[0], alive=True, when=3.0), 5.0)  # out of date
    assert lpni.ns_status == 0xDEADFACE


def test_health_below_router_sensitivity_tells_the_lnd() -> None:
    """rtr-mr-notify-dead: a gateway peer NI whose health drops below MAX_HEALTH *
    router_sensitivity% makes LNet call the LND (NotifyPeerDown), once per crossing."""
    c = _client_with_gateway()
    c.set_tunable("router_sensitivity", 50)
    c.set_tunable("health_sensitivity", 300)
    downs = []
    for i in range(3):
        _h, acts = c.get(float(i), R1[0], length=16, portal=0, match_bits=1 << 63,
                         recovery=True)  # a failing GET to the gateway NI itself
        tx = next(a for a in acts if isinstance(a, Transmit))
        acts = c.handle(TxCompleted(tx_id=tx.tx_id, rc=-5, hstatus=HStatus.REMOTE_ERROR),
                        float(i))
        downs.append([a for a in acts if isinstance(a, NotifyPeerDown)])
        c.peers.find_lpni(R1[0]).ns_status = 0x15AAC0DE  # type: ignore[union-attr]
    # 1000 -> 700 (>= 500), 700 -> 400 (crossed), 400 -> 100 (already below)
    assert [len(d) for d in downs] == [0, 1, 0]


# ------------------------------------------------------------------ on the fabric
def _routed(s_nids: list[NID] = S1) -> Fabric:
    """c1 (tcp) -- r1 (tcp, tcp1) -- s1 (two NIs on tcp1, MR, unless ``s_nids``)."""
    fab = Fabric()
    fab.add("c1", _eng(1, [C1]))
    r = fab.add("r1", _eng(2, R1))
    fab.add("s1", _eng(3, s_nids))
    fab.apply("r1", r.set_tunable("forwarding", 1, 0.0))
    for name in ("c1", "s1"):
        fab.engines[name].set_tunable("alive_router_check_interval", 5)
    fab.call("c1", fab.engines["c1"].router.add, TCP1, R1[0], 1, 0, 0.0)
    fab.call("s1", fab.engines["s1"].router.add, TCP, R1[1], 1, 0, 0.0)
    return fab


def _put(fab: Fabric, dst: NID, n: int = 1, run: float = 2.0) -> list[tuple[str, int]]:
    eng = fab.engines["c1"]
    hs = [fab.call("c1", eng.put, fab.now, dst, payload=b"x" * 8, portal=PORTAL)
          for _ in range(n)]
    fab.run_until(fab.now + run)
    return [(e.kind, e.status) for e in fab.events["c1"] if e.handle in hs and e.unlinked]


def test_fabric_notifies_gateway_down_and_router_queries_down_peer() -> None:
    """rtr-gw-down-on-fail / rtr-router-no-send-down / rtr-router-query-down /
    rtr-router-peer-up-rx on the sim fabric: s1's NI gone -> the router's tx fails, the LND
    notifies it dead; later forwards to it are dropped without a tx, and it is queried at most
    once a second; when it is back the query's REPLY marks it up and forwarding resumes."""
    fab = _routed(s_nids=S1[:1])
    assert _put(fab, S1[0]) == [("ACK", 0)]
    r = fab.engines["r1"]
    fab.set_link(S1[0], False)
    _put(fab, S1[0], run=1.0)
    lpni = r.peers.find_lpni(S1[0])
    assert lpni is not None and lpni.ns_status == 0xDEADFACE
    sent = len([t for t in fab.transmits if t[1] == "r1" and t[2].lpni == S1[0]
                and t[2].hdr.ptl_index == PORTAL])
    drops = r.counters.values["drop_count"]
    _put(fab, S1[0], n=3, run=3.2)
    assert r.counters.values["drop_count"] >= drops + 3
    queries = [t for t in fab.transmits[:] if t[1] == "r1" and t[2].lpni == S1[0]
               and t[2].hdr.type == MsgType.GET]
    assert 1 <= len(queries) <= 4  # at most once a second while traffic waits
    assert len([t for t in fab.transmits if t[1] == "r1" and t[2].lpni == S1[0]
                and t[2].hdr.ptl_index == PORTAL]) == sent  # no forward tried
    fab.set_link(S1[0], True)
    _put(fab, S1[0], run=2.5)  # dropped, but it wants a query; the REPLY marks it up
    assert lpni.ns_status == 0x15AAC0DE
    assert _put(fab, S1[0]) == [("ACK", 0)]


def test_mr_forwarding_on_the_final_hop() -> None:
    """``lnet_mr_forwarding_allowed``: originator and destination Multi-Rail, the addressed
    NI down -> the router delivers to the destination's other NI (header dest_nid too)."""
    fab = _routed()
    assert _put(fab, S1[0], run=3.0) == [("ACK", 0)]
    r = fab.engines["r1"]
    s1_peer = r.peers.find_peer(S1[0])
    c1_peer = r.peers.find_peer(C1)
    assert s1_peer is not None and s1_peer.multi_rail and len(s1_peer.lpnis) == 2
    assert c1_peer is not None and c1_peer.multi_rail
    r.handle(PeerNotify(ni=R1[1], nid=S1[0], alive=False), fab.now)
    mark = len(fab.transmits)
    assert _put(fab, S1[0]) == [("ACK", 0)]
    fwd = [t for _, n, t in fab.transmits[mark:] if n == "r1" and t.hdr.ptl_index == PORTAL]
    assert fwd and all(t.lpni == S1[1] and t.hdr.dest_nid == S1[1] for t in fwd)


def test_router_discovers_the_final_destination_on_first_forward() -> None:
    """``lnet_select_pathway`` runs the discovery gate for a forwarded message too (spec §2.2
    step 5; ``lnet_msg_discovery`` only spares responses and the reserved portal): r1 pings
    s1 itself (from its own NID) and holds c1's PUT until that discovery completes, so it
    learns s1 as Multi-Rail with both NIDs. r1 drops every push s1 sends it (an LNet drop
    rule on PUTs to portal 0), so what r1 knows of s1 comes from its own discovery."""
    fab = _routed()
    r = fab.engines["r1"]
    r.faults.add("drop", FaultAttr(src=S1[0], dst=None, rate=1, msg_mask=MSG_BITS["put"],
                                   ptl_mask=1 << LNET_RESERVED_PORTAL), 0.0)
    fab.run_until(1.0)
    known = r.peers.find_peer(S1[0])
    assert known is None or not known.state & DISCOVERED
    mark = len(fab.transmits)
    assert _put(fab, S1[0]) == [("ACK", 0)]
    to_s1 = [(t.hdr.type, t.hdr.ptl_index, t.hdr.src_nid)
             for _, n, t in fab.transmits[mark:] if n == "r1" and t.lpni in S1]
    own_ping, fwd = (MsgType.GET, LNET_RESERVED_PORTAL, R1[1]), (MsgType.PUT, PORTAL, C1)
    assert own_ping in to_s1 and fwd in to_s1, to_s1
    assert to_s1.index(own_ping) < to_s1.index(fwd), to_s1
    peer = r.peers.find_peer(S1[0])
    assert peer is not None and peer.multi_rail and {p.nid for p in peer.lpnis} == set(S1)


@pytest.mark.requirement("rtr-mr-no-unhealthy")
def test_resent_forwarded_put_is_re_aimed_at_a_healthier_ni() -> None:
    """``lnet_resend_msg_locked`` -> ``lnet_send``: a resend runs ``lnet_select_pathway`` again
    for the header's dest_nid, so ``lnet_mr_forwarding_allowed`` applies per attempt (spec
    §2.2 step 6, §3.3): the addressed NI of MR s1 is healthy when r1 first forwards, its send
    fails (REMOTE_DROPPED lowers its health), and the resend goes to s1's other NI."""
    fab = _routed()
    assert _put(fab, S1[0], run=3.0) == [("ACK", 0)]
    r = fab.engines["r1"]
    r.set_tunable("health_sensitivity", 100)
    # every PUT r1 sends to s1's first NI fails in the LND with REMOTE_DROPPED (spec §8.2)
    r.faults.add("drop", FaultAttr(src=None, dst=S1[0], rate=1, msg_mask=MSG_BITS["put"],
                                   health_mask=1 << HStatus.REMOTE_DROPPED), fab.now)
    mark = len(fab.transmits)
    assert _put(fab, S1[0]) == [("ACK", 0)]
    fwd = [t for _, n, t in fab.transmits[mark:] if n == "r1" and t.hdr.ptl_index == PORTAL]
    assert [(t.lpni, t.hdr.dest_nid, t.hdr.src_nid) for t in fwd] == [(S1[1], S1[1], C1)]
    assert r.counters.values["resend_count"] == 1


def test_routes_and_parked_sends_follow_a_merged_gateway() -> None:
    """002 "Router Discovery" consolidation: routes added through two NIDs of one router are
    two gateway peers until discovery merges them; a send parked on the discovery of one of
    them is redone and delivered through the merged gateway, which carries both routes."""
    fab = _routed()
    c, r = fab.engines["c1"], fab.engines["r1"]
    r_extra = NID.parse("10.10.0.12@tcp")  # a second NID of r1 on c1's net
    r.net_add(TCP, "eth9", r_extra)
    fab.refresh()
    c.router.delete(TCP1, R1[0])
    fab.call("c1", c.router.add, Net.parse("tcp9"), R1[0], None, 0, fab.now)  # multi-hop
    fab.call("c1", c.router.add, TCP1, r_extra, 1, 0, fab.now)
    assert len([p for p in c.peers.peers if p.rtr_refcount]) == 2
    assert _put(fab, S1[0], run=3.0) == [("ACK", 0)]  # parked on r_extra's discovery
    gws = [p for p in c.peers.peers if p.rtr_refcount]
    assert len(gws) == 1 and gws[0].rtr_refcount == 2
    assert {p.nid for p in gws[0].lpnis} >= {R1[0], r_extra, R1[1]}
    assert {x["gateway"]: x["state"] for x in c.router.route_show(verbose=1)["route"]} == {
        str(R1[0]): "up", str(r_extra): "up"}
    assert c.router.table.is_discovered(gws[0]) and not c.router.pending


def test_router_retransmits_a_forwarded_message_over_another_local_ni() -> None:
    """hlth-lnt-router-any-ni: a forwarded message whose tx failed on one of the router's
    local NIs is resent from another of its NIs (routers may use any local NI)."""
    r_nids = [R1[0], R1[1], NID.parse("10.21.0.11@tcp1")]
    r = _eng(2, r_nids)
    r.set_tunable("health_sensitivity", 100)
    r.set_tunable("forwarding", 1, 0.0)
    r.set_tunable("retry_count", 2)
    s1 = r.peers.traffic_add(S1[0], 8).peer  # as a completed discovery round leaves it
    s1.state |= DISCOVERED | NIDS_UPTODATE
    hdr = LNetHdr(dest_nid=S1[0], src_nid=C1, dest_pid=LNET_PID_LUSTRE,
                  src_pid=LNET_PID_LUSTRE, type=MsgType.PUT, payload_length=4,
                  wmd=WireHandle(1, 1), match_bits=1, ptl_index=PORTAL)
    acts = r.handle(MessageReceived(ni=R1[0], peer_nid=C1, hdr=hdr, payload=b"abcd"), 0.0)
    first = next(a for a in acts if isinstance(a, Transmit))
    acts = r.handle(TxCompleted(tx_id=first.tx_id, rc=-4, hstatus=HStatus.LOCAL_DROPPED), 0.1)
    again = [a for a in acts if isinstance(a, Transmit)]
    assert len(again) == 1 and again[0].ni != first.ni and again[0].lpni == S1[0]
    assert again[0].hdr.src_nid == C1  # the originator's source stays
