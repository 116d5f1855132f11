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

from lutf.lnet_views import delta, ok, peer_nis, stats

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
    then fail, and the failures lower its health (lnet_handle_remote_failure_locked). c1
    accepted every connection, so it has no ``conn_cb`` and runs no connector of its own
    (issue 26 item 11): only the EOF rule keeps the notice back (the unit test
    tests/unit/test_socklnd.py ``test_clean_eof_does_not_report_peer_ni_dead_lu20023``
    pins it on sockets; the simulator reads the FIN through the same ``errmap.close_error``)."""
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


@pytest.mark.requirement("hlth-lnt-peer-ni-health")
def test_mr_peer_drops_locked_primary_and_pushes_lu20023(topology: Any) -> None:
    """The issue's case (issue 26 item 2): c1 knows s1 as an MR peer with a locked primary
    (``peer add --lock_prim``: ``lnet_peer_add`` keeps that primary NID whatever the peer
    says) and connects to both of its NIDs. s1 deletes the primary's NI: c1 reads EOF on its
    connections to it first, then s1's push without that NID, which marks the peer NI down
    and lowers its health (peer.c ``lnet_peer_ni_set_healthv`` via the push's status,
    NI_STATUS_DOWN). With the EOF closed as an error, c1 had already heard the peer NI died,
    so the push changed nothing, health stayed 1000 and the locked primary kept being
    chosen: 100 PUTs to it needed 32 resends on Mininet and on the simulator. Closed with 0
    (LU-20023), health falls by the push and selection moves to the other NID at once."""
    c1, s1 = topology.node("c1"), topology.node("s1")
    ok(c1, "lnetctl", f"peer add --prim_nid {S1_NIDS[0]} --nid {S1_NIDS[1]} --lock_prim")
    ok(c1, "lnetctl", f"discover {S1_NIDS[0]}")
    assert c1.put(S1_NIDS[0], count=20, size=0)["completed"] == 20  # c1 connects to both
    ok(s1, "lnetctl", "net del --net tcp --if eth0")
    topology.advance(1.5)
    lpni = peer_nis(c1, S1_NIDS[0])[S1_NIDS[0]]  # the locked primary is still the peer's
    assert lpni["health stats"]["health value"] < 1000, lpni  # lowered by the push
    before = stats(c1)
    res = c1.put(S1_NIDS[0], count=100, size=0)
    assert res["completed"] == 100, res
    resends = delta(stats(c1), before)["resend_count"]
    assert resends <= 2, resends  # (32 with the EOF reported as a dead peer NI)


@pytest.mark.requirement("rtr-mr-lnd-notify")
def test_killed_peer_is_no_dead_notice_until_a_connect_is_refused_lu20023(topology: Any) -> None:
    """A killed node's kernel closes its sockets: idle ones with a FIN (Linux sends an RST
    only for a socket closed with unread data), so the peer's ksocklnd reads a clean EOF
    and closes with error 0 (LU-20023): LNet hears nothing then. The next send connects,
    is refused (nobody on port 988), and ``ksocknal_connect`` -> ``ksocknal_peer_failed``
    tells LNet the peer NI died. The simulator's kill (``Fabric.hang_up``) does the same."""
    c1 = topology.node("c1")
    assert c1.put(S1_NIDS[0], count=20, size=0)["completed"] == 20  # c1 connects to s1

    def dead() -> list[str]:
        return sorted(e["lpni"] for e in topology.events() if e.get("kind") == "peer_notify"
                      and e.get("node") == "c1" and e.get("alive") is False)

    fid = topology.fault.add("kill", node="s1", duration=60)["id"]
    try:
        topology.advance(1.5)
        quiet = dead()
        closed = c1.log().count("peer closed the connection")
        reply = c1.put(S1_NIDS[0], count=1, size=0)
        after = dead()
    finally:
        topology.fault.delete(fid)
    assert quiet == [], quiet
    assert closed >= 1
    assert reply["errors"] == {"SEND:-111": 1}, reply
    assert set(after) == set(S1_NIDS), after
