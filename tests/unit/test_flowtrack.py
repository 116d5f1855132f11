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
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faults.flowtrack import HEAD_MAX, FlowTracker, LNetMsg, parse_unit
from nodes.lnd import wire
from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
from nodes.lnet.nid import NID

A = NID.parse("10.10.0.1@tcp")
B = NID.parse("10.10.0.2@tcp")
W = WireHandle(1, 2)
KEY = b"\x0a\x0a\x00\x01\x0a\x0a\x00\x02\x03\xff\x03\xdc"
ISN = 1_000_000


def _lnet(mtype: MsgType, size: int, portal: int = 52) -> bytes:
    base = {"dest_nid": B, "src_nid": A, "dest_pid": 12345, "src_pid": 12345,
            "type": mtype, "payload_length": size, "wmd": W}
    extra = {MsgType.PUT: {"match_bits": 9, "ptl_index": portal, "offset": 0},
             MsgType.GET: {"match_bits": 9, "ptl_index": portal, "offset": 0,
                           "sink_length": 4096},
             MsgType.ACK: {"match_bits": 9, "mlength": 4096}}.get(mtype, {})
    hdr = LNetHdr(**base, **extra)
    return wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=hdr,
                                       payload=bytes((i * 7) & 0xFF for i in range(size))))


def _stream(n_puts: int = 40, seed: int = 0) -> tuple[bytes, list[tuple[int, int, int, str]]]:
    """A connecting side's stream: connreq, hello, then PUT/GET/NOOP units; and its units as
    (start, end, header bytes needed, type or "" for a NOOP)."""
    rng = random.Random(seed)
    hello = wire.pack_hello(wire.KsockHello(A, B, 12345, 12345, 7, 0, ips=(0x0A0A0001,)))
    units = [(wire.pack_connreq(B), 16, "HELLO"), (hello, 56, "HELLO")]
    for _ in range(n_puts):
        r = rng.random()
        if r < 0.1:
            units.append((wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_NOOP)), 24, ""))
        elif r < 0.2:
            units.append((_lnet(MsgType.GET, 0), HEAD_MAX, "GET"))
        else:
            units.append((_lnet(MsgType.PUT, rng.choice((0, 33, 4096, 9000))), HEAD_MAX, "PUT"))
    out, spans, at = b"", [], 0
    for raw, need, name in units:
        spans.append((at, at + len(raw), need, name))
        out += raw
        at += len(raw)
    return out, spans


def _cuts(n: int, rng: random.Random, sizes: tuple[int, ...] = (1, 7, 100, 1448, 65160)
          ) -> list[tuple[int, int]]:
    out, at = [], 0
    while at < n:
        step = min(n - at, rng.choice(sizes))
        out.append((at, at + step))
        at += step
    return out


def _expected(spans: list[tuple[int, int, int, str]], lo: int, hi: int, seen_to: int
              ) -> list[str]:
    return [name for s, e, need, name in spans
            if name and s < hi and e > lo and s + need <= seen_to]


def _names(msgs: list[LNetMsg]) -> list[str]:
    return [m.type for m in msgs]


@pytest.mark.parametrize("seed", range(6))
def test_every_message_of_an_in_order_stream_whatever_the_segmentation(seed: int) -> None:
    data, spans = _stream(seed=seed)
    tr = FlowTracker()
    tr.feed(KEY, ISN - 1, 0x02, b"")
    for lo, hi in _cuts(len(data), random.Random(seed)):
        got = tr.feed(KEY, (ISN + lo) % (1 << 32), 0x10, data[lo:hi])
        assert _names(got) == _expected(spans, lo, hi, hi), (lo, hi)
    assert tr.counters["messages"] == sum(1 for *_x, n in spans if n)
    assert tr.counters["resyncs"] == tr.counters["gaps"] == 0


def test_classification_carries_nids_and_portal() -> None:
    raw = _lnet(MsgType.PUT, 4096, portal=31)
    length, msg = parse_unit(raw, 0)
    assert length == len(raw)
    assert msg == LNetMsg("PUT", A.nid4, B.nid4, 31)
    assert parse_unit(_lnet(MsgType.ACK, 0), 0)[1] == LNetMsg("ACK", A.nid4, B.nid4, None)


