"""The o2iblnd wire message family (``struct kib_msg``, ``struct kib_rej``) as values + a codec.

Theory of operation: o2iblnd's messages travel in the payload of IB SENDs (and ``kib_rej`` in
the private data of a CM reject); this module owns their byte layout and nothing else. Layout,
constants and checks follow ``o2iblnd-idl.h`` and ``kiblnd_pack_msg``/``kiblnd_unpack_msg``/
``kiblnd_unpack_rd``/``kiblnd_msgtype2size`` in ``o2iblnd.c`` (lustre-release master):

* a 48-byte packed common head (magic, version, type, credits, nob, cksum, src/dst NID and
  incarnation stamps) in the sender's byte order, then a per-type body;
* only protocol versions 1 (0x11) and 2 (0x12) exist; there is no version 3;
* the embedded LNet header (``lnet_hdr_nid4``) is always little-endian (``nodes/lnd/wire``);
* decoding accepts either byte order (the magic tells, as the kernel's ``flip``), verifies the
  checksum when non-zero, and rejects: short frames, bad magic/version, a frame longer than
  ``IBLND_MSG_SIZE``, ``ibm_nob`` past the data, LNET_NID_ANY as source, a body shorter than
  its type needs, an unknown type, an RDMA descriptor with 0 or > ``IBLND_MAX_RDMA_FRAGS``
  fragments. Every rejection is one ``WireProtocolError`` line (hstatus REMOTE_ERROR); no other
  exception escapes (fuzzed in tests/unit/test_o2ib_msg.py). Work is bounded by the frame size.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from nodes.lnd import lnethdr
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_HDR_SIZE, LNetHdr
from nodes.lnet.hstatus import HStatus

IBLND_MSG_MAGIC: Final = 0x0BE91B91  # LNET_PROTO_IB_MAGIC
IBLND_MSG_VERSION_1: Final = 0x11
IBLND_MSG_VERSION_2: Final = 0x12
IBLND_MSG_VERSION: Final = IBLND_MSG_VERSION_2
IBLND_MSG_SIZE: Final = 4 << 10  # one pre-posted receive buffer
IBLND_MAX_RDMA_FRAGS: Final = 256 + 1  # LNET_MAX_IOV + 1
LNET_NID_ANY: Final = 0xFFFF_FFFF_FFFF_FFFF
KIB_MSG_HEAD: Final = 48  # offsetof(struct kib_msg, ibm_u)


class MsgType(enum.IntEnum):
    """IBLND_MSG_*."""

    CONNREQ = 0xC0
    CONNACK = 0xC1
    NOOP = 0xD0
    IMMEDIATE = 0xD1
    PUT_REQ = 0xD2
    PUT_NAK = 0xD3
    PUT_ACK = 0xD4
    PUT_DONE = 0xD5
    GET_REQ = 0xD6
    GET_DONE = 0xD7


class RejectReason(enum.IntEnum):
    """IBLND_REJECT_* (``kib_rej.ibr_why``)."""

    CONN_RACE = 1
    NO_RESOURCES = 2
    FATAL = 3
    CONN_UNCOMPAT = 4
    CONN_STALE = 5
    RDMA_FRAGS = 6
    MSG_QUEUE_SIZE = 7
    INVALID_SRV_ID = 8
    EARLY = 9


# struct formats without byte order; the order ("<" or ">") is prepended per frame
_HEAD = "IHBBIIQQQQ"
_CONNPARAMS = "HHI"
_RD_HEAD = "II"
_FRAG = "IQ"
_COOKIE = "Q"
_PUTACK_HEAD = "QQ"
_COMPLETION = "Qi"
_REJ = "IHBBQ" + _CONNPARAMS
_CS = struct.calcsize("<" + _CONNPARAMS)
_FRAG_SIZE = struct.calcsize("<" + _FRAG)
KIB_REJ_SIZE: Final = struct.calcsize("<" + _REJ)
_REJ_WHY_END: Final = 7  # offsetof(struct kib_rej, ibr_padding)
LNET_PROTO_MAGIC: Final = 0x45726963  # also accepted in a reject (kiblnd_rejected)
_REJ_MAGICS: Final = frozenset({IBLND_MSG_MAGIC, LNET_PROTO_MAGIC})
_COMPLETION_TYPES = frozenset({MsgType.PUT_NAK, MsgType.PUT_DONE, MsgType.GET_DONE})


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnParams:
    """``kib_connparams``: what a CONNREQ proposes and a CONNACK/reject answers."""

    queue_depth: int
    max_frags: int
    max_msg_size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RdmaDesc:
    """``kib_rdma_desc``: a remote key and its (nob, addr) fragments."""

    key: int
    frags: tuple[tuple[int, int], ...]


# init written out: mypyc compiles it (a dataclass's generated __init__ runs interpreted)
@dataclass(init=False, slots=True, unsafe_hash=True, kw_only=True)
class Immediate:
    hdr: LNetHdr
    payload: bytes

    def __init__(self, *, hdr: LNetHdr, payload: bytes) -> None:
        self.hdr, self.payload = hdr, payload


@dataclass(frozen=True, slots=True, kw_only=True)
class PutReq:
    hdr: LNetHdr
    cookie: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PutAck:
    src_cookie: int
    dst_cookie: int
    rd: RdmaDesc


@dataclass(frozen=True, slots=True, kw_only=True)
class GetReq:
    hdr: LNetHdr
    cookie: int
    rd: RdmaDesc


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """PUT_NAK / PUT_DONE / GET_DONE: ``status`` < 0 an errno, else a length."""

    cookie: int
    status: int


Body = ConnParams | Immediate | PutReq | PutAck | GetReq | Completion | None


# init written out: mypyc compiles it (a dataclass's generated __init__ runs interpreted)
@dataclass(init=False, slots=True, unsafe_hash=True, kw_only=True)
class KibMsg:
    """``struct kib_msg``; ``body`` is the ``ibm_u`` member ``type`` selects (None for NOOP)."""

    type: MsgType
    body: Body
    version: int = IBLND_MSG_VERSION
    credits: int = 0
    srcnid: int = 0
    srcstamp: int = 0
    dstnid: int = 0
    dststamp: int = 0

    def __init__(self, *, type: MsgType, body: Body, version: int = IBLND_MSG_VERSION,
                 credits: int = 0, srcnid: int = 0, srcstamp: int = 0, dstnid: int = 0,
                 dststamp: int = 0) -> None:
        self.type, self.body, self.version, self.credits = type, body, version, credits
        self.srcnid, self.srcstamp, self.dstnid, self.dststamp = (srcnid, srcstamp, dstnid,
                                                                  dststamp)


@dataclass(frozen=True, slots=True, kw_only=True)
class KibRej:
    """``struct kib_rej``: the private data of a CM reject."""

    why: RejectReason
    incarnation: int = 0
    cp: ConnParams | None = None
    version: int = IBLND_MSG_VERSION
    magic: int = IBLND_MSG_MAGIC


def _bad(descr: str) -> WireProtocolError:
    return WireProtocolError(f"o2iblnd: {descr}", int(HStatus.REMOTE_ERROR))


def kiblnd_cksum(data: bytes | bytearray | memoryview) -> int:
    """``kiblnd_cksum``: rotate-left-and-add over *signed* chars (x86 ``char``), never 0."""
    s = 0
    for c in bytes(data):
        s = (((s << 1) | (s >> 31)) + (c - 256 if c > 127 else c)) & 0xFFFF_FFFF
    return s or 1


def _body_bytes(m: KibMsg, o: str) -> bytes:
    b = m.body
    if isinstance(b, ConnParams):
        return struct.pack(o + _CONNPARAMS, b.queue_depth, b.max_frags, b.max_msg_size)
    if isinstance(b, Immediate):
        return lnethdr.pack_hdr(b.hdr) + b.payload
    if isinstance(b, PutReq):
        return lnethdr.pack_hdr(b.hdr) + struct.pack(o + _COOKIE, b.cookie)
    if isinstance(b, PutAck):
        return struct.pack(o + _PUTACK_HEAD, b.src_cookie, b.dst_cookie) + _rd_bytes(b.rd, o)
    if isinstance(b, GetReq):
        return (lnethdr.pack_hdr(b.hdr) + struct.pack(o + _COOKIE, b.cookie)
                + _rd_bytes(b.rd, o))
    if isinstance(b, Completion):
        return struct.pack(o + _COMPLETION, b.cookie, b.status)
    return b""


def _rd_bytes(rd: RdmaDesc, o: str) -> bytes:
    return struct.pack(o + _RD_HEAD, rd.key, len(rd.frags)) + b"".join(
        struct.pack(o + _FRAG, nob, addr) for nob, addr in rd.frags)


_BODY_KIND: Final[dict[MsgType, type]] = {
    MsgType.CONNREQ: ConnParams, MsgType.CONNACK: ConnParams, MsgType.IMMEDIATE: Immediate,
    MsgType.PUT_REQ: PutReq, MsgType.PUT_ACK: PutAck, MsgType.GET_REQ: GetReq,
    MsgType.PUT_NAK: Completion, MsgType.PUT_DONE: Completion, MsgType.GET_DONE: Completion,
}


def kiblnd_pack_msg(m: KibMsg, *, checksum: bool = False, big_endian: bool = False) -> bytes:
    """``kiblnd_init_msg`` + ``kiblnd_pack_msg``: the frame, checksummed if asked (with
    ``ibm_cksum`` zero while summing). ``big_endian`` plays a peer of the other byte order."""
    kind = _BODY_KIND.get(m.type, type(None))
    if not isinstance(m.body, kind):
        raise ValueError(f"{m.type.name} needs a {kind.__name__} body")
    o = ">" if big_endian else "<"
    try:
        return _pack(m, o, checksum)
    except struct.error as e:  # a field wider than the kernel's (credits > u8 ...)
        raise ValueError(f"{m.type.name}: field out of range ({e})") from None


def _pack(m: KibMsg, o: str, checksum: bool) -> bytes:
    body = _body_bytes(m, o)
    nob = KIB_MSG_HEAD + len(body)
    if nob > IBLND_MSG_SIZE:
        raise ValueError(f"{m.type.name} of {nob} bytes > IBLND_MSG_SIZE {IBLND_MSG_SIZE}")
    if not checksum and o == "<":  # (the common case: one compiled Struct)
        return _HEAD_LE.pack(IBLND_MSG_MAGIC, m.version, m.type, m.credits, nob, 0,
                             m.srcnid, m.srcstamp, m.dstnid, m.dststamp) + body
    head = [IBLND_MSG_MAGIC, m.version, int(m.type), m.credits, nob, 0,
            m.srcnid, m.srcstamp, m.dstnid, m.dststamp]
    frame = struct.pack(o + _HEAD, *head) + body
    if not checksum:
        return frame
    head[5] = kiblnd_cksum(frame)
    return struct.pack(o + _HEAD, *head) + body


#: ``kiblnd_msgtype2size``'s table: each type's least ``ibm_nob``
_MIN_NOB: Final[dict[int, int]] = {
    **{int(t): KIB_MSG_HEAD + n for t, n in (
        (MsgType.CONNREQ, _CS), (MsgType.CONNACK, _CS), (MsgType.NOOP, 0),
        (MsgType.IMMEDIATE, LNET_HDR_SIZE), (MsgType.PUT_REQ, LNET_HDR_SIZE + 8),
        (MsgType.PUT_ACK, 16 + 8), (MsgType.GET_REQ, LNET_HDR_SIZE + 8 + 8))},
    **{int(t): KIB_MSG_HEAD + 12 for t in _COMPLETION_TYPES},
}
_TYPE_OF: Final[dict[int, MsgType]] = {int(t): t for t in MsgType}
_HEAD_LE: Final = struct.Struct("<" + _HEAD)


def kiblnd_msgtype2size(t: int) -> int:
    """``kiblnd_msgtype2size``: the least ``ibm_nob`` of a type (-1: unknown)."""
    return _MIN_NOB.get(t, -1)


def kiblnd_unpack_msg(frame: bytes | bytearray | memoryview) -> KibMsg:
    """Decode one received frame with ``kiblnd_unpack_msg``'s checks, in its order.

    Raises:
        WireProtocolError: the one-line reason (never any other exception).
    """
    nob = len(frame)
    if nob < 6:
        raise _bad(f"short message: {nob} bytes")
    if nob > IBLND_MSG_SIZE:
        raise _bad(f"message of {nob} bytes > IBLND_MSG_SIZE {IBLND_MSG_SIZE}")
    magic = int.from_bytes(frame[0:4], "little")
    if magic == IBLND_MSG_MAGIC:
        o = "<"
    elif magic == lnethdr.swab32(IBLND_MSG_MAGIC):
        o = ">"
    else:
        raise _bad(f"bad magic {magic:08x}")
    version = int.from_bytes(frame[4:6], "little" if o == "<" else "big")
    if version not in (IBLND_MSG_VERSION_1, IBLND_MSG_VERSION_2):
        raise _bad(f"bad version {version:x}")
    if nob < KIB_MSG_HEAD:
        raise _bad(f"short message: {nob} < {KIB_MSG_HEAD} bytes")
    _m, _v, mtype, credits, msg_nob, cksum, src, sstamp, dst, dstamp = (
        _HEAD_LE.unpack_from(frame, 0) if o == "<" else struct.unpack_from(o + _HEAD, frame, 0))
    if msg_nob > nob:
        raise _bad(f"short message: got {nob}, wanted {msg_nob}")
    if cksum != 0:
        zeroed = bytearray(frame[:msg_nob])
        zeroed[12:16] = bytes(4)
        if cksum != kiblnd_cksum(zeroed):
            raise _bad("bad checksum")
    if src == LNET_NID_ANY:
        raise _bad("bad src nid LNET_NID_ANY")
    need = kiblnd_msgtype2size(mtype)
    if msg_nob < need:
        raise _bad(f"short {MsgType(mtype).name}: {msg_nob}({need})")
    if need < 0:
        raise _bad(f"unknown message type {mtype:x}")
    t = _TYPE_OF[mtype]
    body = _unpack_body(t, memoryview(frame)[KIB_MSG_HEAD:msg_nob], o)
    return KibMsg(type=t, body=body, version=version, credits=credits, srcnid=src,
                  srcstamp=sstamp, dstnid=dst, dststamp=dstamp)


def _unpack_body(t: MsgType, b: memoryview, o: str) -> Body:
    if t is MsgType.CONNREQ or t is MsgType.CONNACK:
        qd, mf, mms = struct.unpack_from(o + _CONNPARAMS, b, 0)
        return ConnParams(queue_depth=qd, max_frags=mf, max_msg_size=mms)
    if t is MsgType.NOOP:
        return None
    if t in _COMPLETION_TYPES:
        cookie, status = struct.unpack_from(o + _COMPLETION, b, 0)
        return Completion(cookie=cookie, status=status)
    if t is MsgType.PUT_ACK:
        src_c, dst_c = struct.unpack_from(o + _PUTACK_HEAD, b, 0)
        return PutAck(src_cookie=src_c, dst_cookie=dst_c, rd=_unpack_rd(t, b, 16, o))
    hdr = lnethdr.unpack_hdr(b)  # its own WireProtocolError on a bad LNet header
    if t is MsgType.IMMEDIATE:
        return Immediate(hdr=hdr, payload=bytes(b[LNET_HDR_SIZE:]))
    (cookie,) = struct.unpack_from(o + _COOKIE, b, LNET_HDR_SIZE)
    if t is MsgType.PUT_REQ:
        return PutReq(hdr=hdr, cookie=cookie)
    return GetReq(hdr=hdr, cookie=cookie, rd=_unpack_rd(t, b, LNET_HDR_SIZE + 8, o))


def _unpack_rd(t: MsgType, b: memoryview, off: int, o: str) -> RdmaDesc:
    """``kiblnd_unpack_rd``: 0 < nfrags <= IBLND_MAX_RDMA_FRAGS, all within ``ibm_nob``."""
    key, n = struct.unpack_from(o + _RD_HEAD, b, off)
    if n <= 0 or n > IBLND_MAX_RDMA_FRAGS:
        raise _bad(f"bad nfrags {n}, should be 0 < n <= {IBLND_MAX_RDMA_FRAGS}")
    end = off + 8 + n * _FRAG_SIZE
    if len(b) < end:
        raise _bad(f"short {t.name}: {KIB_MSG_HEAD + len(b)}({KIB_MSG_HEAD + end})")
    frags = tuple(struct.iter_unpack(o + _FRAG, b[off + 8:end]))
    return RdmaDesc(key=key, frags=tuple((int(a), int(c)) for a, c in frags))


def pack_rej(r: KibRej, *, big_endian: bool = False) -> bytes:
    """The ``kib_rej`` private data ``kiblnd_reject`` hands to ``rdma_reject``."""
    cp = r.cp or ConnParams(queue_depth=0, max_frags=0, max_msg_size=0)
    return struct.pack((">" if big_endian else "<") + _REJ, r.magic, r.version, int(r.why),
                       0, r.incarnation, cp.queue_depth, cp.max_frags, cp.max_msg_size)


def unpack_rej(data: bytes | bytearray | memoryview) -> KibRej:
    """Decode reject private data as ``kiblnd_rejected`` reads it: at least up to
    ``ibr_why``; magic ``IBLND_MSG_MAGIC`` or ``LNET_PROTO_MAGIC`` in either byte order;
    version 1 or 2; incarnation and connparams only from a whole V2 ``kib_rej`` (else the
    kernel's default incarnation -1 and no connparams); a known ``IBLND_REJECT_*`` reason."""
    if len(data) < _REJ_WHY_END:
        raise _bad(f"short reject: {len(data)} < {_REJ_WHY_END} bytes")
    magic = int.from_bytes(data[0:4], "little")
    if magic in _REJ_MAGICS:
        o = "<"
    elif lnethdr.swab32(magic) in _REJ_MAGICS:
        o, magic = ">", lnethdr.swab32(magic)
    else:
        raise _bad(f"reject with bad magic {magic:08x} (consumer defined fatal error)")
    _m, version, why = struct.unpack_from(o + "IHB", data, 0)
    if version not in (IBLND_MSG_VERSION_1, IBLND_MSG_VERSION_2):
        raise _bad(f"reject with o2iblnd version {version:x}")
    if why not in RejectReason._value2member_map_:
        raise _bad(f"unknown reject reason {why}")
    if len(data) < KIB_REJ_SIZE or version == IBLND_MSG_VERSION_1:
        return KibRej(why=RejectReason(why), incarnation=LNET_NID_ANY, version=version,
                      magic=magic)
    *_, inc, qd, mf, mms = struct.unpack_from(o + _REJ, data, 0)
    return KibRej(why=RejectReason(why), incarnation=inc, version=version, magic=magic,
                  cp=ConnParams(queue_depth=qd, max_frags=mf, max_msg_size=mms))
