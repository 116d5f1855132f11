"""ksocklnd V4 (large NIDs): connreq v2, the 80-byte hello, ``lnet_hdr_nid16`` frames, and the
connection machine speaking them (socklnd_proto.c ``ksocknal_send_hello_v4``,
``ksocknal_recv_hello_v4``, ``ksocknal_pack_msg_v4``; acceptor.c ``lnet_connect`` /
``lnet_accept``; issue 26 item 8)."""

from __future__ import annotations

import struct

import pytest

from nodes.lnd import lnethdr, wire, wire6
from nodes.lnd.framing import ConnreqReceived, HelloReceived, KsockConnection, LNetMessageReceived
from nodes.lnd.handshake import protocol
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
from nodes.lnet.nid import NID

A, B = NID.parse("2001:db8:6::1@tcp"), NID.parse("2001:db8:6::2@tcp")
V4NID = NID.parse("10.40.0.2@tcp")


def _put(src: NID, dst: NID, n: int) -> LNetHdr:
    return LNetHdr(dst, src, 12345, 12345, MsgType.PUT, n, WireHandle(7, 8), 0xABC, 5, 4, 0)


def test_struct_lnet_nid_layout() -> None:
    """20 bytes: nid_size, nid_type, big-endian nid_num, nid_addr big-endian (a nid4 in
    nid_addr[0], zeros after)."""
    assert wire6.pack_nid(NID.parse("2001:db8::1@tcp3")) == (
        bytes((12, 2)) + b"\x00\x03" + bytes.fromhex("20010db8000000000000000000000001"))
    assert wire6.pack_nid(V4NID) == bytes((0, 2, 0, 0, 10, 40, 0, 2)) + bytes(12)
    for nid in (A, V4NID):
        assert wire6.unpack_nid(wire6.pack_nid(nid)) == nid
    with pytest.raises(WireProtocolError, match="nid_size 4"):
        wire6.unpack_nid(bytes((4, 2)) + bytes(18))


def test_connreq_v2_for_large_nid_only() -> None:
    """``lnet_connect``: v1 (16 bytes) for a nid4 peer, v2 (version 2, 28 bytes) for a large one."""
    assert wire6.pack_connreq(V4NID) == wire.pack_connreq(V4NID)
    req = wire6.pack_connreq(B)
    assert len(req) == wire6.CONNREQ2_SIZE == 28
    assert struct.unpack_from("<II", req) == (0xACCE7100, 2)
    assert wire6.unpack_connreq(req, False) == B
    with pytest.raises(WireProtocolError, match="unsupported connreq version 3"):
        wire6.connreq_size(3)


def test_hello_v4_layout_and_flip() -> None:
    """80 bytes; a byte-swapped peer's pids, incarnations and ctype are swabbed, the NIDs not."""
    hello = wire.KsockHello(A, B, 12345, 12345, 99, 0, wire.SOCKLND_CONN_BULK_IN, (),
                            wire.KSOCK_PROTO_V4)
    data = wire6.pack_hello(hello)
    assert len(data) == wire6.HELLO4_SIZE == 80
    assert struct.unpack_from("<II", data) == (wire.LNET_PROTO_MAGIC, 4)
    assert data[8:28] == wire6.pack_nid(A) and data[28:48] == wire6.pack_nid(B)
    assert wire6.unpack_hello(data, False) == hello
    flipped = wire6.pack_hello(hello, flip=True)
    assert flipped[8:48] == data[8:48]
    assert wire6.unpack_hello(flipped, True) == hello


def test_hdr_nid16_round_trip_and_size() -> None:
    """``lnet_hdr_to_nid16``: 96 bytes, the two NIDs as ``struct lnet_nid`` then the same
    32-bit fields and 40-byte union as ``lnet_hdr_nid4``; a routed message keeps a nid4
    destination and a large source."""
    for hdr in (_put(A, B, 100), _put(A, V4NID, 0)):
        data = wire6.pack_hdr(hdr)
        assert len(data) == wire6.LNET_HDR16_SIZE == 96
        assert data[40:] == lnethdr.pack_hdr(hdr)[16:]
        back = wire6.unpack_hdr(data)
        assert (back.src_nid, back.dest_nid) == (hdr.src_nid, hdr.dest_nid)
        assert (back.match_bits, back.payload_length, back.offset) == (0xABC, hdr.payload_length,
                                                                       0)