def test_sequence_numbers_wrap_around() -> None:
    data, spans = _stream(seed=3)
    tr = FlowTracker()
    isn = (1 << 32) - 5000
    tr.feed(KEY, isn - 1, 0x02, b"")
    for lo, hi in _cuts(len(data), random.Random(3), (1448,)):
        got = tr.feed(KEY, (isn + lo) % (1 << 32), 0x10, data[lo:hi])
        assert _names(got) == _expected(spans, lo, hi, hi)


def test_retransmissions_are_judged_by_the_units_they_overlap() -> None:
    """A retransmitted range, re-segmented differently (TCP coalesces on retransmit), carries
    the messages it overlaps; nothing is counted twice."""
    data, spans = _stream(seed=1)
    tr = FlowTracker()
    tr.feed(KEY, ISN - 1, 0x02, b"")
    cuts = _cuts(len(data), random.Random(1), (1448,))
    for lo, hi in cuts:
        tr.feed(KEY, ISN + lo, 0x10, data[lo:hi])
    before = tr.counters["messages"]
    lo, hi = cuts[-3][0], cuts[-1][1]  # the last three segments again, as one
    assert _names(tr.feed(KEY, ISN + lo, 0x10, data[lo:hi])) == _expected(spans, lo, hi, hi)
    assert tr.counters["messages"] == before
    # a retransmission that also brings new bytes: both halves judged
    more = _lnet(MsgType.PUT, 100)
    got = tr.feed(KEY, ISN + cuts[-1][0], 0x10, data[cuts[-1][0]:] + more)
    assert _names(got)[-1] == "PUT" and tr.counters["messages"] == before + 1


def test_a_flow_first_seen_mid_stream_resynchronises_at_the_next_header() -> None:
    data, spans = _stream(seed=2)
    tr = FlowTracker()
    mid = spans[5][0] + 10  # inside unit 5: no SYN, no boundary known
    cuts = [(lo, hi) for lo, hi in _cuts(len(data), random.Random(2), (1448,)) if lo >= mid]
    later = [s for s in spans if s[0] >= mid]  # a unit whose header was never seen is not
    for lo, hi in cuts:
        got = tr.feed(KEY, ISN + lo, 0x10, data[lo:hi])
        assert _names(got) == _expected(later, lo, hi, hi), (lo, hi)
    assert tr.counters["resyncs"] == 1
    assert tr.counters["messages"] == sum(1 for s in later if s[3])


def test_a_gap_inside_a_payload_keeps_step_one_over_a_header_resynchronises() -> None:
    data, spans = _stream(seed=4)
    big = next(s for s in spans if s[1] - s[0] > 9000)
    tr = FlowTracker()
    tr.feed(KEY, ISN - 1, 0x02, b"")
    tr.feed(KEY, ISN, 0x10, data[:big[0] + 200])
    # skip 5000 payload bytes of the 9000-byte PUT: still in step
    lo = big[0] + 5200
    got = tr.feed(KEY, ISN + lo, 0x10, data[lo:big[1] + 300])
    assert _names(got) == _expected(spans, lo, big[1] + 300, big[1] + 300)
    assert tr.counters["gaps"] == 0
    # now lose bytes across the next boundaries: step lost, found again by the scan
    nxt = next(s for s in spans if s[0] > big[1] + 300 and s[3] == "PUT")
    lo = nxt[0] + 50
    tr.feed(KEY, ISN + lo, 0x10, data[lo:nxt[1] + 400])
    assert tr.counters["gaps"] == 1 and tr.counters["resyncs"] == 1
    lo = nxt[1] + 400
    got = tr.feed(KEY, ISN + lo, 0x10, data[lo:])
    assert _names(got) == _expected(spans, lo, len(data), len(data))


