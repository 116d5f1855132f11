"""Health (spec §3.1-3.4; 003, 004): per-class table, counters, resend rules, deadlines."""

from __future__ import annotations

import pytest
from enginekit import PORTAL, TCP, C, S, settle_discovery  # noqa: F401
from enginekit import make_node as _node

from nodes.lnet.errors import LNetConfigError
from nodes.lnet.events import TxCompleted
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID
from nodes.lnet.notify import drain
from nodes.lnet.peer import Peer
from nodes.lnet.tunables import Tunables
from testbed.sim.fabric import Fabric

H = HStatus


def _held(c_nids: list[NID] = C, s_nids: list[NID] = S) -> Fabric:
    fab = Fabric()
    c, s = _node(11, c_nids), _node(22, s_nids)
    c.peer_add(s_nids[0], s_nids[1:])
    s.attach_me(PORTAL, 0, 2**64 - 1)
    fab.add("c1", c)
    fab.add("s1", s)
    settle_discovery(fab)  # the peer is up to date: the PUTs below are sent at once
    fab.hold = True
    return fab


def _put(fab: Fabric, **kw: object) -> int:
    c = fab.engines["c1"]
    return fab.call("c1", c.put, fab.now, S[0], payload=b"abc", portal=PORTAL,  # type: ignore[return-value]
                    **kw)


def _fail_last(fab: Fabric, hstatus: HStatus, rc: int = -5) -> None:
    _, _, tx = fab.transmits[-1]
    c = fab.engines["c1"]
    fab.apply("c1", c.handle(TxCompleted(tx_id=tx.tx_id, rc=rc, hstatus=hstatus), fab.now))


# (hstatus, local NI dec?, peer NI dec?, resend?, NI hstats key, lpni hstats key) — spec §3.2
TABLE = [
    (H.LOCAL_INTERRUPT, True, False, True, "interrupts", None),
    (H.LOCAL_DROPPED, True, False, True, "dropped", None),
    (H.LOCAL_ABORTED, True, False, True, "aborted", None),
    (H.LOCAL_NO_ROUTE, True, False, True, "no_route", None),
    (H.LOCAL_ERROR, True, False, False, "error", None),
    (H.LOCAL_TIMEOUT, True, False, True, "timeouts", None),
    (H.REMOTE_ERROR, False, True, False, None, "error"),
    (H.REMOTE_DROPPED, False, True, True, None, "dropped"),
    (H.REMOTE_TIMEOUT, False, True, False, None, "timeout"),
    (H.NETWORK_TIMEOUT, True, True, False, None, "network_timeout"),
]


@pytest.mark.parametrize(("hs", "ldec", "rdec", "resend", "nikey", "lpkey"), TABLE)
def test_health_table(hs: HStatus, ldec: bool, rdec: bool, resend: bool,
                      nikey: str | None, lpkey: str | None) -> None:
    """spec §3.2 table, §11.5: who is decremented, what is counted, what is resent."""
    fab = _held()
    c = fab.engines["c1"]
    _put(fab)
    _, _, tx = fab.transmits[-1]
    ni, lpni = c.ni_by_nid(tx.ni), c.peers.find_lpni(tx.lpni)
    assert ni is not None and lpni is not None
    _fail_last(fab, hs)
    assert ni.healthv == (900 if ldec else 1000)
    assert lpni.healthv == (900 if rdec else 1000)
    assert (ni in c.ni_recoveryq) == ldec
    assert (len(fab.transmits) == 2) == resend
    assert c.counters.values["resend_count"] == int(resend)
    gkey = {H.NETWORK_TIMEOUT: "network_timeout_count"}.get(hs, f"{hs.name.lower()}_count")
    assert c.counters.values[gkey] == 1
    if nikey:
        assert getattr(ni.hstats, nikey) == 1
    if lpkey:
        assert getattr(lpni.hstats, lpkey) == 1
    # NETWORK_TIMEOUT is a remote class: it is not counted in the NI's ``timeouts``
    assert ni.hstats.timeouts == int(hs == H.LOCAL_TIMEOUT)
    events = [e for e in fab.events["c1"] if e.unlinked]
    assert len(events) == (0 if resend else 1)


