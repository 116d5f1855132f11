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
