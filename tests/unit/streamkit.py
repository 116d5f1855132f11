"""Socklnd byte streams for the stream tracker's tests (faults/flowtrack.py): a connecting
side's connreq, hello and ksock_msgs built with ``nodes/lnd/wire.py``, with each unit's span,
and seeded segmentations."""

from __future__ import annotations

import random

from faults.flowtrack import HEAD_MAX, LNetMsg
from nodes.lnd import wire
from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
from nodes.lnet.nid import NID

A = NID.parse("10.10.0.1@tcp")
B = NID.parse("10.10.0.2@tcp")
W = WireHandle(1, 2)
KEY = b"\x0a\x0a\x00\x01\x0a\x0a\x00\x02\x03\xff\x03\xdc"
ISN = 1_000_000


def lnet_msg(mtype: MsgType, size: int, portal: int = 52) -> bytes:
    base = {"dest_nid": B, "src_nid": A, "dest_pid": 12345, "src_pid": 12345,
            "type": mtype, "payload_length": size, "wmd": W}
    extra = {MsgType.PUT: {"match_bits": 9, "ptl_index": portal, "offset": 0},
             MsgType.GET: {"match_bits": 9, "ptl_index": portal, "offset": 0,
                           "sink_length": 4096},
             MsgType.ACK: {"match_bits": 9, "mlength": 4096}}.get(mtype, {})
    hdr = LNetHdr(**base, **extra)
    return wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=hdr,
                                       payload=bytes((i * 7) & 0xFF for i in range(size))))


def stream(n_puts: int = 40, seed: int = 0) -> tuple[bytes, list[tuple[int, int, int, str]]]:
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
            units.append((lnet_msg(MsgType.GET, 0), HEAD_MAX, "GET"))
        else:
            units.append((lnet_msg(MsgType.PUT, rng.choice((0, 33, 4096, 9000))), HEAD_MAX, "PUT"))
    out, spans, at = b"", [], 0
    for raw, need, name in units:
        spans.append((at, at + len(raw), need, name))
        out += raw
        at += len(raw)
    return out, spans


def cuts(n: int, rng: random.Random, sizes: tuple[int, ...] = (1, 7, 100, 1448, 65160)
          ) -> list[tuple[int, int]]:
    out, at = [], 0
    while at < n:
        step = min(n - at, rng.choice(sizes))
        out.append((at, at + step))
        at += step
    return out


def expected(spans: list[tuple[int, int, int, str]], lo: int, hi: int, seen_to: int
              ) -> list[str]:
    return [name for s, e, need, name in spans
            if name and s < hi and e > lo and s + need <= seen_to]


def names(msgs: list[LNetMsg]) -> list[str]:
    return [m.type for m in msgs]
