"""NFQUEUE fault kinds on large (IPv6) NIDs (issue 26 item 8: "faults (ip6tables) ... handle
them"). topologies/ipv6.yaml: c1's socklnd speaks KSOCK_PROTO_V4 to s1 over AF_INET6
(``ksocknal_create_conn``), so on Mininet the fault's NFQUEUE rules are ip6tables rules and
the interposer's stream tracker reads ``lnet_hdr_nid16`` (socklnd_proto.c
``ksocknal_pack_msg_v4``) to match ``type: PUT`` and a large ``dst_nid``; on the simulator the
same rule is matched by the engine. The numbers asserted are the same as on IPv4
(suite_faults/test_fault_kinds.py ``loss``): every PUT completes (TCP retransmits), and the
drop rate is within 2 points of the rate asked.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.mininet, pytest.mark.topology("ipv6"),
              pytest.mark.xdist_group("suite_ipv6_faults")]

S1 = "2001:db8:6::2@tcp"
PUTS = 1000


def _sim(tb: Any) -> bool:
    return type(tb).__name__.startswith("Sim")


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def test_loss_on_large_nids_drops_put_segments_at_the_rate_asked(tb: Any) -> None:
    """``loss`` rate 0.1 matched on ``type: PUT`` (both rails: Multi-Rail spreads the PUTs to
    s1 over its two large NIDs): 1000 PUTs of 4 KiB all
    complete, the measured drop rate is 0.1 +- 0.02, and the tracker counted at least one
    PUT message per PUT sent on the V4 stream (0 if it could not read lnet_hdr_nid16)."""
    c1 = tb.node("c1")
    c1.put(S1, count=1)  # connections up, discovery done: the fault sees only the PUTs
    f = tb.fault.loss(node="c1", rate=0.1, seed=4, match={"type": "PUT"})
    reply = c1.put(S1, count=PUTS, size=4096)
    c = tb.fault.delete(f["id"])["counters"]
    assert reply["completed"] == PUTS, reply
    if _sim(tb):  # each lost attempt is a retransmission of the message
        measured = c["retransmits"] / (PUTS + c["retransmits"])
    else:
        assert c["messages_matched"] >= PUTS, c
        measured = c["dropped"] / c["matched"]
    assert abs(measured - 0.1) <= 0.02, c


def test_put_rule_does_not_match_get_traffic(tb: Any) -> None:
    """``type: PUT`` and a large ``dst_nid`` select by the V4 header: LNet pings (GET/REPLY)
    under a rule that would drop every PUT to s1's first NID all succeed, no message matched;
    PUTs to that NID are matched (and TCP retransmits them only once the fault is gone)."""
    c1 = tb.node("c1")
    f = tb.fault.loss(node="c1", rate=1.0, seed=5, match={"type": "PUT", "dst_nid": S1})
    rcs = [c1.ping(S1).rc for _ in range(5)]
    c = tb.fault.delete(f["id"])["counters"]
    assert rcs == [0] * 5, rcs
    if not _sim(tb):
        assert c["messages_matched"] == 0 and c["dropped"] == 0, c


def _stats(node: Any) -> dict[str, int]:
    return dict(node.lnetctl_yaml("stats", "show")["statistics"])


def test_duplicate_on_large_nids_each_message_received_once(tb: Any) -> None:
    """``duplicate`` rate 0.5 on PUTs: the copies go out through an AF_INET6 raw socket
    (IPPROTO_RAW: the IPv6 header is ours); TCP hands the V4 LND each byte once, so s1's
    recv_count grows by c1's send_count, every PUT completes, at the rate asked +- 0.05.
    (That the copies reach the wire is shown by the rst test, which uses the same socket.)"""
    c1, s1 = tb.node("c1"), tb.node("s1")
    sent0, recv0 = _stats(c1)["send_count"], _stats(s1)["recv_count"]
    f = tb.fault.add("duplicate", node="c1", seed=9, rate=0.5, match={"type": "PUT"})
    reply = c1.put(S1, count=300, size=4096)
    c = tb.fault.delete(f["id"])["counters"]
    assert reply["completed"] == 300 and reply["failed"] == 0, reply
    assert _stats(s1)["recv_count"] - recv0 == _stats(c1)["send_count"] - sent0
    assert abs(c["duplicated"] / c["matched"] - 0.5) <= 0.05, c


def test_rst_on_large_nids_resets_both_ends_and_socklnd_reconnects(tb: Any) -> None:
    """``rst``: RSTs forged as IPv6/TCP reach both ends (ksocknal_close_conn_and_siblings on
    ECONNRESET, logged by both daemons); the next ping reconnects.

    Regression (2026-12-03, Mininet, this test run alone): Multi-Rail connects from c1's
    second NI (2001:db8:7::1) to s1 through eth0 while the fault is added; the fault used its
    one RST on that SYN (seq 0 to the connecting end, no connection at the other: nobody
    reset, the SYN retransmitted). The interposer now resets with an established segment
    only (``faults.interposer.resettable``)."""
    from testbed.pytest.plugin import wait_for

    c1, s1 = tb.node("c1"), tb.node("s1")
    assert c1.ping(S1).rc == 0
    f = tb.fault.rst(node="c1", iface="eth0")
    c1.put(S1, count=4, size=100)
    wait_for(lambda: all("Connection reset by peer" in n.log() for n in (c1, s1)), timeout=5)
    assert tb.fault.delete(f["id"])["counters"]["rst"] == 1
    assert c1.ping(S1).rc == 0
