"""The o2iblnd kib_msg codec (nodes/o2ib/msg.py) against o2iblnd-idl.h and o2iblnd.c.

Cites: ``kiblnd_pack_msg``, ``kiblnd_unpack_msg``, ``kiblnd_unpack_rd``,
``kiblnd_msgtype2size``, ``kiblnd_cksum``, ``kiblnd_reject``/``kiblnd_rejected`` (issue 28).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNetHdr, WireHandle
from nodes.lnet.hdr import MsgType as LMsg
from nodes.lnet.nid import NID
from nodes.o2ib import msg as m

SRC = NID.parse("10.0.0.1@o2ib")
DST = NID.parse("10.0.0.2@o2ib")
HDR = LNetHdr(DST, SRC, 12345, 12345, LMsg.PUT, 5, WireHandle(1, 2), match_bits=7,
              ptl_index=4)
GHDR = LNetHdr(DST, SRC, 12345, 12345, LMsg.GET, 0, WireHandle(1, 2), sink_length=4096)
RD = m.RdmaDesc(key=0xABCD, frags=((4096, 0x1000), (100, 0x9000)))

SAMPLES = [
    m.KibMsg(type=m.MsgType.CONNREQ, body=m.ConnParams(queue_depth=8, max_frags=256,
                                                       max_msg_size=4096)),
    m.KibMsg(type=m.MsgType.CONNACK, body=m.ConnParams(queue_depth=8, max_frags=256,
                                                       max_msg_size=4096), version=0x11),
    m.KibMsg(type=m.MsgType.NOOP, body=None, credits=3),
    m.KibMsg(type=m.MsgType.IMMEDIATE, body=m.Immediate(hdr=HDR, payload=b"hello")),
    m.KibMsg(type=m.MsgType.PUT_REQ, body=m.PutReq(hdr=HDR, cookie=99)),
    m.KibMsg(type=m.MsgType.PUT_ACK, body=m.PutAck(src_cookie=99, dst_cookie=5, rd=RD)),
    m.KibMsg(type=m.MsgType.PUT_NAK, body=m.Completion(cookie=99, status=-5)),
    m.KibMsg(type=m.MsgType.PUT_DONE, body=m.Completion(cookie=5, status=4196)),
    m.KibMsg(type=m.MsgType.GET_REQ, body=m.GetReq(hdr=GHDR, cookie=3, rd=RD)),
    m.KibMsg(type=m.MsgType.GET_DONE, body=m.Completion(cookie=3, status=0)),
]
_STAMPS = dict(srcnid=SRC.nid4, dstnid=DST.nid4, srcstamp=111, dststamp=222)
SAMPLES = [m.KibMsg(type=s.type, body=s.body, version=s.version, credits=s.credits, **_STAMPS)
           for s in SAMPLES]


def test_constants_are_the_kernels() -> None:
    """IBLND_MSG_* / IBLND_REJECT_* / versions as o2iblnd-idl.h defines them."""
    assert m.IBLND_MSG_MAGIC == 0x0BE91B91
    assert (m.IBLND_MSG_VERSION_1, m.IBLND_MSG_VERSION_2) == (0x11, 0x12)
    assert [int(t) for t in m.MsgType] == [0xC0, 0xC1, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5,
                                           0xD6, 0xD7]
    assert [(r.name, int(r)) for r in m.RejectReason][:3] == [
        ("CONN_RACE", 1), ("NO_RESOURCES", 2), ("FATAL", 3)]
    assert (int(m.RejectReason.INVALID_SRV_ID), int(m.RejectReason.EARLY)) == (8, 9)
    assert m.KIB_REJ_SIZE == 24


def test_msgtype2size_matches_packed_struct_sizes() -> None:
    """kiblnd_msgtype2size: 48-byte head + the packed union member."""
    assert m.kiblnd_msgtype2size(m.MsgType.NOOP) == 48
    assert m.kiblnd_msgtype2size(m.MsgType.CONNREQ) == 56
    assert m.kiblnd_msgtype2size(m.MsgType.IMMEDIATE) == 48 + 72
    assert m.kiblnd_msgtype2size(m.MsgType.PUT_REQ) == 48 + 80
    assert m.kiblnd_msgtype2size(m.MsgType.PUT_ACK) == 48 + 24
    assert m.kiblnd_msgtype2size(m.MsgType.GET_REQ) == 48 + 88
    assert m.kiblnd_msgtype2size(m.MsgType.GET_DONE) == 48 + 12
    assert m.kiblnd_msgtype2size(0x42) == -1


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.type.name)
@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_round_trip_every_type(sample: m.KibMsg, checksum: bool, big: bool) -> None:
    """kiblnd_pack_msg → kiblnd_unpack_msg, either byte order (the kernel's ``flip``)."""
    frame = m.kiblnd_pack_msg(sample, checksum=checksum, big_endian=big)
    assert struct.unpack_from("<I" if not big else ">I", frame, 8)[0] == len(frame)  # ibm_nob
    assert (struct.unpack_from("<I", frame, 12)[0] != 0) is checksum
    assert m.kiblnd_unpack_msg(frame) == sample


def test_putack_layout_is_packed() -> None:
    """kib_putack_msg: two cookies, rd_key, rd_nfrags, then 12-byte (nob, addr) frags."""
    frame = m.kiblnd_pack_msg(SAMPLES[5])
    assert len(frame) == 48 + 16 + 8 + 2 * 12
    assert struct.unpack_from("<QQIIIQIQ", frame, 48) == (99, 5, 0xABCD, 2, 4096, 0x1000,
                                                           100, 0x9000)


def test_cksum_is_signed_char_rotate_add() -> None:
    """kiblnd_cksum sums x86 signed chars and never returns 0."""
    assert m.kiblnd_cksum(b"") == 1
    assert m.kiblnd_cksum(b"\x01\x02") == 4
    assert m.kiblnd_cksum(b"\xff") == 0xFFFFFFFF  # -1, not 255


def _frame(i: int = 3) -> bytearray:
    return bytearray(m.kiblnd_pack_msg(SAMPLES[i]))


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda f: f[:5], "short message: 5"),
    (lambda f: b"\0\0\0\0" + f[4:], "bad magic"),
    (lambda f: f[:4] + b"\x13\x00" + f[6:], "bad version 13"),
    (lambda f: f[:40], "short message: 40 < 48"),
    (lambda f: f[:100], "short message: got 100, wanted 125"),
    (lambda f: f + bytes(5000), "IBLND_MSG_SIZE"),
    (lambda f: f[:12] + b"\1\0\0\0" + f[16:], "bad checksum"),
    (lambda f: f[:16] + b"\xff" * 8 + f[24:], "LNET_NID_ANY"),
    (lambda f: f[:6] + b"\x42" + f[7:], "unknown message type 42"),
])
def test_unpack_rejects_with_one_line(mutate: object, needle: str) -> None:
    """kiblnd_unpack_msg's checks, in its order, each one clear line."""
    with pytest.raises(WireProtocolError) as e:
        m.kiblnd_unpack_msg(bytes(mutate(_frame())))  # type: ignore[operator]
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_short_body_for_its_type() -> None:
    """ibm_nob smaller than kiblnd_msgtype2size(type) → 'Short PUT_REQ'."""
    f = _frame(4)[:100]
    f[8:12] = (100).to_bytes(4, "little")
    with pytest.raises(WireProtocolError, match="short PUT_REQ: 100"):
        m.kiblnd_unpack_msg(bytes(f))


