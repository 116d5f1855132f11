"""Byte-exact tests of the ksocklnd V3 codec (nodes/lnd/wire.py) and the framing machine."""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodes.lnd import framehead, lnethdr, wire
from nodes.lnd.connstate import ConnState, LocalProtocolError
from nodes.lnd.framing import (
    ConnreqReceived,
    HelloReceived,
    KsockConnection,
    LNetMessageReceived,
    NoopReceived,
)
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_HDR_SIZE, LNET_MTU, LNetHdr, MsgType, WireHandle
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

A = NID.parse("192.168.1.2@tcp")
B = NID.parse("192.168.1.3@tcp1")


def _put(payload: bytes = b"hello") -> LNetHdr:
    return LNetHdr(dest_nid=B, src_nid=A, dest_pid=12345, src_pid=12345, type=MsgType.PUT,
                   payload_length=len(payload), wmd=WireHandle(0x1111, 0x2222),
                   match_bits=0x0102030405060708, hdr_data=0xAABB, ptl_index=7, offset=64)


HEADERS = [
    LNetHdr(dest_nid=B, src_nid=A, dest_pid=1, src_pid=2, type=MsgType.ACK, payload_length=0,
            wmd=WireHandle(3, 4), match_bits=5, mlength=4096),
    _put(),
    LNetHdr(dest_nid=B, src_nid=A, dest_pid=1, src_pid=2, type=MsgType.GET, payload_length=0,
            wmd=WireHandle(3, 4), match_bits=1 << 63, ptl_index=0, offset=8, sink_length=272),
    LNetHdr(dest_nid=A, src_nid=B, dest_pid=1, src_pid=2, type=MsgType.REPLY,
            payload_length=3, wmd=WireHandle(9, 10)),
    LNetHdr(dest_nid=A, src_nid=B, dest_pid=1, src_pid=2, type=MsgType.HELLO,
            payload_length=0, incarnation=0x123456789, hello_type=2),
]


def test_put_header_exact_bytes() -> None:
    b = lnethdr.pack_hdr(_put())
    assert len(b) == LNET_HDR_SIZE == 72
    assert b[0:8] == B.nid4.to_bytes(8, "little")
    assert b[0:8] == bytes([3, 1, 168, 192, 1, 0, 2, 0])  # 192.168.1.3, net (tcp=2, 1)
    assert b[8:16] == bytes([2, 1, 168, 192, 0, 0, 2, 0])
    assert b[16:20] == (12345).to_bytes(4, "little")
    assert b[20:24] == (12345).to_bytes(4, "little")
    assert b[24:28] == b"\x01\0\0\0"  # LNET_MSG_PUT
    assert b[28:32] == b"\x05\0\0\0"
    assert b[32:48] == (0x1111).to_bytes(8, "little") + (0x2222).to_bytes(8, "little")
    assert b[48:56] == bytes([8, 7, 6, 5, 4, 3, 2, 1])
    assert b[56:64] == (0xAABB).to_bytes(8, "little")
    assert b[64:68] == b"\x07\0\0\0"
    assert b[68:72] == b"\x40\0\0\0"


@pytest.mark.parametrize("hdr", HEADERS, ids=lambda h: h.type.name)
def test_hdr_round_trip(hdr: LNetHdr) -> None:
    b = lnethdr.pack_hdr(hdr)
    assert len(b) == 72
    assert lnethdr.unpack_hdr(b) == hdr


@pytest.mark.parametrize("hdr", HEADERS, ids=lambda h: h.type.name)
def test_frame_head_is_ksock_msg_hdr_then_packed_lnet_hdr(hdr: LNetHdr) -> None:
    """The one-``pack`` frame head (``framehead.py``, issue 13 msgrate) is byte for byte the
    ksock_msg_hdr (KSOCK_MSG_LNET, no checksum, no ZC cookies) followed by ``pack_hdr``, as
    ``wire.pack_lnet_head`` builds it; the connection machine sends it."""
    payload = bytes(hdr.payload_length)
    head = framehead.pack_head(hdr)
    assert head == struct.pack("<IIQQ", wire.KSOCK_MSG_LNET, 0, 0, 0) + lnethdr.pack_hdr(hdr)
    assert head == wire.pack_lnet_head(hdr, payload)
    assert len(head) == wire.LNET_FRAME_HEAD == 96
    if hdr.type is not MsgType.HELLO:
        c = KsockConnection(active=True)
        c.state = ConnState.RUNNING
        assert c.send_lnet_head(hdr, payload) == head