# ------------------------------------------------------------------------------ hostile input
def test_a_flow_that_never_sends_a_header_costs_a_bounded_tail() -> None:
    tr = FlowTracker()
    rng = random.Random(5)
    seq = 77
    for _ in range(2000):
        chunk = bytes(rng.randrange(0, 0xC0) for _ in range(rng.randrange(1, 3000)))
        assert tr.feed(KEY, seq, 0x10, chunk) == []
        seq += len(chunk)
    flow = tr.flows[KEY]
    assert len(flow.tail) < HEAD_MAX and not flow.hmsg
    assert tr.counters["messages"] == 0 and tr.counters["unsynced_bytes"] > 2_000_000


def test_a_header_split_across_out_of_step_segments_is_found() -> None:
    data, spans = _stream(seed=6)
    u = next(s for s in spans[3:] if s[3] == "PUT")
    tr = FlowTracker()
    tr.feed(KEY, ISN + u[0] - 30, 0x10, data[u[0] - 30:u[0] + 40])  # header's first 40 bytes
    got = tr.feed(KEY, ISN + u[0] + 40, 0x10, data[u[0] + 40:u[1] + 10])
    assert _names(got)[:1] == [u[3]]


@pytest.mark.parametrize("bad", ["type", "length", "nips"])
def test_a_malformed_header_in_step_loses_step_and_is_counted(bad: str) -> None:
    data, spans = _stream(seed=7)
    u = next(s for s in spans[2:] if s[3] == "PUT")
    raw = bytearray(data)
    if bad == "type":
        raw[u[0] + 24 + 24] = 9  # lnet_hdr type 9
    elif bad == "length":
        raw[u[0] + 24 + 28:u[0] + 24 + 32] = (2 << 20).to_bytes(4, "little")  # > LNET_MTU
    else:
        raw = bytearray(data)
        raw[spans[1][0] + 52:spans[1][0] + 56] = (1000).to_bytes(4, "little")  # hello nips
    tr = FlowTracker()
    tr.feed(KEY, ISN - 1, 0x02, b"")
    for lo, hi in _cuts(len(raw), random.Random(7), (1448,)):
        tr.feed(KEY, ISN + lo, 0x10, bytes(raw[lo:hi]))
    assert tr.counters["gaps"] >= 1
    assert tr.counters["messages"] >= sum(1 for s in spans if s[3]) - 3  # back in step


def test_truncated_streams_and_fin_or_rst_forget_the_flow() -> None:
    data, _spans = _stream(seed=8)
    for flags in (0x11, 0x14):
        tr = FlowTracker()
        tr.feed(KEY, ISN - 1, 0x02, b"")
        tr.feed(KEY, ISN, 0x10, data[:200])
        tr.feed(KEY, ISN + 200, flags, data[200:250])  # ends inside a header
        assert KEY not in tr.flows


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, (1 << 32) - 1), st.sampled_from((0, 0x02, 0x10, 0x11)),
                          st.binary(max_size=400)), max_size=30))
def test_arbitrary_segments_never_raise_and_stay_bounded(
        segs: list[tuple[int, int, bytes]]) -> None:
    tr = FlowTracker(max_flows=4)
    for i, (seq, flags, payload) in enumerate(segs):
        tr.feed(bytes([i % 6]), seq, flags, payload)
    assert len(tr.flows) <= 4
    for f in tr.flows.values():
        assert len(f.head) < HEAD_MAX and len(f.tail) < HEAD_MAX and len(f.hmsg) <= 32


def test_ten_thousand_concurrent_flows_in_bounded_memory() -> None:
    """10,000 flows, each mid-PUT with a header split across segments and a full history:
    the worst a flow holds. Measured with tracemalloc; beyond ``max_flows`` the oldest go."""
    data, _spans = _stream(n_puts=40, seed=9)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tr = FlowTracker(max_flows=10_000)
        for i in range(10_000):
            key = i.to_bytes(12, "big")
            tr.feed(key, ISN - 1, 0x02, b"")
            tr.feed(key, ISN, 0x10, data[:len(data) - 10])
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    per_flow = used / 10_000
    assert len(tr.flows) == 10_000
    assert per_flow < 2048, per_flow
    assert tr.flow_bytes() / 10_000 < 2048
    small = FlowTracker(max_flows=100)
    for i in range(10_000):
        small.feed(i.to_bytes(12, "big"), ISN, 0x10, data[:500])
    assert len(small.flows) == 100 and small.counters["evicted"] == 9_900
