"""The interposer's per-packet path with stream tracking (issue 32 item 2), without a kernel
queue: raw IPv4 segments of a socklnd connection (built with scapy around ``wire.py`` bytes)
go through ``Interposer.on_packet`` as NFQUEUE packets would, and a ``type: PUT`` rule must
select every segment carrying PUT bytes, whatever the segmentation (MSS-sized or GSO-sized),
and count each PUT once."""

from __future__ import annotations

import random
from typing import Any

import pytest
from scapy.layers.inet import IP, TCP

from faults.interposer import Interposer
from faults.interposer_spec import InterposerSpec
from faults.spec import parse_match, parse_params
from nodes.lnd import wire
from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
from nodes.lnet.nid import NID

A = NID.parse("10.10.0.1@tcp")
B = NID.parse("10.10.0.2@tcp")


class _Queued:
    """What netfilterqueue hands the callback: the bytes and a verdict."""

    def __init__(self, data: bytes) -> None:
        self.data, self.verdict = data, ""

    def get_payload(self) -> bytes:
        return self.data

    def accept(self) -> None:
        self.verdict = "accept"

    def drop(self) -> None:
        self.verdict = "drop"

    def set_payload(self, data: bytes) -> None:
        self.data = data


def _msg(mtype: MsgType, size: int, portal: int = 52) -> bytes:
    extra: dict[str, Any] = {MsgType.PUT: {"match_bits": 1, "ptl_index": portal, "offset": 0},
                             MsgType.ACK: {"match_bits": 1, "mlength": size}}[mtype]
    hdr = LNetHdr(dest_nid=B, src_nid=A, dest_pid=12345, src_pid=12345, type=mtype,
                  payload_length=size if mtype == MsgType.PUT else 0, wmd=WireHandle(1, 2),
                  **extra)
    return wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=hdr, payload=bytes(
        size if mtype == MsgType.PUT else 0)))


def _interposer(match: dict[str, Any]) -> Interposer:
    return Interposer(InterposerSpec(kind="loss", params=parse_params("loss", {"rate": 1.0}),
                                     seed=1, match=parse_match(match), queue=1,
                                     counters="/nonexistent"))


@pytest.mark.parametrize("mss", [1448, 65160, 0])
def test_a_put_rule_selects_every_segment_of_every_put(mss: int) -> None:
    """2 connections' worth of 4 KiB PUTs with ACKs between them: every segment with PUT bytes
    dropped, the others accepted; ``messages_matched`` is the number of PUTs (mss 0: random
    segment sizes from 1 byte up)."""
    rng = random.Random(mss)
    units = [_msg(MsgType.PUT, 4096) if rng.random() < 0.8 else _msg(MsgType.ACK, 0)
             for _ in range(300)]
    stream, spans, at = b"", [], 0
    for u in units:
        spans.append((at, at + len(u), u[24 + 24] == int(MsgType.PUT)))
        stream += u
        at += len(u)
    ip = _interposer({"type": "PUT"})
    isn = 4_000_000_000
    syn = _Queued(bytes(IP(src="10.10.0.1", dst="10.10.0.2")
                        / TCP(sport=1023, dport=988, seq=isn - 1, flags="S")))
    ip.on_packet(syn)
    at = 0
    while at < len(stream):
        n = mss or rng.choice((1, 50, 700, 1448, 9000))
        seg = stream[at:at + n]
        q = _Queued(bytes(IP(src="10.10.0.1", dst="10.10.0.2")
                          / TCP(sport=1023, dport=988, seq=(isn + at) % (1 << 32), flags="A")
                          / seg))
        ip.on_packet(q)
        hi = at + len(seg)
        # a PUT whose header is complete by this segment's end, overlapping it
        carries = any(put and s < hi and e > at and s + 96 <= hi for s, e, put in spans)
        assert q.verdict == ("drop" if carries else "accept"), (at, hi)
        at = hi
    snap = ip.snapshot()
    assert snap["messages_matched"] == sum(1 for *_x, put in spans if put)
    assert snap["messages"] == len(units)
    assert snap["resyncs"] == snap["gaps"] == 0 and snap["flows"] == 1


def test_a_rule_without_lnet_keys_does_not_follow_streams() -> None:
    ip = _interposer({"proto": "lnet"})
    q = _Queued(bytes(IP(src="10.10.0.1", dst="10.10.0.2") / TCP(sport=1023, dport=988)
                      / bytes(2000)))
    ip.on_packet(q)
    assert ip.tracker is None and q.verdict == "drop" and "flows" not in ip.snapshot()
