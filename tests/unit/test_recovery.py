"""Recovery queues and pings (spec §3.5-3.6; 004): backoff, limits, 10-ping arithmetic."""

from __future__ import annotations

import itertools

import pytest
from enginekit import PORTAL, TCP, C, S, mr2_fabric  # noqa: F401
from enginekit import make_node as _node

from nodes.lnet import recovery
from nodes.lnet.hdr import LNET_PROTO_PING_MATCHBITS, MsgType
from nodes.tools.yamlfmt import dump
from testbed.sim.fabric import Fabric


def _mr2() -> Fabric:
    return mr2_fabric()


def test_backoff_interval() -> None:
    """LU-13569: interval(n) = 2**n up to floor(log2(max)) = 9, then max (900)."""
    eng = _node(1, C)
    assert [recovery.interval(eng, n) for n in range(12)] == [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900]
    eng.set_tunable("max_recovery_ping_interval", 20)
    assert [recovery.interval(eng, n) for n in range(7)] == [1, 2, 4, 8, 16, 20, 20]


def test_local_ni_recovers_in_exactly_ten_pings() -> None:
    """Seed 004: sensitivity 100, an NI at health 0 is back at 1000 after exactly 10 pings;
    each good ping resets ping_count (as its REPLY would), so they come every 2 s."""
    fab = _mr2()
    c = fab.engines["c1"]
    ni = c.local_nis()[0]
    c.net_set_health(ni.nid, 0, 0.0)
    assert ni.status_str == "down" and ni in c.ni_recoveryq
    times: list[float] = []
    while ni.healthv < 1000:
        t = c.next_deadline()
        assert t is not None
        fab.run_until(t)
        pings = [at for at, node, text in fab.log
                 if node == "c1" and text.startswith(f"recovery ping of local NI {ni.nid}")]
        if len(pings) > len(times):
            times = pings
            assert ni.healthv == 100 * len(times)
    assert len(times) == 10 and ni.status_str == "up"
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # (the harness discovered the peer first: virtual time starts a few ms after 0)
    assert gaps == pytest.approx([2] * 9) and times[0] == pytest.approx(0.0, abs=0.01)
    fab.run_until(fab.now + 3)
    assert ni not in c.ni_recoveryq  # healthy entries leave at the next tick
    assert c.view("recovery", local=True) == {}


def test_local_recovery_fails_while_fatal() -> None:
    """A fatal NI's recovery pings fail (no health credit); clearing fatal lets it recover."""
    fab = _mr2()
    c = fab.engines["c1"]
    ni = c.local_nis()[0]
    c.ni_set_fatal(ni.nid, True, 0.0)
    c.net_set_health(ni.nid, 500, 0.0)
    fab.run_until(40)
    assert ni.healthv == 500 and ni.ping_count >= 4
    c.ni_set_fatal(ni.nid, False, fab.now)
    fab.run_until(fab.now + 2000)
    assert ni.healthv == 1000 and ni.status_str == "up"


def test_peer_ni_never_heard_from_is_not_queued() -> None:
    """spec §3.5, §11.7: lpni with last_alive == 0 is not recovery-pinged."""
    fab = _mr2()
    c = fab.engines["c1"]
    c.peer_set_health(S[1], 0, 0.0)
    assert not c.lpni_recoveryq
    assert c.view("recovery", local=False) == {}


def test_peer_ni_recovery_pings_raise_health() -> None:
    """spec §3.5: recovery pings are GETs on portal 0 to the exact NID (NMR); each REPLY's
    receive health check adds +sensitivity to the peer NI."""
    fab = _mr2()
    c = fab.engines["c1"]
    fab.call("c1", c.ping, 0.0, S[1], src=C[1])  # hear from S[1] once: eligible
    fab.run_until(1)
    lpni = c.peers.find_lpni(S[1])
    assert lpni.last_alive > 0
    c.peer_set_health(S[1], 700, fab.now)
    text = dump(c.view("recovery", local=False))
    assert text == "Peer NI recovery:\n    nid-0: 10.11.0.2@tcp\n"
    fab.transmits.clear()
    fab.run_until(fab.now + 1.5)
    pings = [t for _, n, t in fab.transmits if n == "c1"]
    assert len(pings) == 1
    ping = pings[0]
    assert (ping.hdr.type, ping.hdr.ptl_index, ping.hdr.match_bits, ping.lpni) == (
        MsgType.GET, 0, LNET_PROTO_PING_MATCHBITS, S[1])
    # the REPLY's receive health check: +100, and receiving resets ping_count (spec §3.5)
    assert lpni.healthv == 800 and lpni.ping_count == 0
    fab.run_until(fab.now + 30)
    assert lpni.healthv == 1000 and lpni not in c.lpni_recoveryq
    # internal pings never reach the upper layer
    assert all(e.handle != lpni.ping_md.handle for e in fab.events["c1"])


def test_peer_recovery_ping_failure_not_resent() -> None:
    """Recovery pings are never resent; a failed one marks FAILED and backs off."""
    fab = _mr2()
    c = fab.engines["c1"]
    fab.call("c1", c.ping, 0.0, S[1], src=C[1])
    fab.run_until(1)
    lpni = c.peers.find_lpni(S[1])
    fab.down.add(S[1])
    c.peer_set_health(S[1], 500, fab.now)
    fab.transmits.clear()
    fab.run_until(fab.now + 8)
    pings = [t for _, n, t in fab.transmits if n == "c1"]
    assert len(pings) == lpni.ping_count == 3  # t+1, +2, +4: one transmission each
    # each failed ping is an ordinary REMOTE_DROPPED failure (−100) but is never resent
    assert lpni.healthv == 200 and c.counters.values["resend_count"] == 0


def test_recovery_limit_ages_peer_out() -> None:
    """spec §3.5: with recovery_limit, a peer NI silent for longer is not queued."""
    fab = _mr2()
    c = fab.engines["c1"]
    fab.call("c1", c.ping, 0.0, S[1], src=C[1])
    fab.run_until(1)
    c.set_tunable("recovery_limit", 10)
    lpni = c.peers.find_lpni(S[1])
    lpni.ping_count = 3
    c.peer_set_health(S[1], 500, 100.0)
    assert lpni not in c.lpni_recoveryq and lpni.ping_count == 0


def test_net_set_all_queues_every_ni() -> None:
    """spec §3.6: ``net set --all --health V`` sets every NI and queues those below 1000."""
    eng = _node(1, C)
    eng.net_set_health(None, 300, 0.0)
    assert [ni.healthv for ni in eng.local_nis()] == [300, 300]
    assert dump(eng.view("recovery", local=True)) == (
        "Local NI recovery:\n    nid-0: 10.10.0.1@tcp\n    nid-1: 10.11.0.1@tcp\n")
