"""The scapy LNet layers against the wire codec (STYLE rule 6): a corpus built with
``nodes/lnd/wire.py`` dissects field for field and rebuilds the same bytes; the struct
prefilter of the interposer agrees with both (STYLE rule 7)."""

from __future__ import annotations

import pytest
from scapy.config import conf
from scapy.layers.inet import IP, TCP
from scapy.packet import Raw

from faults import lnet_layers as L
from faults.prefilter import Matcher, classify
from faults.spec import parse_match
from nodes.lnd import wire
from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
from nodes.lnet.nid import NID

conf.debug_dissector = True  # a layer bug raises instead of becoming Raw

A = NID.parse("10.10.0.1@tcp")
B = NID.parse("10.11.0.2@tcp1")
W = WireHandle(0x1122334455667788, 0x99AABBCCDDEEFF00)


def _hdrs() -> list[LNetHdr]:
    base = {"dest_nid": B, "src_nid": A, "dest_pid": 12345, "src_pid": 0x80000007}
    return [
        LNetHdr(**base, type=MsgType.ACK, payload_length=0, wmd=W, match_bits=7, mlength=4096),
        LNetHdr(**base, type=MsgType.PUT, payload_length=33, wmd=W, match_bits=0xDEAD,
                hdr_data=0xFEED, ptl_index=31, offset=8),
        LNetHdr(**base, type=MsgType.GET, payload_length=0, wmd=W, match_bits=1 << 63,
                ptl_index=0, offset=16, sink_length=272),
        LNetHdr(**base, type=MsgType.REPLY, payload_length=5, wmd=W),
        LNetHdr(**base, type=MsgType.HELLO, payload_length=0, incarnation=0xABCDEF,
                hello_type=2),
    ]


def _payload(h: LNetHdr) -> bytes:
    return bytes((i * 7) & 0xFF for i in range(h.payload_length))


@pytest.mark.parametrize("hdr", _hdrs(), ids=lambda h: h.type.name)
def test_ksock_msg_dissects_field_for_field_and_rebuilds(hdr: LNetHdr) -> None:
    raw = wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=hdr, payload=_payload(hdr)),
                        checksum=True)
    m = L.KsockMsg(raw)
    h = m[L.LNetHdr]
    assert m.type == wire.KSOCK_MSG_LNET and m.csum == wire.unpack_msg(raw).csum
    assert (h.dest_nid, h.src_nid) == (B.nid4, A.nid4)
    assert (h.dest_pid, h.src_pid, h.type, h.payload_length) == (
        hdr.dest_pid, hdr.src_pid, int(hdr.type), hdr.payload_length)
    if hdr.type != MsgType.HELLO:
        assert (h.wmd_interface, h.wmd_object) == (W.interface_cookie, W.object_cookie)
    expect = {MsgType.ACK: {"match_bits": 7, "mlength": 4096},
              MsgType.PUT: {"match_bits": 0xDEAD, "hdr_data": 0xFEED, "ptl_index": 31,
                            "offset": 8},
              MsgType.GET: {"match_bits": 1 << 63, "ptl_index": 0, "offset": 16,
                            "sink_length": 272},
              MsgType.REPLY: {},
              MsgType.HELLO: {"incarnation": 0xABCDEF, "hello_type": 2}}[hdr.type]
    for key, value in expect.items():
        assert getattr(h, key) == value, key
    assert bytes(h.payload) == _payload(hdr)
    assert bytes(m) == raw


@pytest.mark.parametrize("hdr", _hdrs(), ids=lambda h: h.type.name)
def test_layers_built_from_scratch_equal_wire_bytes(hdr: LNetHdr) -> None:
    fields = {"dest_nid": B.nid4, "src_nid": A.nid4, "dest_pid": hdr.dest_pid,
              "src_pid": hdr.src_pid, "type": int(hdr.type)}
    if hdr.type != MsgType.HELLO:
        fields |= {"wmd_interface": W.interface_cookie, "wmd_object": W.object_cookie}
    for key in ("match_bits", "mlength", "hdr_data", "ptl_index", "offset", "sink_length",
                "incarnation", "hello_type"):
        fields[key] = getattr(hdr, key)
    pkt = L.KsockMsg() / L.LNetHdr(**{k: v for k, v in fields.items()
                                      if _applies(k, hdr.type)})
    if hdr.payload_length:
        pkt = pkt / Raw(_payload(hdr))
    # payload_length was left None: post_build filled it
    assert bytes(pkt) == wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=hdr,
                                                     payload=_payload(hdr)))


def _applies(key: str, t: MsgType) -> bool:
    table = {"match_bits": (0, 1, 2), "mlength": (0,), "hdr_data": (1,), "ptl_index": (1, 2),
             "offset": (1, 2), "sink_length": (2,), "incarnation": (4,), "hello_type": (4,)}
    return key not in table or int(t) in table[key]


