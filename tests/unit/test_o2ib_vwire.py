"""The emulated fabric's packet codec on the receive path a daemon uses (nodes/o2ib/vwire.py):
bytes written straight into the reader's buffers, a large RDMA body into a pooled buffer of
its own, and packets written apart from their bodies (issue 28, benchmarks/o2ib.py)."""

from __future__ import annotations

import random

import pytest

from nodes.lnd.bufpool import BufferPool
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_MTU
from nodes.o2ib import vwire
from nodes.o2ib.vwire import Kind, Packet, PacketReader

BIG = bytes(range(256)) * (LNET_MTU // 256)


def stream(pkts: list[Packet]) -> bytes:
    return b"".join(h + bytes(t) for h, t in (vwire.pack_parts(p) for p in pkts))


def recv_into(r: PacketReader, data: bytes, rng: random.Random) -> list[Packet]:
    """As a socket's recv_into would fill the reader: chunks of random sizes."""
    out: list[Packet] = []
    i = 0
    while i < len(data):
        buf = r.get_buffer()
        n = min(len(buf), len(data) - i, rng.randint(1, 70000))
        buf[:n] = data[i:i + n]
        i += n
        out += r.buffer_updated(n)
    return out


def test_pack_parts_keeps_a_large_body_apart_uncopied() -> None:
    body = memoryview(BIG)
    head, tail = vwire.pack_parts(Packet(Kind.WRITE, (1, 0x101, 0), body))
    assert tail is body and len(head) == 4 + 1 + 16
    small, none = vwire.pack_parts(Packet(Kind.SEND, (2,), b"x" * 100))
    assert none == b"" and small == vwire.pack(Packet(Kind.SEND, (2,), b"x" * 100))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reader_in_place_gives_the_packets_and_reuses_the_pooled_body(seed: int) -> None:
    rng = random.Random(seed)
    pkts = [Packet(Kind.SEND, (i,), bytes([i]) * rng.randint(0, 4000)) for i in range(50)]
    pkts[10] = Packet(Kind.WRITE, (10, 0x101, 0), BIG)
    pkts[30] = Packet(Kind.WRITE, (30, 0x102, 8), BIG[:20000])
    pool = BufferPool(keep=1, limit=4)
    r = PacketReader(pool)
    got = recv_into(r, stream(pkts), rng)
    assert [(p.kind, p.fields, bytes(p.data)) for p in got] == \
        [(p.kind, p.fields, bytes(p.data)) for p in pkts]
    big = got[10].data
    assert isinstance(big, memoryview) and big.readonly  # a view of the pool's buffer
    held = pool.size
    del got, big
    again = recv_into(r, stream([Packet(Kind.WRITE, (99, 1, 0), BIG)]), rng)
    assert bytes(again[0].data) == BIG and pool.size == held  # reused, not a fresh 1 MiB


def test_reader_bad_length_is_one_line_and_stays_failed() -> None:
    r = PacketReader(BufferPool())
    good = vwire.pack(Packet(Kind.ACK, (1,)))
    buf = r.get_buffer()
    data = good + (vwire.MAX_PACKET + 1).to_bytes(4, "little") + b"\x0b"
    buf[:len(data)] = data
    (p,) = r.buffer_updated(len(data))  # the good packet before the error is kept
    assert p.kind is Kind.ACK and r.error is not None
    with pytest.raises(WireProtocolError, match="packet length"):
        r.buffer_updated(0)


def test_reader_unknown_kind_of_a_large_packet_fails_before_its_body() -> None:
    r = PacketReader(BufferPool())
    data = (50000).to_bytes(4, "little") + bytes([77]) + bytes(30)
    buf = r.get_buffer()
    buf[:len(data)] = data
    with pytest.raises(WireProtocolError, match="unknown packet kind 77"):
        r.buffer_updated(len(data))
