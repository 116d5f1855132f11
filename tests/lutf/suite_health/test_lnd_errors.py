"""Each real socklnd failure reaches LNet as its spec §3.7 hstatus and errno (seed 003
hlth-lnd-existing-failures, hlth-lnd-finalize-status, hlth-lnd-remote-timeout).

Each test gets a fresh ``lndfast`` testbed (c1 and s1, two rails, Multi-Rail peers;
transaction_timeout 5, retry_count 1, so lnd_timeout = 2 s and the sockets' TCP_USER_TIMEOUT
= 3 s, see nodes/lnd/socklnd.py). The failures are real ones on the wire, made by the faults
module in s1's or c1's namespace, after a warm-up of small PUTs (connections up, small socket
buffers, so a 1 MiB PUT is still being written when the failure strikes):

=========================  ==========================  ==============  ===================
failure                    what real ksocklnd sees     hstatus         ULP event / counter
=========================  ==========================  ==============  ===================
s1 drops what it receives  write fails ETIMEDOUT (TCP  REMOTE_TIMEOUT  SEND -5; peer NI
(blackhole in)             gave up)                                    ``timeout``
s1 stopped (SIGSTOP)       zero window: the tx makes   NETWORK_TIMEOUT SEND -110; peer NI
                           no progress for lnd_timeout                 ``network timeout``
s1 killed (no listener)    connect ECONNREFUSED        REMOTE_DROPPED  SEND -111 (resent);
                                                                       peer NI ``dropped``
forged RSTs                write fails ECONNRESET      LOCAL_ERROR     SEND -5; NI ``error``
=========================  ==========================  ==============  ===================

(Connect timeouts, LOCAL_TIMEOUT, are test_lnd_failures.py's.) LNet does with each what
``lnet_health_check`` says (spec §3.2): only REMOTE_DROPPED is resent here.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, local_nis, peer_nis, stats
from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet, pytest.mark.topology("lndfast.yaml"),
              pytest.mark.mininet_only("real TCP failures on real sockets (TCP giving up, "
                                       "zero windows, refused connects, RSTs); the sim's "
                                       "fabric has link state only")]

MIB = 1 << 20


def _warm(tb: Any) -> Any:
    """Connections up on both rails with small PUTs (the socket buffers stay small)."""
    c1 = tb.node("c1")
    assert c1.put(S1_NIDS[0], count=4, size=0)["completed"] == 4
    return c1


def _peer_stat(node: Any, key: str) -> dict[str, int]:
    return {nid: p["health stats"][key] for nid, p in peer_nis(node).items()}


def _ni_stat(node: Any, key: str) -> dict[str, int]:
    return {nid: ni["health stats"][key] for nid, ni in local_nis(node).items()}


@pytest.mark.requirement("hlth-lnd-remote-timeout", "hlth-lnd-existing-failures",
                         "hlth-lnd-finalize-status", "hlth-tst-lutf")
def test_tcp_giving_up_on_a_write_is_a_remote_timeout(topology: Any) -> None:
    """Real ksocklnd (``ksocknal_process_transmit``): a write that fails with -ETIMEDOUT, TCP
    having given up on unacknowledged data, sets REMOTE_TIMEOUT; LNet blames the peer NI
    (``timeout`` health stat, health -sensitivity), does not resend it (spec §3.2) and the
    ULP's SEND event carries the LND's -EIO. s1 drops everything it receives, so c1's kernel
    retransmits the 1 MiB PUT until its TCP_USER_TIMEOUT (3 s), before the 5 s transaction
    timeout; the socklnd's own progress monitor leaves a retransmitting connection to TCP."""
    c1 = _warm(topology)
    for iface in ("eth0", "eth1"):
        topology.fault.blackhole(node="s1", iface=iface, direction="in")
    t0 = time.monotonic()
    reply = c1.put(S1_NIDS[0], count=1, size=MIB)
    took = time.monotonic() - t0
    assert reply["errors"] == {"SEND:-5": 1}, reply
    assert 2.5 <= took <= 4.8, took
    st = stats(c1)
    assert st["remote_timeout_count"] == 1 and st["resend_count"] == 0, st
    assert st["network_timeout_count"] == st["local_error_count"] == 0, st
    timeouts = _peer_stat(c1, "timeout")
    (blamed,) = [nid for nid, n in timeouts.items() if n == 1]
    assert sum(timeouts.values()) == 1, timeouts
    assert _peer_stat(c1, "health value")[blamed] <= 900  # its recovery pings fail too
    assert set(_ni_stat(c1, "health value").values()) == {1000}
    assert "[Errno 110] Connection timed out" in c1.log()


@pytest.mark.requirement("hlth-lnd-network-timeout", "hlth-stt-network-timeout-resends",
                         "hlth-lnd-existing-failures", "hlth-lnd-finalize-status",
                         "hlth-tst-lutf")