def test_union_padding_zero() -> None:
    ack, _, get, reply, hello = (lnethdr.pack_hdr(h) for h in HEADERS)
    assert ack[60:] == bytes(12)
    assert get[68:] == bytes(4)
    assert reply[48:] == bytes(24)
    assert hello[44:] == bytes(28)


@pytest.mark.parametrize("mutate, what", [
    (lambda b: b[:71], "short"),
    (lambda b: b[:24] + b"\x05\0\0\0" + b[28:], "type"),
    (lambda b: b[:28] + struct.pack("<I", LNET_MTU + 1) + b[32:], "payload_length"),
])
def test_unpack_hdr_rejects(mutate, what) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(WireProtocolError) as ei:
        lnethdr.unpack_hdr(mutate(lnethdr.pack_hdr(_put())))
    assert ei.value.hstatus == HStatus.REMOTE_ERROR, what


@pytest.mark.parametrize("t", [MsgType.ACK, MsgType.GET])
def test_ack_get_with_payload_rejected(t: MsgType) -> None:
    b = bytearray(lnethdr.pack_hdr(_put()))
    b[24:32] = struct.pack("<II", t, 1)
    with pytest.raises(WireProtocolError):
        lnethdr.unpack_hdr(bytes(b))


def _hello(**kw: object) -> wire.KsockHello:
    args: dict[str, object] = {"src_nid": A, "dst_nid": B, "src_pid": 12345, "dst_pid": 12345,
                               "src_incarnation": 77, "dst_incarnation": 0}
    args.update(kw)
    return wire.KsockHello(**args)  # type: ignore[arg-type]


def test_hello_layout_and_round_trip() -> None:
    h = _hello(ips=(0x0A000001,))
    b = wire.pack_hello(h)
    assert len(b) == 56 + 4
    assert b[0:4] == struct.pack("<I", wire.LNET_PROTO_MAGIC)
    assert b[4:8] == b"\x03\0\0\0"
    assert b[8:16] == A.nid4.to_bytes(8, "little")
    assert b[16:24] == B.nid4.to_bytes(8, "little")
    assert b[32:40] == (77).to_bytes(8, "little")
    assert b[48:52] == b"\0\0\0\0"  # SOCKLND_CONN_ANY
    assert b[52:56] == b"\x01\0\0\0"  # nips
    assert wire.unpack_hello(b) == h
    assert wire.unpack_hello(wire.pack_hello(h, flip=True)) == h  # byte-swapped peer
    none = _hello(ctype=wire.SOCKLND_CONN_NONE)
    assert wire.pack_hello(none)[48:52] == b"\xff\xff\xff\xff"
    assert wire.unpack_hello(wire.pack_hello(none)).ctype == wire.SOCKLND_CONN_NONE


@pytest.mark.parametrize("bad", [
    struct.pack("<I", wire.LNET_PROTO_TCP_MAGIC),  # V1
    struct.pack("<I", 0xDEADBEEF),
    struct.pack("<II", wire.LNET_PROTO_MAGIC, wire.KSOCK_PROTO_V2),
    struct.pack("<II", wire.LNET_PROTO_MAGIC, wire.KSOCK_PROTO_V4),
])
def test_hello_bad_magic_or_version(bad: bytes) -> None:
    with pytest.raises(WireProtocolError):
        wire.unpack_hello(bad + wire.pack_hello(_hello())[len(bad):])


def test_connreq() -> None:
    b = wire.pack_connreq(B)
    assert b == struct.pack("<IIQ", 0xACCE7100, 1, B.nid4)
    assert wire.unpack_connreq(b) == B
    assert wire.unpack_connreq(struct.pack(">IIQ", 0xACCE7100, 1, B.nid4)) == B
    with pytest.raises(WireProtocolError):
        wire.unpack_connreq(struct.pack("<IIQ", 0xACCE7100, 2, B.nid4))
    with pytest.raises(WireProtocolError):
        wire.unpack_connreq(struct.pack("<IIQ", wire.LNET_PROTO_TCP_MAGIC, 1, B.nid4))