@pytest.mark.parametrize("nfrags", [0, m.IBLND_MAX_RDMA_FRAGS + 1, 3])
def test_unpack_rd_bounds(nfrags: int) -> None:
    """kiblnd_unpack_rd: 0 < nfrags <= IBLND_MAX_RDMA_FRAGS, and all frags within ibm_nob."""
    f = _frame(5)
    struct.pack_into("<I", f, 48 + 16 + 4, nfrags)
    with pytest.raises(WireProtocolError, match="nfrags" if nfrags != 3 else "short PUT_ACK"):
        m.kiblnd_unpack_msg(bytes(f))


def test_pack_refuses_wrong_body_and_oversize() -> None:
    with pytest.raises(ValueError, match="PUT_REQ needs a PutReq"):
        m.kiblnd_pack_msg(m.KibMsg(type=m.MsgType.PUT_REQ, body=None))
    big = m.KibMsg(type=m.MsgType.IMMEDIATE, body=m.Immediate(hdr=HDR, payload=bytes(4096)))
    with pytest.raises(ValueError, match="IBLND_MSG_SIZE"):
        m.kiblnd_pack_msg(big)


@pytest.mark.parametrize("why", list(m.RejectReason))
@pytest.mark.parametrize("big", [False, True])
def test_reject_round_trip(why: m.RejectReason, big: bool) -> None:
    """kib_rej as kiblnd_reject sends it and kiblnd_rejected reads it."""
    r = m.KibRej(why=why, incarnation=77,
                 cp=m.ConnParams(queue_depth=16, max_frags=257, max_msg_size=4096))
    assert m.unpack_rej(m.pack_rej(r, big_endian=big)) == r


