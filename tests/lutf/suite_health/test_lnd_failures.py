"""The socklnd's own failures feed LNet health (seed 003 LND requirements; spec §3.2, §3.4, §3.7).

Each test gets a fresh ``lndfast`` testbed (c1 and s1, two rails, both Multi-Rail peers;
transaction_timeout 5, retry_count 1, so LNet derives lnd_timeout = max((5-1)/(1+1), 1) = 2 s
and hands it to the socklnd: connect, stale-tx and send-progress timeouts, and the sockets'
TCP_USER_TIMEOUT). Failures are real ones on the wire: an iptables REJECT of connection
attempts (ECONNREFUSED), a blackholed interface (nothing answers: connects and writes time
out). What real LNet does with each is spec §3.7's socklnd mapping: refused connect ->
REMOTE_DROPPED (resent to another peer NI), connect or queue timeout -> a *local* timeout
(seed 003 split, docs/differences.md; resent from another local NI), TCP giving up on a tx
being written -> REMOTE_TIMEOUT (not resent, the peer NI is blamed).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, local_nis, ok, stats

pytestmark = [pytest.mark.mininet, pytest.mark.topology("lndfast.yaml")]

def _lnd_timeout(node: Any) -> set[int]:
    return {ni["lnd tunables"]["timeout"] for ni in local_nis(node, 1).values()}


def _blackhole(tb: Any, node: str, iface: str) -> str:
    rule = tb.fault.blackhole(node=node, iface=iface, direction="both")
    return str(rule["id"])


@pytest.mark.requirement("hlth-lnd-tx-timeout-from-lnet", "hlth-tst-lutf")
def test_lnd_timeout_is_derived_from_lnet_tunables(topology: Any) -> None:
    """Real LNet (``lnet_set_lnd_timeout``, ``ksocknal_timeout()`` = ``sock_timeout ?:
    lnet_get_lnd_timeout()``): the LND timeout is LNet's max((transaction_timeout-1) /
    (retry_count+1), 1), recomputed whenever either tunable changes, shown by ``global
    show`` and as each NI's ``lnd tunables: timeout`` (spec §0). ``net set --lnd-timeout S``
    (the socklnd's own timeout) pins it for that net's NIs; 0 hands them back to LNet's. Both
    backends: this is the engine's and the node runtime's bookkeeping, no wire involved."""
    c1 = topology.node("c1")
    for tt, rc, lnd in ((5, 1, 2), (3, 1, 1), (10, 0, 9), (20, 3, 4), (2, 1, 1)):
        ok(c1, "lnetctl", "set retry_count 0")  # (LNet wants retry_count < the timeout)
        ok(c1, "lnetctl", f"set transaction_timeout {tt}")
        ok(c1, "lnetctl", f"set retry_count {rc}")
        assert c1.yaml("global show")["global"]["lnd_timeout"] == lnd, (tt, rc)
        assert _lnd_timeout(c1) == {lnd}, (tt, rc)
    ok(c1, "lnetctl", "net set --net tcp --lnd-timeout 7")
    ok(c1, "lnetctl", "set transaction_timeout 30")  # retry_count 1: derived 14
    assert c1.yaml("global show")["global"]["lnd_timeout"] == 14
    assert _lnd_timeout(c1) == {7}
    ok(c1, "lnetctl", "net set --net tcp --lnd-timeout 0")
    assert _lnd_timeout(c1) == {14}


@pytest.mark.mininet_only("the socklnd enforcing its timeout on real, blackholed connects")
@pytest.mark.requirement("hlth-lnd-tx-timeout-from-lnet", "hlth-lnt-lnd-enforces-timeout",
                         "hlth-lnd-local-timeout", "hlth-stt-local-timeout-resends",
                         "hlth-tst-lutf")
def test_lnd_timeout_comes_from_lnet_and_the_socklnd_enforces_it(topology: Any) -> None:
    """Seed 003: the LND's tx timeout is provided by LNet (``lnet_lnd_timeout`` =
    max((transaction_timeout-1)/(retry_count+1), 1), spec §0; the socklnd uses it while its
    own ``sock_timeout`` is 0) and the LND enforces it: a GET pinned to c1's eth1 (``ping
    --source``) whose connection attempts are blackholed times out in the socklnd after
    about lnd_timeout (LOCAL_TIMEOUT: never posted), LNet re-transmits it once (retry_count
    1, same source, spec §3.3) and the second attempt times out the same way. Changing
    transaction_timeout moves both the shown and the enforced LND timeout."""
    c1 = topology.node("c1")
    assert c1.yaml("global show")["global"]["lnd_timeout"] == 2
    assert _lnd_timeout(c1) == {2}
    fid = _blackhole(topology, "c1", "eth1")
    try:
        for tt, lnd in ((5, 2), (3, 1)):
            ok(c1, "lnetctl", f"set transaction_timeout {tt}")
            assert c1.yaml("global show")["global"]["lnd_timeout"] == lnd
            assert _lnd_timeout(c1) == {lnd}
            before = stats(c1)
            t0 = time.monotonic()
            res = c1.ping(S1_NIDS[1], source=C1_NIDS[1], timeout=30)
            took = time.monotonic() - t0
            assert res.rc != 0, res
            st = stats(c1)
            assert st["local_timeout_count"] - before["local_timeout_count"] == 2, st
            assert st["resend_count"] - before["resend_count"] == 1, st
            # two attempts of about lnd_timeout each; far below the old 50 s sock_timeout
            assert 2 * lnd - 0.5 <= took <= 2 * lnd + 3, took
    finally:
        topology.fault.delete(fid)
    ni = local_nis(c1)[C1_NIDS[1]]["health stats"]
    assert ni["timeouts"] == 4 and ni["health value"] < 1000, ni
