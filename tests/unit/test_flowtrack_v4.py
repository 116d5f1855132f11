"""The stream tracker on socklnd V4 (IPv6, 16-byte NIDs; issue 26 item 8): connreq v2, the
80-byte V4 hello and ksock_msgs carrying ``lnet_hdr_nid16`` (socklnd_proto.c
``ksocknal_pack_msg_v4``, lnet-idl.h ``struct lnet_hdr_nid16``), built with
``nodes/lnd/wire6.py`` and cut at seeded places; every message is classified with its NIDs
(as ``unit6.nid_key``) and portal, and a rule's ``match.type``/NIDs select them."""

from __future__ import annotations

import random

import pytest

from faults.flowtrack import FlowTracker, parse_unit, scan
from faults.prefilter import Matcher, classify
from faults.spec import parse_match
from faults.unit6 import nid_key
from nodes.lnd import wire, wire6
from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
from nodes.lnet.nid import NID
from tests.unit.streamkit import cuts

A = NID.parse("2001:db8:16::1@tcp6")
B = NID.parse("2001:db8:16::2@tcp6")
KEY = bytes(32) + b"\x03\xff\x03\xdc"


def _msg(mtype: MsgType, size: int, portal: int = 52) -> bytes:
    extra = {MsgType.PUT: {"match_bits": 9, "ptl_index": portal, "offset": 0},
             MsgType.GET: {"match_bits": 9, "ptl_index": portal, "offset": 0,
                           "sink_length": 4096}}.get(mtype, {})
    hdr = LNetHdr(dest_nid=B, src_nid=A, dest_pid=12345, src_pid=12345, type=mtype,
                  payload_length=size, wmd=WireHandle(1, 2), **extra)
    return wire6.pack_lnet_head(hdr) + bytes(size)


def _stream(n: int, seed: int) -> tuple[bytes, list[str]]:
    rng = random.Random(seed)
    hello = wire6.pack_hello(wire.KsockHello(A, B, 12345, 12345, 7, 0,
                                             version=wire.KSOCK_PROTO_V4))
    out, names = wire6.pack_connreq(B) + hello, ["HELLO", "HELLO"]
    for _ in range(n):
        if rng.random() < 0.2:
            out += _msg(MsgType.GET, 0)
            names.append("GET")
        else:
            out += _msg(MsgType.PUT, rng.choice((0, 33, 4096, 9000)))
            names.append("PUT")
    return out, names


def test_v4_units_have_their_real_sizes_and_nids() -> None:
    """connreq_v2 is 28 bytes, the V4 hello 80, an LNET frame 24 + 96 + payload."""
    assert parse_unit(wire6.pack_connreq(B), 0, wide=True)[0] == 28
    put = _msg(MsgType.PUT, 33, portal=7)
    length, msg = parse_unit(put, 0, wide=True)
    assert length == 24 + 96 + 33
    assert msg is not None and (msg.type, msg.src_nid, msg.dst_nid, msg.portal) == \
        ("PUT", nid_key(A), nid_key(B), 7)
    assert nid_key(A) > 1 << 64  # never mistaken for a nid4


@pytest.mark.parametrize("seed", range(6))
def test_every_v4_message_whatever_the_segmentation(seed: int) -> None:
    raw, names = _stream(40, seed)
    t = FlowTracker()
    rng = random.Random(seed)
    seen: list[str] = []
    for lo, hi in cuts(len(raw), rng):
        seen += [m.type for m in t.feed(KEY, 1000 + lo, 0, raw[lo:hi], wide=True)]
    assert set(seen) == set(names)
    assert t.counters["messages"] == len(names)
    assert t.counters["gaps"] == 0


def test_a_v4_stream_read_as_v3_is_misread() -> None:
    """The address family decides the layout: the same bytes read as V3 lose step."""
    raw, names = _stream(10, 1)
    v3 = FlowTracker()
    v3.feed(KEY, 1000, 0, raw, wide=False)
    assert v3.counters["messages"] != len(names)


def test_scan_resynchronises_on_a_v4_stream() -> None:
    raw, _ = _stream(10, 2)
    found = scan(raw[5:], wide=True)
    assert found and all(n > 0 for _o, n, _m in found)
    assert {m.type for _o, _n, m in found if m is not None} <= {"PUT", "GET", "HELLO"}


def _ipv6_tcp(payload: bytes, sport: int = 1023, dport: int = 988) -> bytes:
    tcp = bytearray(20)
    tcp[0:4] = sport.to_bytes(2, "big") + dport.to_bytes(2, "big")
    tcp[4:8] = (5000).to_bytes(4, "big")
    tcp[12] = 5 << 4
    head = bytes([0x60, 0, 0, 0]) + (20 + len(payload)).to_bytes(2, "big") + bytes([6, 64])
    return head + A.addr.to_bytes(16, "big") + B.addr.to_bytes(16, "big") + bytes(tcp) \
        + payload


def test_prefilter_classifies_an_ipv6_segment_and_a_put_rule_matches() -> None:
    pkt = classify(_ipv6_tcp(_msg(MsgType.PUT, 0, portal=4)))
    assert pkt is not None and pkt.v6 and pkt.src == "2001:db8:16::1"
    assert (pkt.lnet_type, pkt.src_nid, pkt.dst_nid, pkt.portal) == \
        ("PUT", nid_key(A), nid_key(B), 4)
    assert Matcher(parse_match({"proto": "lnet", "type": ["PUT"], "src_nid": str(A)}))(pkt)
    assert not Matcher(parse_match({"proto": "lnet", "type": ["GET"]}))(pkt)
    assert not Matcher(parse_match({"proto": "lnet", "type": ["PUT"], "src_nid": str(B)}))(pkt)


def test_forwarded_rule_knows_a_routers_large_nid_in_both_forms() -> None:
    """A router with a large NID (topologies/mixed-v4v6-routed.yaml): a message to it is not
    ``forwarded`` whether it arrives on a V4 connection (16-byte NID) or on a V3 one, which
    carries the NID's ``lnet_nid_to_nid4`` form."""
    m = Matcher(parse_match({"forwarded": True}), [str(B)])
    assert not m.fields("PUT", nid_key(A), nid_key(B), 4)
    assert not m.fields("PUT", 0x20000_0A0A0001, B.nid4, 4)
    assert m.fields("PUT", nid_key(A), 0x20000_0A0A0002, 4)