def test_protocol_follows_the_address_family() -> None:
    """``ksocknal_create_conn``: V4 to an AF_INET6 peer, V3 to AF_INET (a v4-only peer never
    sees V4, with or without --large)."""
    assert protocol("2001:db8:6::2") == wire.KSOCK_PROTO_V4
    assert protocol("10.40.0.2") == wire.KSOCK_PROTO_V3


def test_v4_connection_end_to_end() -> None:
    """Active and passive machines: connreq v2 + V4 hello, the reply, then a V4 PUT frame
    (ksock_msg_hdr + lnet_hdr_nid16 + payload) delivered with its large NIDs."""
    act, pas = KsockConnection(active=True), KsockConnection(active=False)
    ours = wire.KsockHello(A, B, 12345, 12345, 1, 0, wire.SOCKLND_CONN_ANY, (),
                           wire.KSOCK_PROTO_V4)
    evs = pas.receive_data(act.send_handshake(B, ours))
    assert isinstance(evs[0], ConnreqReceived) and evs[0].nid == B
    assert isinstance(evs[1], HelloReceived) and evs[1].hello == ours
    assert pas.version == wire.KSOCK_PROTO_V4
    reply = wire.KsockHello(B, A, 12345, 12345, 2, 1, wire.SOCKLND_CONN_ANY, (), pas.version)
    got = act.receive_data(pas.send_hello(reply))
    assert isinstance(got[0], HelloReceived) and got[0].hello.version == wire.KSOCK_PROTO_V4
    hdr = _put(A, B, 300)
    frame = act.send_lnet(hdr, bytes(range(256)) + bytes(44))
    assert len(frame) == 24 + 96 + 300
    (msg,) = pas.receive_data(frame)
    assert isinstance(msg, LNetMessageReceived)
    assert (msg.hdr.src_nid, msg.hdr.dest_nid, len(msg.payload)) == (A, B, 300)
    csum = act.send_lnet(hdr, bytes(300), checksum=True)  # ksm_csum over the V4 frame
    (msg,) = pas.receive_data(csum)
    assert isinstance(msg, LNetMessageReceived) and msg.hdr.src_nid == A


def test_v3_connection_unchanged() -> None:
    """A nid4 connection still sends connreq v1, the 56-byte hello and 72-byte headers."""
    act = KsockConnection(active=True)
    n1, n2 = NID.parse("10.0.0.1@tcp"), NID.parse("10.0.0.2@tcp")
    data = act.send_handshake(n2, wire.KsockHello(n1, n2, 1, 1, 1, 0))
    assert len(data) == wire.CONNREQ_SIZE + wire.HELLO_SIZE
    act.receive_data(wire.pack_hello(wire.KsockHello(n2, n1, 1, 1, 2, 1)))
    assert len(act.send_lnet(_put(n1, n2, 0), b"")) == 24 + 72


def test_bad_v4_hello_refused() -> None:
    """A V4 hello with a NID of an unknown address size is a protocol error."""
    pas = KsockConnection(active=False)
    pas.receive_data(wire6.pack_connreq(B))
    bad = bytearray(wire6.pack_hello(wire.KsockHello(A, B, 1, 1, 1, 0, 0, (),
                                                     wire.KSOCK_PROTO_V4)))
    bad[8] = 8  # src nid_size 8
    with pytest.raises(WireProtocolError, match="nid_size 8"):
        pas.receive_data(bytes(bad))


def test_sizes_agree_with_wire() -> None:
    """wire6's own constants (typed Final for mypyc) are wire.py's."""
    assert wire6.LNET_FRAME_HEAD16 - wire6.LNET_HDR16_SIZE == wire.KSOCK_MSG_HDR_SIZE
    assert wire6.connreq_size(1) == wire.CONNREQ_SIZE