def test_reject_short_and_v1_as_kiblnd_rejected() -> None:
    """kiblnd_rejected: a reject up to ibr_why is enough; incarnation (default -1) and
    connparams only from a whole V2 kib_rej; LNET_PROTO_MAGIC is accepted too."""
    v2 = m.pack_rej(m.KibRej(why=m.RejectReason.CONN_STALE, incarnation=3,
                             cp=m.ConnParams(queue_depth=1, max_frags=2, max_msg_size=3)))
    short = m.unpack_rej(v2[:7])
    assert (short.why, short.incarnation, short.cp) == (m.RejectReason.CONN_STALE,
                                                        2**64 - 1, None)
    v1 = m.unpack_rej(m.pack_rej(m.KibRej(why=m.RejectReason.FATAL, version=0x11)))
    assert v1.cp is None and v1.version == 0x11
    lp = m.unpack_rej(m.pack_rej(m.KibRej(why=m.RejectReason.CONN_RACE,
                                          magic=m.LNET_PROTO_MAGIC), big_endian=True))
    assert lp.magic == m.LNET_PROTO_MAGIC and lp.why is m.RejectReason.CONN_RACE


def test_reject_bad_inputs() -> None:
    good = m.pack_rej(m.KibRej(why=m.RejectReason.FATAL))
    with pytest.raises(WireProtocolError, match="short reject: 6 < 7"):
        m.unpack_rej(good[:6])
    with pytest.raises(WireProtocolError, match="version 13"):
        m.unpack_rej(good[:4] + b"\x13\x00" + good[6:])
    with pytest.raises(WireProtocolError, match="bad magic"):
        m.unpack_rej(bytes(4) + good[4:])
    with pytest.raises(WireProtocolError, match="unknown reject reason 99"):
        m.unpack_rej(good[:6] + b"\x63" + good[7:])


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600))
def test_fuzz_random_bytes_give_clean_error_or_message(data: bytes) -> None:
    """Random bytes: a KibMsg or WireProtocolError, never another exception."""
    try:
        assert isinstance(m.kiblnd_unpack_msg(data), m.KibMsg)
    except WireProtocolError as e:
        assert "\n" not in str(e)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(range(len(SAMPLES))), st.integers(0, 700), st.binary(max_size=8),
       st.booleans())
def test_fuzz_mutated_valid_frames(i: int, pos: int, junk: bytes, cut: bool) -> None:
    """Valid frames with bytes overwritten or cut: a KibMsg or a WireProtocolError only."""
    f = bytearray(m.kiblnd_pack_msg(SAMPLES[i]))
    pos %= len(f)
    f[pos:pos + len(junk)] = junk
    if cut:
        f = f[:pos]
    try:
        m.kiblnd_unpack_msg(bytes(f))
        m.unpack_rej(bytes(f))
    except WireProtocolError:
        pass


def test_pack_field_out_of_range_is_value_error() -> None:
    """ibm_credits is a u8 (IBLND_CREDITS_MAX 255): 256 is refused in one line."""
    ok = m.KibMsg(type=m.MsgType.NOOP, body=None, credits=255, srcnid=1)
    assert m.kiblnd_unpack_msg(m.kiblnd_pack_msg(ok)).credits == 255
    with pytest.raises(ValueError, match="NOOP: field out of range"):
        m.kiblnd_pack_msg(m.KibMsg(type=m.MsgType.NOOP, body=None, credits=256))