@pytest.mark.parametrize("hdr", HEADERS, ids=lambda h: h.type.name)
def test_ksock_msg_round_trip(hdr: LNetHdr) -> None:
    payload = bytes(range(hdr.payload_length))
    m = wire.KsockMsg(wire.KSOCK_MSG_LNET, 0, (0, 0), hdr, payload)
    b = wire.pack_msg(m)
    assert b[:4] == b"\xc1\0\0\0" and len(b) == 24 + 72 + len(payload)
    assert wire.unpack_msg(b) == m
    summed = wire.pack_msg(m, checksum=True)
    assert wire.unpack_msg(summed).payload == payload
    corrupt = summed[:-1] + bytes([summed[-1] ^ 1]) if payload else summed[:30] + b"\x01" + \
        summed[31:]
    with pytest.raises(WireProtocolError):
        wire.unpack_msg(corrupt)


def test_noop() -> None:
    b = wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_NOOP, zc_cookies=(1, 2)))
    assert b == struct.pack("<IIQQ", 0xC0, 0, 1, 2)
    assert wire.unpack_msg(b).zc_cookies == (1, 2)


# --- framing ---------------------------------------------------------------------------
def _handshake_bytes() -> bytes:
    return wire.pack_connreq(B) + wire.pack_hello(_hello())


def test_framing_passive_then_active_whole_and_bytewise() -> None:
    for bytewise in (False, True):
        p = KsockConnection(active=False)
        a = KsockConnection(active=True)
        out = a.send_handshake(B, _hello())
        chunks = [out[i:i + 1] for i in range(len(out))] if bytewise else [out]
        evs = [e for c in chunks for e in p.receive_data(c)]
        assert evs == [ConnreqReceived(nid=B), HelloReceived(hello=_hello())]
        assert p.state is ConnState.P_HELLO_RECEIVED
        reply = p.send_hello(_hello(src_nid=B, dst_nid=A, dst_incarnation=77))
        assert isinstance(a.receive_data(reply)[0], HelloReceived)
        msgs = b"".join(a.send_lnet(_put(bytes([i]) * i), bytes([i]) * i) for i in range(4))
        msgs += a.send_noop()
        chunks = [msgs[i:i + 1] for i in range(len(msgs))] if bytewise else [msgs]
        evs2 = [e for c in chunks for e in p.receive_data(c)]
        assert [e.payload for e in evs2 if isinstance(e, LNetMessageReceived)] == [
            bytes([i]) * i for i in range(4)]
        assert isinstance(evs2[-1], NoopReceived)


def test_passive_holds_bytes_until_reply() -> None:
    p = KsockConnection(active=False)
    a = KsockConnection(active=True)
    hs = a.send_handshake(B, _hello())
    a.receive_data(wire.pack_hello(_hello(src_nid=B, dst_nid=A)))
    early = a.send_lnet(_put(), b"hello")
    assert len(p.receive_data(hs + early)) == 2
    p.send_hello(_hello(src_nid=B, dst_nid=A))
    evs = p.receive_data(b"")
    assert isinstance(evs[0], LNetMessageReceived) and evs[0].payload == b"hello"


def test_errors_are_sticky_and_local_misuse() -> None:
    p = KsockConnection(active=False)
    with pytest.raises(WireProtocolError):
        p.receive_data(b"\0\0\0\0")
    assert p.state is ConnState.ERROR
    with pytest.raises(WireProtocolError):
        p.receive_data(b"")
    a = KsockConnection(active=True)
    with pytest.raises(LocalProtocolError):
        a.send_lnet(_put(), b"hello")
    assert a.state is ConnState.ERROR


def test_good_frames_then_garbage_returns_events_and_records_error() -> None:
    a = KsockConnection(active=True)
    a.send_handshake(B, _hello())
    evs = a.receive_data(wire.pack_hello(_hello(src_nid=B, dst_nid=A)) + b"\xff" * 24)
    assert len(evs) == 1 and a.error is not None and a.state is ConnState.ERROR
    with pytest.raises(WireProtocolError):
        a.receive_data(b"")


def _running_pair() -> tuple[KsockConnection, bytes]:
    p = KsockConnection(active=False)
    p.receive_data(_handshake_bytes())
    p.send_hello(_hello(src_nid=B, dst_nid=A))
    return p, b""


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(prefix_len=st.integers(0, 200), junk=st.binary(max_size=300), cut=st.integers(0, 400),
       bytewise=st.booleans(), stage=st.sampled_from(["fresh", "running", "active"]))