def test_a_stalled_write_is_a_network_timeout(topology: Any) -> None:
    """Real ksocklnd (``ksocknal_find_timed_out_conn``): a connection whose send queue makes
    no progress for the LND timeout is closed and its posted tx fails -ETIMEDOUT; with
    seed 003's split that is NETWORK_TIMEOUT (docs/differences.md), which lowers both the
    local NI and the peer NI and is not resent (spec §3.2). s1 is stopped (SIGSTOP): its
    kernel still acknowledges until the receive buffer is full, then advertises a zero
    window, so TCP never gives up and the socklnd's monitor ends the 1 MiB PUT after
    lnd_timeout (2 s). Counted per peer NI (``network timeout``, spec §4.6) and per local NI
    (``lctl testbed_stats``, testbed-only: real NI health stats have no such key)."""
    c1 = _warm(topology)
    fid = topology.fault.add("stop", node="s1", duration=30)["id"]
    try:
        t0 = time.monotonic()
        reply = c1.put(S1_NIDS[0], count=1, size=MIB)
        took = time.monotonic() - t0
    finally:
        topology.fault.delete(fid)
    assert reply["errors"] == {"SEND:-110": 1}, reply
    assert 1.8 <= took <= 3.5, took
    st = stats(c1)
    assert st["network_timeout_count"] == 1 and st["remote_timeout_count"] == 0, st
    assert st["resend_count"] == 0, st
    per_lpni = _peer_stat(c1, "network timeout")
    (lpni,) = [nid for nid, n in per_lpni.items() if n == 1]
    assert sum(per_lpni.values()) == 1
    per_ni = {ni["nid"]: ni["network timeout"]
              for ni in c1.testbed_stats()["local NI(s)"]}
    (ni,) = [nid for nid, n in per_ni.items() if n == 1]
    assert sum(per_ni.values()) == 1, per_ni
    assert C1_NIDS.index(ni) == S1_NIDS.index(lpni)  # the rail it was written on
    # (a local NI's recovery ping may already have won some health back, spec §3.5)
    assert _ni_stat(c1, "health value")[ni] < 1000
    assert _peer_stat(c1, "health value")[lpni] <= 900
    assert "timeout sending data" in c1.log()


@pytest.mark.requirement("hlth-lnd-existing-failures", "hlth-lnd-finalize-status",
                         "hlth-tst-lutf")
def test_a_refused_connect_is_remote_dropped_and_resent(topology: Any) -> None:
    """Real ksocklnd (``ksocknal_connect`` -> ``ksocknal_txlist_done``): a connect refused
    (-ECONNREFUSED: nothing listens on port 988) fails the queued txs as REMOTE_DROPPED; LNet
    lowers that peer NI, resends to the other one (spec §3.2/3.3), which refuses too, and the
    ULP's SEND event carries -ECONNREFUSED. s1's daemon is killed: its kernel closes the
    connections (c1 sees them go down), then nobody answers on 988."""
    c1 = _warm(topology)
    fid = topology.fault.add("kill", node="s1", duration=60)["id"]
    try:
        wait_for(lambda: c1.log().count("peer closed the connection") >= 4, timeout=10)
        reply = c1.put(S1_NIDS[0], count=1, size=0)
        st = stats(c1)
        dropped = _peer_stat(c1, "dropped")
        health = _peer_stat(c1, "health value")
    finally:
        topology.fault.delete(fid)
    assert reply["errors"] == {"SEND:-111": 1}, reply
    assert st["remote_dropped_count"] == 2 and st["resend_count"] == 1, st
    assert st["failed_resends"] == 1, st
    assert dropped == {S1_NIDS[0]: 1, S1_NIDS[1]: 1}, dropped
    assert all(h <= 900 for h in health.values()), health


@pytest.mark.requirement("hlth-lnd-existing-failures", "hlth-lnd-finalize-status",
                         "hlth-tst-lutf")
@pytest.mark.namespace_only("forged RSTs come from the NFQUEUE interposer beside the node")
def test_a_reset_connection_is_a_local_error(topology: Any) -> None:
    """Real ksocklnd (``ksocknal_process_transmit``): any write error but -ETIMEDOUT, a reset
    by the peer included, is LOCAL_ERROR: the local NI is blamed (``error`` stat, health
    -sensitivity), nothing is resent (spec §3.2) and the SEND event carries -EIO. Forged
    RSTs (one per rail) hit the connections while 1 MiB PUTs are being written."""
    c1 = _warm(topology)
    for iface in ("eth0", "eth1"):
        topology.fault.rst(node="c1", iface=iface)
    reply = c1.put(S1_NIDS[0], count=4, size=MIB)
    assert reply["errors"] == {"SEND:-5": reply["failed"]} and reply["failed"] >= 1, reply
    st = stats(c1)
    assert st["local_error_count"] == reply["failed"] and st["resend_count"] == 0, st
    errors = _ni_stat(c1, "error")
    assert sum(errors.values()) == reply["failed"], errors
    health = _ni_stat(c1, "health value")  # (recovery pings may win some back meanwhile)
    assert all(health[nid] < 1000 for nid, n in errors.items() if n), (health, errors)
    assert set(_peer_stat(c1, "health value").values()) == {1000}
    assert "Connection reset by peer" in c1.log()