def test_single_ni_node_decrements_but_never_resends_local() -> None:
    """spec §3.2 step 3, §11.4: local failures on a one-NI node lower health, no resend."""
    fab = _held(c_nids=C[:1])
    c = fab.engines["c1"]
    _put(fab)
    _fail_last(fab, H.LOCAL_TIMEOUT)
    assert c.local_nis()[0].healthv == 900 and len(fab.transmits) == 1
    assert fab.events["c1"][-1].status == -5 and fab.events["c1"][-1].unlinked


def test_single_ni_peer_untouched_and_not_resent() -> None:
    """spec §3.2 step 3: remote failure to a single-NI non-router peer: no health, no resend."""
    fab = _held(s_nids=S[:1])
    c = fab.engines["c1"]
    _put(fab)
    _fail_last(fab, H.REMOTE_DROPPED)
    lpni = c.peers.find_lpni(S[0])
    assert lpni.healthv == 1000 and lpni.hstats.dropped == 1 and len(fab.transmits) == 1
    c.set_tunable("routing", 1)  # I am a router: remote health applies
    _put(fab)
    _fail_last(fab, H.REMOTE_DROPPED)
    assert lpni.healthv == 900


def test_retry_count_limits_resends() -> None:
    """003 / spec §3.3: at most retry_count resends, then failed_resends and one failure."""
    fab = _held()
    c = fab.engines["c1"]
    c.set_tunable("retry_count", 2)
    h = _put(fab)
    for _ in range(3):
        _fail_last(fab, H.LOCAL_DROPPED)
    assert len(fab.transmits) == 3
    assert c.counters.values["resend_count"] == 2 and c.counters.values["failed_resends"] == 1
    finals = [e for e in fab.events["c1"] if e.handle == h and e.unlinked]
    assert [(e.kind, e.status) for e in finals] == [("SEND", -5)]


def test_successful_resend_counted() -> None:
    """spec §4.5: an OK completion of a resent message bumps successful_resends."""
    fab = _held()
    c = fab.engines["c1"]
    _put(fab)
    _fail_last(fab, H.LOCAL_ABORTED)
    _fail_last(fab, H.OK, rc=0)
    assert c.counters.values["successful_resends"] == 1
    assert c.counters.values["send_count"] == 1


def test_retry_count_zero_never_resends() -> None:
    """003: retry_count 0 turns re-transmits off (and failed_resends is not counted)."""
    fab = _held()
    c = fab.engines["c1"]
    c.set_tunable("retry_count", 0)
    _put(fab)
    _fail_last(fab, H.REMOTE_DROPPED)
    assert len(fab.transmits) == 1 and c.counters.values["failed_resends"] == 0


def test_failure_after_deadline_changes_nothing() -> None:
    """spec §3.2 step 1, §11.3: a failure reported after msg_deadline touches no health."""
    fab = _held()
    c = fab.engines["c1"]
    _put(fab)
    fab.now = 200.0  # past 0 + 50*(2+1)+1 = 151
    _fail_last(fab, H.LOCAL_TIMEOUT)
    assert all(ni.healthv == 1000 for ni in c.local_nis())
    assert c.counters.values["local_timeout_count"] == 0 and len(fab.transmits) == 1


def test_msg_deadline_derivation() -> None:
    """spec §3.4: deadline = now + lnd_timeout*(retry_count+1) + 1; lnd_timeout shown 49."""
    fab = _held()
    c = fab.engines["c1"]
    fab.now = 10.0
    h = _put(fab)
    msg = c.md_by_handle(h).msg
    assert msg.deadline == 10 + 50 * 3 + 1
    assert c.view("global")["global"]["lnd_timeout"] == 49
    c.set_tunable("retry_count", 0)
    assert c.tunables.lnd_timeout == 149
    h2 = _put(fab, timeout=5)  # the caller's own transaction timeout caps it (003)
    assert c.md_by_handle(h2).msg.deadline == 15.0


