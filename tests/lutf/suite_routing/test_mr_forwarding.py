"""MR forwarding on the final hop (``lnet_mr_forwarding_allowed``, lib-move.c; spec §2.2 step 6,
§6.6) on ``mr-forwarding.yaml`` next to this file.

Real LNet: a router forwarding a PUT/GET to a node on one of its local nets normally honours the
peer NI the originator chose (NMR_DST). Only when the originator's peer is Multi-Rail on the
router, the destination peer is Multi-Rail (the router learnt both by discovery) and the
addressed peer NI is not alive or below full health, the router runs the Multi-Rail selection
over the destination's NIs (MR_DST, ``lnet_handle_any_mr_dsta``) and delivers to the healthiest
one; the header's dest_nid follows. ACKs and REPLYs always go to the addressed NI (SND_RESP).

c1 (Multi-Rail, always addresses s1's eth0 NID through a UDSP ``--dst`` rule) and c2 (non
Multi-Rail) -- r1 (one NI on tcp, two on tcp1) -- s1 (two NIs on tcp1). r1 lowers the health of
s1's eth0 NID with ``lnetctl peer set --health 0``; an LNet fault rule on r1 fails its GETs to
that NID, so the recovery pings cannot bring it back (on a router any message received from a
peer NI restores full health, spec §3.1) until the rule goes. No link changes (a link down on
s1 would also break the reverse path, see test_mr_routers.py). Waiting uses ``tb.advance``.
One testbed for the module; each test puts r1's rules and health back.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lutf.lnet_views import advance_until as _until
from lutf.lnet_views import local_nis, ok, peer_nis

pytestmark = [pytest.mark.mininet, pytest.mark.topology("mr-forwarding.yaml")]

C1, C2 = "10.10.0.1@tcp", "10.10.0.3@tcp"
S1A, S1B = "10.20.0.2@tcp1", "10.21.0.2@tcp1"
N = 40



def _routes_up(tb: Any, name: str) -> None:
    def up() -> bool:
        view = tb.node(name).yaml("route show -v") or {"route": []}
        return bool(view["route"]) and all(r["state"] == "up" for r in view["route"])
    _until(tb, up, 20, f"routes of {name} up")


def _peer(node: Any, nid: str) -> dict[str, Any] | None:
    """The ``peer show --nid`` block of ``nid``'s peer; None while the node has none."""
    import yaml

    res = node.lnetctl(f"peer show --nid {nid}")
    if res.rc != 0:
        return None
    (peer,) = yaml.safe_load(res.out)["peer"]
    return dict(peer)


def _r1_knows_mr_peers(r1: Any) -> bool:
    """r1 knows c1 and s1 (both NIDs) as Multi-Rail: s1 by r1's own discovery, run by the
    discovery gate for the first PUT it forwards to s1 (``lnet_select_pathway``, spec §2.2
    step 5), or from s1's push; c1 from c1's push."""
    s1, c1 = _peer(r1, S1A), _peer(r1, C1)
    return bool(s1 and c1 and s1["Multi-Rail"] and c1["Multi-Rail"]
                and {p["nid"] for p in s1["peer ni"]} == {S1A, S1B})


def _puts(tb: Any) -> dict[str, int]:
    """PUTs s1 received per NI and r1 sent per s1 peer NI (``received_stats``/``sent_stats``)."""
    s1 = local_nis(tb.node("s1"), 2)
    r1 = peer_nis(tb.node("r1"), S1A)
    return {"s1_rx_a": s1[S1A]["received_stats"]["put"],
            "s1_rx_b": s1[S1B]["received_stats"]["put"],
            "r1_tx_a": r1[S1A]["sent_stats"]["put"], "r1_tx_b": r1[S1B]["sent_stats"]["put"]}


def _burst(tb: Any, client: str, count: int) -> dict[str, int]:
    """``count`` PUTs of ``client`` to S1A, all completed; the per-NI PUT deltas."""
    before = _puts(tb)
    res = tb.node(client).put(S1A, count=count, size=1024)
    assert res["completed"] == count and res["failed"] == 0, res
    after = _puts(tb)
    return {k: after[k] - before[k] for k in after}


def _health(r1: Any, nid: str) -> int:
    return int(peer_nis(r1, S1A)[nid]["health stats"]["health value"])


@pytest.fixture
def tb(module_topology: Any) -> Any:
    """The module's testbed with routes up and r1 knowing c1 and s1 as Multi-Rail."""
    for name in ("c1", "c2", "s1"):
        _routes_up(module_topology, name)
    for client in ("c1", "c2"):  # c1 discovers s1 (c2 is downrev: it never discovers);
        module_topology.node(client).put(S1A, count=1, size=0)  # r1 discovers s1 (gate)
    r1 = module_topology.node("r1")
    _until(module_topology, lambda: _r1_knows_mr_peers(r1), 20,
           "r1 discovering c1 and s1 as Multi-Rail")
    return module_topology