def test_noop_and_following_message_become_padding() -> None:
    noop = wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_NOOP, zc_cookies=(3, 4)))
    put = wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=_hdrs()[1],
                                      payload=_payload(_hdrs()[1])))
    m = L.KsockMsg(noop + put)
    assert (m.type, m.zc_cookie0, m.zc_cookie1) == (wire.KSOCK_MSG_NOOP, 3, 4)
    assert bytes(m.payload) == put  # the next message is not swallowed
    two = L.KsockMsg(put + noop)
    assert bytes(two[L.LNetHdr].payload.load) == _payload(_hdrs()[1])
    assert bytes(two) == put + noop


def test_hello_and_connreq_dissect_and_rebuild() -> None:
    hello = wire.KsockHello(A, B, 12345, 12345, 111, 0, wire.SOCKLND_CONN_NONE,
                            ips=(0x0A0A0001, 0x0A0B0001))
    connreq = wire.pack_connreq(B)
    raw = connreq + wire.pack_hello(hello)
    p = L.KsockMsg(raw)  # TCP 988 binds KsockMsg; its dispatch_hook picks the layer
    assert isinstance(p, L.LNetAcceptorConnreq) and p.nid == B.nid4
    h = p[L.KsockHello]
    assert (h.src_nid, h.dst_nid, h.src_incarnation, h.ctype, h.nips, h.ips) == (
        A.nid4, B.nid4, 111, -1, 2, [0x0A0A0001, 0x0A0B0001])
    assert bytes(p) == raw
    built = L.LNetAcceptorConnreq(nid=B.nid4) / L.KsockHello(
        src_nid=A.nid4, dst_nid=B.nid4, src_pid=12345, dst_pid=12345, src_incarnation=111,
        ctype=-1, ips=[0x0A0A0001, 0x0A0B0001])
    assert bytes(built) == raw  # nips filled in post_build


def test_tcp_binding_and_reassembly() -> None:
    hdr = _hdrs()[1]
    msg = wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=hdr, payload=_payload(hdr)))
    seg = IP(bytes(IP(src="10.10.0.1", dst="10.11.0.2") / TCP(sport=1023, dport=988) / msg))
    assert seg[L.LNetHdr].ptl_index == 31
    assert L.KsockMsg.tcp_reassemble(msg[:50], {}) is None
    whole = L.KsockMsg.tcp_reassemble(msg, {})
    assert whole is not None and bytes(whole) == msg
    assert L.unit_length(wire.pack_connreq(B)) == wire.CONNREQ_SIZE


def test_prefilter_agrees_with_layers() -> None:
    for hdr in _hdrs():
        msg = wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=hdr, payload=_payload(hdr)))
        pkt = classify(bytes(IP(src="10.10.0.1", dst="10.11.0.2") / TCP(sport=988, dport=600)
                             / msg))
        assert pkt is not None and pkt.lnet_type == hdr.type.name
        assert (pkt.src_nid, pkt.dst_nid) == (A.nid4, B.nid4)
        assert pkt.portal == (hdr.ptl_index if hdr.type in (MsgType.PUT, MsgType.GET) else None)
    hello = classify(bytes(IP() / TCP(dport=988) / wire.pack_connreq(B)))
    assert hello is not None and hello.lnet_type == "HELLO"
    other = classify(bytes(IP() / TCP(dport=80) / msg))
    assert other is not None and other.lnet_type is None


def test_matcher_type_nid_portal_and_forwarded() -> None:
    put = _hdrs()[1]
    raw = bytes(IP(src="10.10.0.1", dst="10.11.0.2") / TCP(sport=1000, dport=988)
                / wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=put,
                                              payload=_payload(put))))
    pkt = classify(raw)
    assert pkt is not None
    assert Matcher(parse_match({"proto": "lnet", "type": ["PUT"], "portal": 31}))(pkt)
    assert not Matcher(parse_match({"proto": "lnet", "type": ["GET", "ACK"]}))(pkt)
    assert Matcher(parse_match({"proto": "lnet", "src_nid": str(A), "dst_nid": str(B)}))(pkt)
    assert not Matcher(parse_match({"proto": "lnet", "src_nid": str(B)}))(pkt)
    assert not Matcher(parse_match({"proto": "lnet", "portal": 4}))(pkt)
    # forwarded: neither end of the LNet message is a NID of this node (a router)
    assert Matcher(parse_match({"proto": "lnet", "forwarded": True}), ["10.10.0.9@tcp"])(pkt)
    assert not Matcher(parse_match({"proto": "lnet", "forwarded": True}), [str(A)])(pkt)
    assert not Matcher(parse_match({"proto": "icmp"}))(pkt)
