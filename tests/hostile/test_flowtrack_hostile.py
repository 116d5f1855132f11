"""Hostile streams at the interposer's stream tracker (issue 32; hostile-input suite, no
root): garbage that never holds a header, malformed and truncated headers, arbitrary
segments, 10,000 concurrent flows. Each ends with no exception, the loss of step counted,
and memory bounded (per flow: no payload kept, a tail or head under ``KEEP_MAX`` bytes, a
history of at most 32 units; at most ``max_flows`` flows)."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faults.flowtrack import KEEP_MAX, FlowTracker
from tests.unit.streamkit import ISN, KEY, cuts, names, stream


def test_a_flow_that_never_sends_a_header_costs_a_bounded_tail() -> None:
    tr = FlowTracker()
    rng = random.Random(5)
    seq = 77
    for _ in range(2000):
        chunk = bytes(rng.randrange(0, 0xC0) for _ in range(rng.randrange(1, 3000)))
        assert tr.feed(KEY, seq, 0x10, chunk) == []
        seq += len(chunk)
    flow = tr.flows[KEY]
    assert len(flow.tail) < KEEP_MAX and not flow.hmsg  # V4's header (lnet_hdr_nid16) the larger
    assert tr.counters["messages"] == 0 and tr.counters["unsynced_bytes"] > 2_000_000


def test_a_header_split_across_out_of_step_segments_is_found() -> None:
    data, spans = stream(seed=6)
    u = next(s for s in spans[3:] if s[3] == "PUT")
    tr = FlowTracker()
    tr.feed(KEY, ISN + u[0] - 30, 0x10, data[u[0] - 30:u[0] + 40])  # header's first 40 bytes
    got = tr.feed(KEY, ISN + u[0] + 40, 0x10, data[u[0] + 40:u[1] + 10])
    assert names(got)[:1] == [u[3]]


@pytest.mark.parametrize("bad", ["type", "length", "nips"])
def test_a_malformed_header_in_step_loses_step_and_is_counted(bad: str) -> None:
    data, spans = stream(seed=7)
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
    for lo, hi in cuts(len(raw), random.Random(7), (1448,)):
        tr.feed(KEY, ISN + lo, 0x10, bytes(raw[lo:hi]))
    assert tr.counters["gaps"] >= 1
    assert tr.counters["messages"] >= sum(1 for s in spans if s[3]) - 3  # back in step


def test_truncated_streams_and_fin_or_rst_forget_the_flow() -> None:
    data, _spans = stream(seed=8)
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
        assert len(f.head) < KEEP_MAX and len(f.tail) < KEEP_MAX and len(f.hmsg) <= 32


def test_ten_thousand_concurrent_flows_in_bounded_memory() -> None:
    """10,000 flows, each mid-PUT with a header split across segments and a full history:
    the worst a flow holds. Measured with tracemalloc; beyond ``max_flows`` the oldest go."""
    data, _spans = stream(n_puts=40, seed=9)
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
