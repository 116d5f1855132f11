"""The interposer's per-flow stream tracker (issue 32 item 2, faults/flowtrack.py): every LNet
message of a socklnd stream classified whatever the segmentation, retransmissions judged by
history, resynchronisation after a gap, and hostile streams in bounded memory.

Streams are built with ``nodes/lnd/wire.py`` (what the daemons send); the expected answer for
each segment is computed from the stream's own unit boundaries: a segment carries a unit when
it overlaps it and the unit's header is complete by the segment's end (ksocknal_process_receive
reads the same units: connreq, hello, ksock_msg_hdr + lnet_hdr + payload).
"""

from __future__ import annotations

import random

import pytest

from faults.flowtrack import FlowTracker, LNetMsg, parse_unit
from nodes.lnet.hdr import MsgType
from tests.unit.streamkit import ISN, KEY, A, B, cuts, expected, lnet_msg, names, stream


@pytest.mark.parametrize("seed", range(6))
def test_every_message_of_an_in_order_stream_whatever_the_segmentation(seed: int) -> None:
    data, spans = stream(seed=seed)
    tr = FlowTracker()
    tr.feed(KEY, ISN - 1, 0x02, b"")
    for lo, hi in cuts(len(data), random.Random(seed)):
        got = tr.feed(KEY, (ISN + lo) % (1 << 32), 0x10, data[lo:hi])
        assert names(got) == expected(spans, lo, hi, hi), (lo, hi)
    assert tr.counters["messages"] == sum(1 for *_x, n in spans if n)
    assert tr.counters["resyncs"] == tr.counters["gaps"] == 0


def test_classification_carries_nids_and_portal() -> None:
    raw = lnet_msg(MsgType.PUT, 4096, portal=31)
    length, msg = parse_unit(raw, 0)
    assert length == len(raw)
    assert msg == LNetMsg("PUT", A.nid4, B.nid4, 31)
    assert parse_unit(lnet_msg(MsgType.ACK, 0), 0)[1] == LNetMsg("ACK", A.nid4, B.nid4, None)


def test_sequence_numbers_wrap_around() -> None:
    data, spans = stream(seed=3)
    tr = FlowTracker()
    isn = (1 << 32) - 5000
    tr.feed(KEY, isn - 1, 0x02, b"")
    for lo, hi in cuts(len(data), random.Random(3), (1448,)):
        got = tr.feed(KEY, (isn + lo) % (1 << 32), 0x10, data[lo:hi])
        assert names(got) == expected(spans, lo, hi, hi)


def test_retransmissions_are_judged_by_the_units_they_overlap() -> None:
    """A retransmitted range, re-segmented differently (TCP coalesces on retransmit), carries
    the messages it overlaps; nothing is counted twice."""
    data, spans = stream(seed=1)
    tr = FlowTracker()
    tr.feed(KEY, ISN - 1, 0x02, b"")
    segs = cuts(len(data), random.Random(1), (1448,))
    for lo, hi in segs:
        tr.feed(KEY, ISN + lo, 0x10, data[lo:hi])
    before = tr.counters["messages"]
    lo, hi = segs[-3][0], segs[-1][1]  # the last three segments again, as one
    assert names(tr.feed(KEY, ISN + lo, 0x10, data[lo:hi])) == expected(spans, lo, hi, hi)
    assert tr.counters["messages"] == before
    # a retransmission that also brings new bytes: both halves judged
    more = lnet_msg(MsgType.PUT, 100)
    got = tr.feed(KEY, ISN + segs[-1][0], 0x10, data[segs[-1][0]:] + more)
    assert names(got)[-1] == "PUT" and tr.counters["messages"] == before + 1


def test_a_flow_first_seen_mid_stream_resynchronises_at_the_next_header() -> None:
    data, spans = stream(seed=2)
    tr = FlowTracker()
    mid = spans[5][0] + 10  # inside unit 5: no SYN, no boundary known
    segs = [(lo, hi) for lo, hi in cuts(len(data), random.Random(2), (1448,)) if lo >= mid]
    later = [s for s in spans if s[0] >= mid]  # a unit whose header was never seen is not
    for lo, hi in segs:
        got = tr.feed(KEY, ISN + lo, 0x10, data[lo:hi])
        assert names(got) == expected(later, lo, hi, hi), (lo, hi)
    assert tr.counters["resyncs"] == 1
    assert tr.counters["messages"] == sum(1 for s in later if s[3])


def test_a_gap_inside_a_payload_keeps_step_one_over_a_header_resynchronises() -> None:
    data, spans = stream(seed=4)
    big = next(s for s in spans if s[1] - s[0] > 9000)
    tr = FlowTracker()
    tr.feed(KEY, ISN - 1, 0x02, b"")
    tr.feed(KEY, ISN, 0x10, data[:big[0] + 200])
    # skip 5000 payload bytes of the 9000-byte PUT: still in step
    lo = big[0] + 5200
    got = tr.feed(KEY, ISN + lo, 0x10, data[lo:big[1] + 300])
    assert names(got) == expected(spans, lo, big[1] + 300, big[1] + 300)
    assert tr.counters["gaps"] == 0
    # now lose bytes across the next boundaries: step lost, found again by the scan
    nxt = next(s for s in spans if s[0] > big[1] + 300 and s[3] == "PUT")
    lo = nxt[0] + 50
    tr.feed(KEY, ISN + lo, 0x10, data[lo:nxt[1] + 400])
    assert tr.counters["gaps"] == 1 and tr.counters["resyncs"] == 1
    lo = nxt[1] + 400
    got = tr.feed(KEY, ISN + lo, 0x10, data[lo:])
    assert names(got) == expected(spans, lo, len(data), len(data))