def test_sensitivity_zero_freezes_health_and_retries() -> None:
    """hlt cfg: sensitivity 0 -> health never moves, nothing queued, retry_count forced 0."""
    fab = _held()
    c = fab.engines["c1"]
    c.set_tunable("health_sensitivity", 0)
    assert c.tunables.retry_count == 0
    _put(fab)
    _fail_last(fab, H.NETWORK_TIMEOUT)
    assert all(ni.healthv == 1000 for ni in c.local_nis()) and not c.ni_recoveryq
    assert all(lp.healthv == 1000 for lp in c.peers.find_peer(S[0]).lpnis)


def test_status_follows_health_extremes() -> None:
    """spec §3.1 (LU-19476): health 0 -> status down, back to 1000 -> up."""
    fab = _held()
    c = fab.engines["c1"]
    ni = c.local_nis()[0]
    c.net_set_health(ni.nid, 100, 0.0)
    assert ni.status_str == "up"
    c.net_set_health(ni.nid, 0, 0.0)
    assert ni.status_str == "down"
    c.net_set_health(ni.nid, 1000, 0.0)
    assert ni.status_str == "up"
    c.net_set_health(ni.nid, 5000, 0.0)  # out of range -> 1000 (spec §3.6)
    assert ni.healthv == 1000


def test_success_adds_sensitivity() -> None:
    """spec §11.2: each good send adds health_sensitivity to the NI, capped at 1000."""
    fab = _held()
    c = fab.engines["c1"]
    ni = c.local_nis()[0]
    c.net_set_health(ni.nid, 650, 0.0)
    for _ in range(2):
        c.local_nis()[1].fatal_error = True  # keep the traffic on ni
        _put(fab)
        _fail_last(fab, H.OK, rc=0)
    assert ni.healthv == 850


def test_tunable_range_checks() -> None:
    """api-ni.c setters: retry_count <= transaction_timeout, sensitivity <= 1000 ..."""
    t = Tunables()
    for name, bad in [("health_sensitivity", 1001), ("transaction_timeout", 0),
                      ("retry_count", 151), ("response_tracking", 4),
                      ("max_recovery_ping_interval", 0), ("recovery_limit", -1)]:
        with pytest.raises(LNetConfigError):
            t.set(name, bad)
    t.set("numa_range", 2**32 - 1)  # any __u32 (IOC_LIBCFS_SET_NUMA_RANGE), lnetctl's -1
    t.set("transaction_timeout", 10)
    with pytest.raises(LNetConfigError):
        t.set("transaction_timeout", 2)  # must stay > retry_count


def test_a_replaced_peer_ni_moves_health_without_notices() -> None:
    """A message keeps the peer NI it was sent to or received from (``msg_txpeer`` /
    ``msg_rxpeer``); when discovery moves that NID to another peer as a new peer NI (peer.c
    ``lnet_peer_add_nid``), the old one still takes the message's health check, out of sight
    of ``peer show``. Its change raises no ``lpni_health`` notice: the NID's notices follow
    the peer NI the table has (explore seed 216: an ACK's check on the replaced peer NI said
    900 -> 1000 between two changes of the new one, 1000 -> 900 -> 800)."""
    c = _node(11, C)
    old = c.peers.traffic_add(S[0], 8)
    other = Peer(S[1])
    c.peers.peers.append(other)
    c.peers.add_nid(other, S[1], 8)
    c.peers.del_lpni(old)
    new = c.peers.add_nid(other, S[0], 8)
    drain(c)
    c.health.dec_lpni(new)
    c.health.inc_lpni(old)  # no-op at 1000
    c.health.dec_lpni(old)
    c.health.set_lpni(old, 1000, "ok")
    c.health.dec_lpni(new)
    moves = [(f["old"], f["new"]) for kind, f in drain(c)
             if kind == "lpni_health" and f["nid"] == str(S[0])]
    assert moves == [(1000, 900), (900, 800)]
    assert (old.healthv, new.healthv) == (1000, 800)
