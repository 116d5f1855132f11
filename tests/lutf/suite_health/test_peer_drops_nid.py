"""A peer that drops a NID (``net del --if``) closes that NID's connections: the other end
reads a clean EOF, which real ksocklnd closes with error 0 and so never reports to LNet as
a dead peer NI (socklnd_cb.c ``ksocknal_process_receive`` ->
``ksocknal_close_conn_and_siblings(conn, 0)``: ``ksnp_error`` stays 0 and
``ksocknal_terminate_conn`` skips ``ksocknal_peer_failed``; LU-20023). The peer NI is only
found dead when a send or connect to it fails, and its health falls with those failures.

The test changes s1's NIs, so it gets its own testbed (the ``topology`` fixture).
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import ok, peer_nis

pytestmark = [pytest.mark.mininet, pytest.mark.topology("eofpair.yaml")]

C1_NIDS = ("10.72.0.1@tcp", "10.73.0.1@tcp")
S1_NIDS = ("10.72.0.2@tcp", "10.73.0.2@tcp")


@pytest.mark.requirement("rtr-mr-lnd-notify", "hlth-lnt-peer-ni-health")
def test_clean_eof_is_no_dead_peer_notice_lu20023(topology: Any) -> None:
    """c1 routes (``set routing 1``: ``peer show`` then prints each peer NI's up/down state,
    which ``lnet_notify`` sets), knows s1 only from s1's traffic and, discovery off, sends
    nothing on its own: it has no connection attempt of its own (``ksocknal_peer_failed``
    would stay quiet for that reason alone). s1 deletes 10.72.0.2@tcp: c1's connections to
    it end in EOF; no death notice, the peer NI stays ``up`` at health 1000. Sends to it
    then fail, and the failures lower its health (lnet_handle_remote_failure_locked). (The
    EOF rule itself is pinned by tests/unit/test_socklnd.py
    ``test_clean_eof_does_not_report_peer_ni_dead_lu20023``: here the daemon's connector
    is usually still retrying after the connection race, which keeps the notice back too.)"""
    c1, s1 = topology.node("c1"), topology.node("s1")
    assert not [e for e in topology.events() if e.get("kind") == "peer_notify"
                and e.get("lpni") == S1_NIDS[0] and e.get("alive") is False]
    ok(c1, "lnetctl", "set discovery 0")
    ok(c1, "lnetctl", "set routing 1")
    first = s1.put(C1_NIDS[0], count=20, size=0)  # s1 connects: c1 only accepts
    assert first["completed"] == 20, first
    assert peer_nis(c1)[S1_NIDS[0]]["statistics"]["recv_count"] > 0
    ok(s1, "lnetctl", "net del --net tcp --if eth0")
    topology.advance(1.5)
    dead = [e for e in topology.events() if e.get("kind") == "peer_notify"
            and e.get("lpni") == S1_NIDS[0] and e.get("alive") is False]
    assert not dead, dead  # the LND's lnet_notify (a `peer_notify` event on both backends)
    lpni = peer_nis(c1)[S1_NIDS[0]]
    assert lpni["state"] == "up", lpni["state"]
    assert lpni["health stats"]["health value"] == 1000
    c1.put(S1_NIDS[0], count=5, size=0)
    assert peer_nis(c1)[S1_NIDS[0]]["health stats"]["health value"] < 1000