@pytest.mark.requirement("rtr-mr-no-unhealthy", "rtr-select-hops-priority")
def test_router_delivers_to_healthier_ni_of_mr_destination(tb: Any) -> None:
    """Real LNet (``lnet_mr_forwarding_allowed``, spec §2.2 step 6, §6.6): r1 sends c1's PUTs
    for s1's eth0 NID to s1's eth1 NID while eth0's peer NI is below full health on r1 (c1
    and s1 Multi-Rail, discovered by r1): no ULP failure, none on eth0; a non-MR originator
    (c2) keeps its choice; with eth0's health recovered (recovery pings, spec §3.5) c1's PUTs
    land on eth0 again. rtr-mr-no-unhealthy: a router does not use a peer NI below
    full health x router_sensitivity when the destination has a healthier one;
    rtr-select-hops-priority: among the destination's NIs on the net, health decides."""
    r1 = tb.node("r1")
    c2 = _peer(r1, C2)
    assert c2 is not None and not c2["Multi-Rail"]

    base = _burst(tb, "c1", N)  # full health: r1 honours c1's choice (UDSP --dst)
    assert base["s1_rx_a"] == N and base["s1_rx_b"] == 0, base

    ok(r1, "lctl", f"net_drop_add -s * -d {S1A} -r 1 -m get -e remote_dropped")
    ok(r1, "lnetctl", f"peer set --nid {S1A} --health 0")
    nmr = _burst(tb, "c2", 1)  # non-MR originator: r1 honours the addressed NI
    assert nmr["s1_rx_a"] == 1 and nmr["s1_rx_b"] == 0, nmr

    ok(r1, "lnetctl", f"peer set --nid {S1A} --health 0")  # c2's ACK from eth0 restored it
    mr = _burst(tb, "c1", N)
    assert mr == {"s1_rx_a": 0, "s1_rx_b": N, "r1_tx_a": 0, "r1_tx_b": N}, mr
    assert _health(r1, S1A) < 1000

    ok(r1, "lctl", "net_drop_del -a")
    _until(tb, lambda: _health(r1, S1A) == 1000, 10, "a recovery ping restoring s1 eth0")
    back = _burst(tb, "c1", N)
    assert back["s1_rx_a"] == N and back["s1_rx_b"] == 0, back


def _s1_stats(tb: Any, key: str, mtype: str) -> dict[str, int]:
    nis = local_nis(tb.node("s1"), 2)
    return {nid: nis[nid][key][mtype] for nid in (S1A, S1B)}


def _r1_acks(tb: Any) -> dict[str, int]:
    pnis = peer_nis(tb.node("r1"), S1A)
    return {nid: pnis[nid]["sent_stats"]["ack"] for nid in (S1A, S1B)}


def _ack_attempt(tb: Any) -> tuple[bool, str, dict[str, int]]:
    """One PUT of s1 to c1 whose (delayed) ACK r1 forwards after lowering the health of the
    s1 NI the PUT came from: (valid, that NI, ACKs s1 received per NI)."""
    c1, r1, s1 = tb.node("c1"), tb.node("r1"), tb.node("s1")
    sent0, acks0 = _s1_stats(tb, "sent_stats", "put"), _s1_stats(tb, "received_stats", "ack")
    fwd0 = _r1_acks(tb)
    rx0 = local_nis(c1, 2)[C1]["received_stats"]["put"]
    res: dict[str, Any] = {}
    put = threading.Thread(target=lambda: res.update(s1.put(C1, count=1, size=0)))
    put.start()
    _until(tb, lambda: local_nis(c1, 2)[C1]["received_stats"]["put"] > rx0, 10,
           "s1's PUT at c1", step=0.05)
    src = next(n for n, v in _s1_stats(tb, "sent_stats", "put").items() if v > sent0[n])
    ok(r1, "lctl", f"net_drop_add -s * -d {src} -r 1 -m get -e remote_dropped")
    ok(r1, "lnetctl", f"peer set --nid {src} --health 0")
    early = _r1_acks(tb) != fwd0  # the ACK went before the health change
    # the forwarded ACK's own success gives that NI its health back (a router's send-side
    # health check, lib-msg.c lnet_health_check), so read it while the ACK is held at c1
    last = _health(r1, src)
    while put.is_alive() and _r1_acks(tb) == fwd0:
        last = _health(r1, src)
        tb.advance(0.05)
    put.join(timeout=60)
    valid = not early and last < 1000
    ok(r1, "lctl", "net_drop_del -a")
    ok(r1, "lnetctl", f"peer set --nid {src} --health 1000")
    assert res.get("completed") == 1, res
    return valid, src, {n: v - acks0[n] for n, v in _s1_stats(tb, "received_stats",
                                                                "ack").items()}


@pytest.mark.mininet_only("r1's health is lowered while c1's ACK is on its way (wall clock)")
@pytest.mark.requirement("rtr-select-hops-priority")
def test_router_sends_ack_to_the_addressed_ni(tb: Any) -> None:
    """Real LNet (``lnet_select_pathway``: an ACK/REPLY is SND_RESP, and
    ``lnet_handle_any_mr_dsta`` sends a response to the exact destination NI; spec §2.2
    step 6, §2.3): MR forwarding re-aims only PUTs and GETs. s1 PUTs to c1; c1 holds its ACK
    for 2 s (``lctl net_delay_add -m ack``); meanwhile r1 lowers the health of the s1 NI the
    PUT came from. r1 still delivers the ACK to that NI. An attempt counts only if r1
    forwarded the ACK after the health change and that NI was still unhealthy just before
    (anything heard from it restores its health, spec §3.1, as the ACK's delivery does)."""
    c1 = tb.node("c1")
    ok(c1, "lctl", "net_delay_add -s * -d * -r 1 -l 2 -m ack")
    try:
        for _attempt in range(3):
            valid, src, acks = _ack_attempt(tb)
            if valid:
                assert acks[src] == 1 and sum(acks.values()) == 1, (src, acks)
                return
        pytest.fail("no attempt in which r1 forwarded the ACK while the NI was unhealthy")
    finally:
        ok(c1, "lctl", "net_delay_del -a")