def test_fuzz_only_wire_errors(prefix_len: int, junk: bytes, cut: int, bytewise: bool,
                               stage: str) -> None:
    """Random and truncated frames, whole and byte by byte: only WireProtocolError escapes."""
    good = _handshake_bytes() + wire.pack_msg(
        wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=_put(), payload=b"hello"))
    if stage == "fresh":
        conn = KsockConnection(active=False)
        data = good[:prefix_len] + junk
    elif stage == "running":
        conn, _ = _running_pair()
        body = good[len(_handshake_bytes()):]
        data = (body * 3)[:cut] + junk
    else:
        conn = KsockConnection(active=True)
        conn.send_handshake(B, _hello())
        data = wire.pack_hello(_hello(src_nid=B, dst_nid=A))[:cut] + junk
    chunks = [data[i:i + 1] for i in range(len(data))] if bytewise else [data]
    try:
        for c in chunks:
            conn.receive_data(c)
        if conn.error is not None:
            raise conn.error
    except WireProtocolError as exc:
        assert exc.hstatus == HStatus.REMOTE_ERROR
        assert conn.state is ConnState.ERROR


def test_buffer_is_bounded() -> None:
    conn, _ = _running_pair()
    hdr = _put(b"")
    big = LNetHdr(**{**{f.name: getattr(hdr, f.name) for f in fields(hdr)},
                     "payload_length": LNET_MTU})
    head = wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_NOOP))
    frame = struct.pack("<IIQQ", wire.KSOCK_MSG_LNET, 0, 0, 0) + lnethdr.pack_hdr(big)
    conn.receive_data(head + frame + b"x" * 1000)
    assert len(conn._buf) <= wire.MAX_FRAME_SIZE
    evs = conn.receive_data(b"x" * (LNET_MTU - 1000) + head)
    assert len(evs) == 2 and len(conn._buf) == 0


# --- tshark cross-check ----------------------------------------------------------------
@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_tshark_decodes_put(tmp_path) -> None:  # type: ignore[no-untyped-def]
    scapy_all = pytest.importorskip("scapy.all")
    payload = b"0123456789abcdef"
    msg = wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=_put(payload), payload=payload))
    ip = scapy_all.IP(src="192.168.1.2", dst="192.168.1.3")
    pkts = [ip / scapy_all.TCP(sport=1023, dport=988, flags="PA", seq=1000, ack=1) / msg]
    f = tmp_path / "put.pcap"
    scapy_all.wrpcap(str(f), pkts)
    out = subprocess.run(
        ["tshark", "-r", str(f), "-d", "tcp.port==988,lnet", "-T", "fields",
         "-e", "lnet.ksm_type", "-e", "lnet.msg_type", "-e", "lnet.nid.addr",
         "-e", "lnet.payload_length", "-e", "lnet.ptl_index"],
        capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    fields = out.split("\t")
    assert fields[0] in ("193", "0x000000c1")
    assert fields[1] == "1"  # LNET_MSG_PUT
    assert fields[2].split(",")[:2] == ["192.168.1.3", "192.168.1.2"]  # dest, src
    assert fields[3] == str(len(payload)) and fields[4] == "7"


def test_sending_does_not_disturb_a_partly_received_frame() -> None:
    """Regression: a send in RUNNING must not reset the receive buffer (found on veth, where
    frames arrive in MTU-sized pieces while the node is also sending)."""
    from nodes.lnd.framing import KsockConnection, LNetMessageReceived
    from nodes.lnet.hdr import LNetHdr, MsgType
    from nodes.lnet.nid import NID

    a, b = NID.parse("10.0.0.1@tcp"), NID.parse("10.0.0.2@tcp")
    act, pas = KsockConnection(active=True), KsockConnection(active=False)
    hello = wire.KsockHello(src_nid=a, dst_nid=b, src_pid=12345, dst_pid=12345,
                            src_incarnation=1, dst_incarnation=0)
    pas.receive_data(act.send_handshake(b, hello))
    act.receive_data(pas.send_hello(wire.KsockHello(src_nid=b, dst_nid=a, src_pid=12345,
                                                    dst_pid=12345, src_incarnation=2,
                                                    dst_incarnation=1)))
    hdr = LNetHdr(dest_nid=b, src_nid=a, dest_pid=12345, src_pid=12345, type=MsgType.PUT,
                  payload_length=4096)
    stream = b"".join(act.send_lnet(hdr, bytes(4096)) for _ in range(5))
    got = 0
    for i in range(0, len(stream), 1448):
        got += sum(isinstance(e, LNetMessageReceived) for e in pas.receive_data(stream[i:i + 1448]))
        pas.send_lnet(hdr, bytes(4096))  # the receiver is also sending (ACKs, replies)
    assert got == 5 and pas.error is None
