"""Hostile bytes at o2iblnd's port 987 (issue 28; hostile-input suite): the emulated IB
framing (nodes/o2ib/vwire.py, the kib_msg in CM private data and SENDs) fuzzed.

Sans-I/O (no root): hypothesis feeds arbitrary bytes, and well-framed packets with
arbitrary contents, to an accepted port-987 stream and to an established connection; the LND
never raises, keeps at most one error line per stream, closes that stream, and still serves
a good peer. On Mininet: a peer in x1's namespace writes garbage to c1's port 987; c1 logs
one line, stays up (an LNet ping from s1 over o2ib works), grows by at most 20 MB, and
creates nothing.
"""

from __future__ import annotations

import itertools
import struct
import sys
from typing import Any

import pytest
from hostilekit import FUZZ, HERE, Baseline
from hypothesis import given
from hypothesis import strategies as st

from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
from nodes.lnet.nid import NID
from nodes.o2ib import vwire
from nodes.o2ib.kibtx import Close, Deliver, TxDone
from nodes.o2ib.o2iblnd import O2ibLND

A, B = NID.parse("10.0.0.1@o2ib"), NID.parse("10.0.0.2@o2ib")
O2PAIR = HERE / "o2pair.yaml"
PASSIVE = itertools.count(9000)  # passive stream ids, unique across calls
packets = st.builds(lambda k, body: vwire._LEN.pack(len(body) + 1) + bytes([k]) + body,
                    st.sampled_from([int(k) for k in vwire.Kind]), st.binary(max_size=300))
streams = st.lists(st.one_of(st.binary(max_size=200), packets), max_size=8)


def good_put(lnd: O2ibLND, peer: O2ibLND) -> bool:
    """A real peer still gets an 8-byte PUT through ``lnd`` (streams joined in memory)."""
    ends: dict[tuple[int, int], tuple[int, int]] = {}  # (side, stream) -> other end
    sides = {0: peer, 1: lnd}
    q = [(0, o) for o in peer.send(1, B, A, LNetHdr(A, B, 1, 1, MsgType.PUT, 8, WireHandle()),
                                   b"12345678", 0.0)]
    got = False
    while q:
        side, o = q.pop(0)
        name = type(o).__name__
        if name == "Connect":
            ps = next(PASSIVE)
            ends[(side, o.stream)] = (1 - side, ps)
            ends[(1 - side, ps)] = (side, o.stream)
            q += [(1 - side, x) for x in sides[1 - side].accept(ps, 0.0)]
            q += [(side, x) for x in sides[side].connected(o.stream, 0.0)]
        elif name == "Write" and (side, o.stream) in ends:
            other, s = ends[(side, o.stream)]
            q += [(other, x) for x in sides[other].receive(s, o.data, 0.0)]
        elif isinstance(o, Deliver) and side == 1:
            got = o.payload == b"12345678"
        elif isinstance(o, TxDone):
            assert o.rc == 0, o
    return got


@FUZZ
@given(chunks=streams)
def test_port_987_fuzz_never_raises_and_closes_the_stream(chunks: list[bytes]) -> None:
    lnd = O2ibLND(incarnation=5)
    lnd.startup_ni(A)
    lnd.accept(77, 0.0)
    closed = False
    for data in chunks:
        outs = lnd.receive(77, data, 0.0)
        closed = closed or any(isinstance(o, Close) and o.stream == 77 for o in outs)
    assert len(lnd.errors) <= 1 and all("\n" not in e for e in lnd.errors)
    if lnd.errors:
        assert closed and 77 not in lnd.listening and 77 not in lnd.streams
    peer = O2ibLND(incarnation=6)
    peer.startup_ni(B)
    assert good_put(lnd, peer)


@FUZZ
@given(chunks=streams)
def test_established_connection_fuzz_never_raises(chunks: list[bytes]) -> None:
    """Garbage after a real CM handshake: the connection closes, nothing raises; a new
    connection from the same peer still works."""
    lnd, peer = O2ibLND(incarnation=5), O2ibLND(incarnation=6)
    lnd.startup_ni(A)
    peer.startup_ni(B)
    assert good_put(lnd, peer)
    (c,) = lnd.streams.values()
    for data in chunks:
        lnd.receive(c.stream, data, 0.0)
    assert len(lnd.errors) <= 1 and all("\n" not in e for e in lnd.errors)
    lnd.handle_timer(100.0)  # every timer due: nothing raises
    fresh = O2ibLND(incarnation=7)  # the peer restarted (a new incarnation: CONN_STALE once)
    fresh.startup_ni(B)
    assert good_put(lnd, fresh)


GARBAGE = [b"\x00" * 64, b"\xff\xff\xff\xff" + b"A" * 60, struct.pack("<IB", 5, 1) + b"zzzz",
           b"GET / HTTP/1.0\r\n\r\n"]


@pytest.mark.mininet
@pytest.mark.topology(str(O2PAIR))
def test_garbage_on_port_987_is_one_line_and_the_node_lives(topology: Any) -> None:
    tb = topology
    base = Baseline.take(tb)
    c1 = tb.node("c1")
    ip = c1.nids[0].split("@")[0]
    code = ("import socket,sys,time\n"
            f"for g in {GARBAGE!r}:\n"
            f"    s=socket.create_connection(('{ip}',987),timeout=5); s.sendall(g)\n"
            "    s.settimeout(3)\n"
            "    try:\n        s.recv(100)\n    except OSError:\n        pass\n"
            "    s.close()\n")
    res = tb.node("x1").exec([sys.executable, "-c", code], timeout=60)
    assert res.rc == 0, res
    base.verify()
    log = c1.log()
    assert "Traceback" not in log
    lines = [ln for ln in log.splitlines() if "o2iblnd: port 987 stream" in ln]
    assert len(lines) == len(GARBAGE) - 1 or len(lines) == len(GARBAGE), lines
