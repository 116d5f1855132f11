"""Recovery queues and pings (spec §3.5-3.6; 004): backoff, limits, 10-ping arithmetic."""

from __future__ import annotations

import itertools

import pytest
from enginekit import PORTAL, TCP, C, S, mr2_fabric  # noqa: F401
from enginekit import make_node as _node

from nodes.lnet import recovery
from nodes.lnet.actions import Log
from nodes.lnet.faultrule import FaultAttr
from nodes.lnet.hdr import LNET_PROTO_PING_MATCHBITS, MsgType
from nodes.lnet.hstatus import HStatus
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


def _local_pings(fab: Fabric, ni_nid: object) -> list[tuple[float, object, object]]:
    """(time, sending NI, target) of every local NI recovery ping c1 transmitted."""
    return [(t, act.ni, act.lpni) for t, node, act in fab.transmits
            if node == "c1" and act.hdr.type == MsgType.GET and act.hdr.ptl_index == 0
            and act.lpni == ni_nid]


def test_local_ni_recovery_pings_go_through_the_lnd() -> None:
    """lib-move.c ``lnet_recover_local_nis``: a local NI's recovery ping is a GET to its own
    NID sent like any message (non-MR, from the best NI on that net: here the healthy one,
    so the sick NI is reached over a working path, sanity-lnet 218), delivered by the fabric;
    each ping adds the REPLY handler's +100 (``lnet_handle_recovery_reply``) to what the
    message's own health check adds on that NI: the GET it receives and the REPLY it sends
    are one lnet_msg (lib-move.c ``lnet_parse_get``), checked once (lib-msg.c
    ``lnet_health_check``, +100). So 0 -> 200 -> ... -> 1000 in five pings, one every 2 s
    (that check resets the NI's ping_count). Not seed 004's +100 a ping: that stays behind
    the testbed-only ``testbed_seed_recovery_interval`` (below)."""
    fab = _mr2()
    c = fab.engines["c1"]
    ni = c.local_nis()[0]
    fab.transmits.clear()
    c.net_set_health(ni.nid, 0, fab.now)
    start = fab.now
    seen: list[int] = []
    while ni.healthv < 1000 and fab.now < start + 60:
        t = c.next_deadline()
        assert t is not None
        fab.run_until(t + 0.5)
        if not seen or seen[-1] != ni.healthv:
            seen.append(ni.healthv)
    pings = _local_pings(fab, ni.nid)
    assert seen == [200, 400, 600, 800, 1000] and ni.status_str == "up"
    assert [(round(t - start, 6), src) for t, src, _ in pings] == [
        (0.0, C[1]), (2.0, C[1]), (4.0, C[1]), (6.0, C[1]), (8.0, C[1])]
    assert c.peers.find_lpni(ni.nid) is not None  # our own NID is a peer NI now
    fab.run_until(fab.now + 3)
    assert ni not in c.ni_recoveryq and c.view("recovery", local=True) == {}


def test_lone_ni_recovery_ping_counts_four_health_checks() -> None:
    """A NI alone on its net pings itself: the GET it sends (+100), the GET received and the
    REPLY sent (one message, +100), the REPLY received (+100) and ``lnet_handle_recovery_reply``
    (+100) all land on it: +400 a ping (lib-msg.c ``lnet_health_check``, lib-move.c)."""
    fab = _mr2()
    c = fab.engines["c1"]
    ni, other = c.local_nis()
    c.net_del(TCP, "eth1")  # c1 keeps one NI on tcp
    fab.run_until(fab.now + 5)  # the push of the new ping buffer is over
    fab.transmits.clear()
    c.net_set_health(ni.nid, 0, fab.now)
    fab.run_until(fab.now + 0.5)
    assert ni.healthv == 400
    assert [src for _, src, _ in _local_pings(fab, ni.nid)] == [ni.nid]
    assert other not in c.local_nis()


def test_local_recovery_ping_hits_drop_rules_and_backs_off() -> None:
    """A local recovery ping meets LNet drop rules like any GET (sanity-lnet 210): with
    ``-e local_error`` on GETs it fails (FAILED, health stays 0, no resend), the NI stays
    queued and ping_count grows with the backoff 1, 2, 4 s; once the rule is gone the next
    ping recovers it."""
    fab = _mr2()
    c = fab.engines["c1"]
    ni = c.local_nis()[0]
    for src in C:
        c.faults.add("drop", FaultAttr(src=src, dst=ni.nid, msg_mask=1 << MsgType.GET,
                                       rate=1, health_mask=1 << HStatus.LOCAL_ERROR), fab.now)
    c.net_set_health(ni.nid, 0, fab.now)
    start = fab.now
    counts = []
    for t in (0.5, 1.5, 2.5, 5.5, 6.5):  # pings at +0, +2 (2**1), +6 (2**2)
        fab.run_until(start + t)
        counts.append(ni.ping_count)
    assert counts == [1, 1, 2, 2, 3]
    assert ni.healthv == 0 and ni in c.ni_recoveryq
    assert c.counters.values["resend_count"] == 0
    assert not _local_pings(fab, ni.nid)  # failed before the LND (simulated error)
    c.faults.delete("drop", None, None, fab.now)
    fab.run_until(start + 40)
    assert ni.healthv == 1000 and ni not in c.ni_recoveryq


def test_seed_local_recovery_behind_testbed_knob() -> None:
    """Seed 004 (pre-2.15) behind the testbed-only knob ``testbed_seed_recovery_interval``
    N > 0: pings are answered inside the engine, one every N seconds, exactly +100 each, so
    0 -> 1000 takes exactly 10 pings; ``global show`` does not show the knob."""
    fab = _mr2()
    c = fab.engines["c1"]
    c.set_tunable("testbed_seed_recovery_interval", 2)
    assert "testbed_seed_recovery_interval" not in c.view("global")["global"]
    ni = c.local_nis()[0]
    c.net_set_health(ni.nid, 0, fab.now)
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
    assert [b - a for a, b in itertools.pairwise(times)] == pytest.approx([2] * 9)
    assert not _local_pings(fab, ni.nid)  # nothing went through the fabric


def test_seed_local_recovery_fails_while_fatal() -> None:
    """Seed mode: a fatal NI's in-engine pings fail (no health credit); clearing fatal lets
    it recover."""
    fab = _mr2()
    c = fab.engines["c1"]
    c.set_tunable("testbed_seed_recovery_interval", 2)
    ni = c.local_nis()[0]
    fab.set_link(ni.nid, False)  # the carrier is gone: nothing arrives on it either
    c.ni_set_fatal(ni.nid, True, 0.0)
    c.net_set_health(ni.nid, 500, 0.0)
    fab.run_until(40)
    assert ni.healthv == 500 and ni.ping_count >= 4
    fab.set_link(ni.nid, True)
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
    """spec §3.6: ``net set --all --health V`` sets every NI and queues those below 1000;
    api-ni.c ``lnet_ni_set_healthv`` walks the loopback net too, so ``0@lo`` is queued first
    (net order)."""
    eng = _node(1, C)
    eng.net_set_health(None, 300, 0.0)
    assert [ni.healthv for ni in eng.local.local_nis(True)] == [300, 300, 300]
    assert dump(eng.view("recovery", local=True)) == (
        "Local NI recovery:\n    nid-0: 0@lo\n    nid-1: 10.10.0.1@tcp\n"
        "    nid-2: 10.11.0.1@tcp\n")


def test_a_peer_ni_back_at_full_health_leaves_the_queue_at_the_next_pass() -> None:
    """The monitor thread walks both recovery queues every second (lib-move.c
    ``lnet_monitor_thread``) and drops entries back at 1000 before it looks at their next
    ping (``lnet_recover_peer_nis``). A peer NI that recovered by traffic while its next ping
    was far off (a long backoff) leaves at the next pass, so a failure after that queues it
    afresh, pinged after the interval of its reset ping count (explore seed 559: it stayed
    queued behind a 512 s next ping, and the failure 1.5 s after its recovery found it still
    there, unpinged for 500 s)."""
    fab = _mr2()
    c = fab.engines["c1"]
    fab.call("c1", c.ping, 0.0, S[1], src=C[1])
    fab.run_until(1)
    lpni = c.peers.find_lpni(S[1])
    lpni.ping_count = 9  # a long failing streak: the next ping is 512 s away
    c.peer_set_health(S[1], 500, fab.now)
    assert lpni in c.lpni_recoveryq and lpni.next_ping - fab.now == 512
    lpni.ping_count = 0  # a message from it arrived (lnet_health_check OK branch) ...
    c.health.set_lpni(lpni, 1000, "ok")  # ... from a router: straight to full health
    fab.run_until(fab.now + 1.5)
    assert lpni not in c.lpni_recoveryq
    fab.transmits.clear()
    c.health.remote_failure(lpni, fab.now)  # 1000 -> 900, queued with ping count 0
    fab.run_until(fab.now + 2.5)
    pings = [t for _, n, t in fab.transmits if n == "c1" and t.lpni == S[1]]
    assert len(pings) == 1 and lpni.healthv == 1000 and lpni not in c.lpni_recoveryq


def test_net_set_health_all_includes_loopback_lnet_ni_set_healthv() -> None:
    """api-ni.c ``lnet_ni_set_healthv``: ``--all`` walks every net, ``0@lo`` included (its
    health starts at 0, E17); below 1000 it joins the local recovery queue and its pings on
    the LOLND bring it back: +200 each, the REPLY it receives (health-checked, lib-msg.c
    ``lnet_health_check``; its sends have no txpeer, so ``lnet_is_health_check`` skips them)
    and ``lnet_handle_recovery_reply``'s +sensitivity."""
    fab = Fabric()
    c = _node(1, C)
    fab.add("c1", c)
    lo = c.local.local_nis(True)[0]
    assert lo.is_lo and lo.healthv == 0  # E17
    c.net_set_health(None, 100, fab.now)
    assert lo.healthv == 100 and lo in c.recovery.ni_queue
    seen = [lo.healthv]
    while lo.healthv < 1000 and fab.now < 30:
        fab.run_until(fab.now + 0.5)
        if seen[-1:] != [lo.healthv]:
            seen.append(lo.healthv)
    assert seen == [100, 300, 500, 700, 900, 1000], seen
    fab.run_until(fab.now + 2)
    assert lo not in c.recovery.ni_queue


def test_recovery_interval_is_a_deprecated_noop_lu13569() -> None:
    """api-ni.c ``recovery_interval_set`` (LU-13569): ``set recovery_interval N`` warns that
    the parameter is deprecated and stores nothing, so ``global show`` prints 1 and local NI
    recovery is today's (+200 a ping through the fabric, not seed 004's in-engine +100)."""
    fab = _mr2()
    c = fab.engines["c1"]
    actions = c.set_tunable("recovery_interval", 30)
    assert [a.text for a in actions if isinstance(a, Log)] == [
        "'lnet_recovery_interval' has been deprecated"]
    assert c.view("global")["global"]["recovery_interval"] == 1
    ni = c.local_nis()[0]
    c.net_set_health(ni.nid, 600, fab.now)
    fab.run_until(fab.now + 5)
    assert ni.healthv == 1000
    assert _local_pings(fab, ni.nid)  # pinged through the fabric, as today's LNet
