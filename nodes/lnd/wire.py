"""ksocklnd V3 wire codec: pure ``struct`` packing, byte for byte the kernel layouts (x86, LE).

Theory of operation (STYLE rule 6): this module owns the constants and the byte layouts only;
it keeps no state. ``framing.py`` decides *when* each structure is legal on a connection.

Layouts (all ``__packed``):

* ``struct _lnet_hdr_nid4``: ``lnethdr.py`` (the LNet header, carried by every LND).
* ``struct lnet_acceptor_connreq`` (lnet-idl.h), 16 bytes: magic 0xacce7100, version 1, nid4.
  ``lnet_connect`` sends it before the LND hello; ``lnet_accept`` accepts a byte-swapped magic.
* ``struct ksock_hello_msg_nid4`` (lnet/klnds/socklnd/socklnd-idl.h), 56 bytes + nips*4. For
  V2/V3 the magic is **LNET_PROTO_MAGIC 0x45726963**, not LNET_PROTO_TCP_MAGIC: the latter is
  the V1 ``lnet_magicversion`` hello (``ksocknal_send_hello_v2`` sets ``kshm_magic =
  LNET_PROTO_MAGIC``; ``ksocknal_parse_proto_version`` maps TCP_MAGIC to protocol V1 only).
  ``ksocknal_send_hello_v2`` writes the whole struct in one go; ``ksocknal_recv_hello`` reads
  the magic (4 bytes, checks LNET_PROTO_MAGIC, its byte swap, or TCP_MAGIC), then the version
  (4), then ``ksocknal_recv_hello_v2`` reads the rest (48) and swabs it when the magic was
  swapped (``ksnc_flip``), then nips*4 bytes of (deprecated) IPs, nips <= LNET_INTERFACES_NUM.
* ``struct ksock_msg`` V3 (socklnd-idl.h): ``ksock_msg_hdr`` (type u32, csum u32,
  zc_cookies[2] u64) = 24 bytes; NOOP ends there; LNET is followed by the 72-byte header and
  payload_length bytes of payload. On a flipped connection the ksock_msg_hdr fields are swabbed
  (``ksocknal_process_receive``); ``ksm_csum`` != 0 is a crc32_le(~0) over the whole message
  with csum zeroed (``ksocknal_lib_csum_tx``), checked on receive.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from nodes.lnd.lnethdr import bad_frame, pack_hdr, swab32, unpack_hdr
from nodes.lnet.hdr import LNET_HDR_SIZE, LNET_MTU, LNetHdr
from nodes.lnet.nid import LNET_NID_ANY, NID

# --- lnet-idl.h -------------------------------------------------------------------------
LNET_PROTO_TCP_MAGIC = 0xEEBC0DED
LNET_PROTO_ACCEPTOR_MAGIC = 0xACCE7100
LNET_PROTO_MAGIC = 0x45726963
LNET_PROTO_ACCEPTOR_VERSION = 1
LNET_PROTO_TCP_VERSION_MAJOR = 1
LNET_PROTO_TCP_VERSION_MINOR = 0
#: lnet-types.h: most IPs a V2/V3 hello may carry
LNET_INTERFACES_NUM = 16
#: lib-lnet.h: lnet_connect binds its source port from MAX down to MIN
LNET_ACCEPTOR_MIN_RESERVED_PORT = 512
LNET_ACCEPTOR_MAX_RESERVED_PORT = 1023
#: lnet acceptor default port (``accept_port`` module parameter)
LNET_ACCEPTOR_PORT = 988

# --- socklnd.h / socklnd-idl.h ----------------------------------------------------------
SOCKLND_CONN_NONE = -1
SOCKLND_CONN_ANY = 0
SOCKLND_CONN_CONTROL = 1
SOCKLND_CONN_BULK_IN = 2
SOCKLND_CONN_BULK_OUT = 3
SOCKLND_CONN_NTYPES = 4
SOCKLND_CONN_ACK = SOCKLND_CONN_BULK_IN
KSOCK_PROTO_V1 = LNET_PROTO_TCP_VERSION_MAJOR
KSOCK_PROTO_V2 = 2
KSOCK_PROTO_V3 = 3
KSOCK_PROTO_V4 = 4
KSOCK_MSG_NOOP = 0xC0
KSOCK_MSG_LNET = 0xC1

_CONNREQ = struct.Struct("<IIQ")
_HELLO_LE = struct.Struct("<IIQQIIQQiI")
_HELLO_BE = struct.Struct(">IIQQIIQQiI")
_KSM_HDR_LE = struct.Struct("<IIQQ")
_KSM_HDR_BE = struct.Struct(">IIQQ")

CONNREQ_SIZE = _CONNREQ.size  # 16
HELLO_SIZE = _HELLO_LE.size  # 56, without the ips[]
KSOCK_MSG_HDR_SIZE = _KSM_HDR_LE.size  # 24
#: Largest frame a connection ever buffers: ksock_msg_hdr + lnet_hdr_nid4 + LNET_MTU.
MAX_FRAME_SIZE = KSOCK_MSG_HDR_SIZE + LNET_HDR_SIZE + LNET_MTU

# --- acceptor connreq -------------------------------------------------------------------
def pack_connreq(nid: NID) -> bytes:
    """``struct lnet_acceptor_connreq`` as ``lnet_connect`` sends it for a nid4 peer."""
    return _CONNREQ.pack(LNET_PROTO_ACCEPTOR_MAGIC, LNET_PROTO_ACCEPTOR_VERSION, nid.nid4)


def connreq_flip(magic: int) -> bool:
    """``lnet_accept``'s magic check; True when the peer's byte order is swapped.

    Raises:
        WireProtocolError: LNET_PROTO_MAGIC ("future version"), TCP_MAGIC ("old socknal"), or
            an unrecognised magic; the acceptor refuses all of these.
    """
    if magic == LNET_PROTO_ACCEPTOR_MAGIC:
        return False
    if magic == swab32(LNET_PROTO_ACCEPTOR_MAGIC):
        return True
    if magic in (LNET_PROTO_MAGIC, swab32(LNET_PROTO_MAGIC)):
        raise bad_frame("acceptor: LNET_PROTO_MAGIC version query is not supported")
    if magic in (LNET_PROTO_TCP_MAGIC, swab32(LNET_PROTO_TCP_MAGIC)):
        raise bad_frame("acceptor: refusing 'old' socknal/tcpnal acceptor protocol")
    raise bad_frame(f"acceptor: unrecognised magic {magic:#010x}")


def unpack_connreq(b: bytes | bytearray | memoryview) -> NID:
    """Parse 16 connreq bytes (either byte order) and return ``acr_nid``.

    Raises:
        WireProtocolError: short buffer, bad magic, or a version other than 1.
    """
    if len(b) < CONNREQ_SIZE:
        raise bad_frame(f"short acceptor connreq: {len(b)} bytes")
    magic = _CONNREQ.unpack_from(b, 0)[0]
    fmt = ">IIQ" if connreq_flip(magic) else "<IIQ"
    _m, version, nid4 = struct.unpack_from(fmt, b, 0)
    if version != LNET_PROTO_ACCEPTOR_VERSION:
        raise bad_frame(f"acceptor: unsupported connreq version {version}")
    return NID.from_nid4(nid4)


# --- ksock hello ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KsockHello:
    """``struct ksock_hello_msg_nid4`` (V3). ``ctype`` is signed so SOCKLND_CONN_NONE is -1."""

    src_nid: NID
    dst_nid: NID
    src_pid: int
    dst_pid: int
    src_incarnation: int
    dst_incarnation: int
    ctype: int = SOCKLND_CONN_ANY
    ips: tuple[int, ...] = field(default=())
    version: int = KSOCK_PROTO_V3

    @property
    def nips(self) -> int:
        return len(self.ips)


def pack_hello(h: KsockHello, *, flip: bool = False) -> bytes:
    """Pack ``h`` as ``ksocknal_send_hello_v2`` writes it (``flip`` emulates a big-endian peer)."""
    st = _HELLO_BE if flip else _HELLO_LE
    head = st.pack(LNET_PROTO_MAGIC, h.version, h.src_nid.nid4, h.dst_nid.nid4, h.src_pid,
                   h.dst_pid, h.src_incarnation, h.dst_incarnation, h.ctype, len(h.ips))
    return head + struct.pack(f"{'>' if flip else '<'}{len(h.ips)}I", *h.ips)


def hello_flip(magic: int) -> bool:
    """``ksocknal_recv_hello``'s first check; True when the peer's byte order is swapped.

    Raises:
        WireProtocolError: TCP_MAGIC (protocol V1, unsupported here) or any other magic.
    """
    if magic == LNET_PROTO_MAGIC:
        return False
    if magic == swab32(LNET_PROTO_MAGIC):
        return True
    if magic == LNET_PROTO_TCP_MAGIC:
        raise bad_frame("ksock hello: protocol V1 (LNET_PROTO_TCP_MAGIC) is not supported")
    raise bad_frame(f"ksock hello: bad magic {magic:#010x} ({LNET_PROTO_MAGIC:#010x} expected)")


def check_hello_version(version: int) -> None:
    """``ksocknal_parse_proto_version`` restricted to V3 (the only protocol we speak)."""
    if version != KSOCK_PROTO_V3:
        raise bad_frame(f"ksock hello: unsupported protocol version {version} (3 expected)")


def hello_nips(b: bytes | bytearray | memoryview, flip: bool) -> int:
    """kshm_nips from the first 56 bytes, checked against LNET_INTERFACES_NUM."""
    nips = struct.unpack_from(">I" if flip else "<I", b, HELLO_SIZE - 4)[0]
    if nips > LNET_INTERFACES_NUM:
        raise bad_frame(f"ksock hello: bad nips {nips}")
    return int(nips)


def unpack_hello(b: bytes | bytearray | memoryview) -> KsockHello:
    """Parse a whole V3 hello (either byte order), as ``ksocknal_recv_hello{,_v2}`` check it.

    Raises:
        WireProtocolError: short buffer, bad magic/version/nips, a zero IP, or src_nid ANY.
    """
    if len(b) < HELLO_SIZE:
        raise bad_frame(f"short ksock hello: {len(b)} bytes")
    flip = hello_flip(struct.unpack_from("<I", b, 0)[0])
    st = _HELLO_BE if flip else _HELLO_LE
    _m, ver, src, dst, spid, dpid, sinc, dinc, ctype, _n = st.unpack_from(b, 0)
    check_hello_version(ver)
    nips = hello_nips(b, flip)
    if len(b) < HELLO_SIZE + 4 * nips:
        raise bad_frame(f"short ksock hello: {len(b)} bytes for {nips} IPs")
    ips = struct.unpack_from(f"{'>' if flip else '<'}{nips}I", b, HELLO_SIZE)
    if 0 in ips:
        raise bad_frame("ksock hello: zero IP")
    if src == LNET_NID_ANY:
        raise bad_frame("ksock hello: src_nid is LNET_NID_ANY")
    return KsockHello(NID.from_nid4(src), NID.from_nid4(dst), spid, dpid, sinc, dinc, ctype,
                      tuple(ips), ver)


def invert_ctype(ctype: int) -> int:
    """``ksocknal_invert_type``: the type the passive side gives its end of the connection."""
    return {SOCKLND_CONN_ANY: SOCKLND_CONN_ANY, SOCKLND_CONN_CONTROL: SOCKLND_CONN_CONTROL,
            SOCKLND_CONN_BULK_IN: SOCKLND_CONN_BULK_OUT,
            SOCKLND_CONN_BULK_OUT: SOCKLND_CONN_BULK_IN}.get(ctype, SOCKLND_CONN_NONE)


# --- ksock_msg --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KsockMsg:
    """One V3 ``struct ksock_msg``: NOOP (hdr None, no payload) or LNET (hdr + payload)."""

    type: int
    csum: int = 0
    zc_cookies: tuple[int, int] = (0, 0)
    hdr: LNetHdr | None = None
    payload: bytes = b""


def ksock_csum(data: bytes | bytearray | memoryview) -> int:
    """``ksocknal_csum(~0, ...)``: the kernel's crc32_le seeded ~0 without the final inversion."""
    return zlib.crc32(data) ^ 0xFFFF_FFFF


def unpack_ksm_hdr(b: bytes | bytearray | memoryview, flip: bool,
                   off: int = 0) -> tuple[int, int, int, int]:
    """(type, csum, zc_cookie0, zc_cookie1) of the ksock_msg_hdr at ``off``; the type is
    checked.

    Raises:
        WireProtocolError: a type other than KSOCK_MSG_NOOP / KSOCK_MSG_LNET.
    """
    t, csum, c0, c1 = (_KSM_HDR_BE if flip else _KSM_HDR_LE).unpack_from(b, off)
    if t not in (KSOCK_MSG_NOOP, KSOCK_MSG_LNET):
        raise bad_frame(f"ksock msg: bad type {t:#x}")
    return t, csum, c0, c1


def verify_csum(frame: bytes | bytearray | memoryview, csum: int,
                payload: bytes | bytearray | memoryview = b"") -> None:
    """Check a non-zero ``ksm_csum`` over ``frame`` (+ ``payload``, when the payload was
    received apart from the headers) with the csum field zeroed, without joining them."""
    if csum == 0:
        return
    got = ksock_csum_parts(frame, payload)
    if got != csum:
        raise bad_frame(f"ksock msg: checksum mismatch {csum:#x} != {got:#x}")


def ksock_csum_parts(head: bytes | bytearray | memoryview,
                     payload: bytes | bytearray | memoryview = b"") -> int:
    """``ksocknal_csum(~0, ...)`` over ``head`` with bytes 4..8 (ksm_csum) read as zero, then
    ``payload``: the frame's checksum computed piecewise (no concatenation)."""
    h = memoryview(head)
    crc = zlib.crc32(h[8:], zlib.crc32(b"\0\0\0\0", zlib.crc32(h[:4])))
    return zlib.crc32(payload, crc) ^ 0xFFFF_FFFF


#: The ksock_msg_hdr of every LNET frame we send: type LNET, no checksum, no ZC cookies.
_LNET_KSM = _KSM_HDR_LE.pack(KSOCK_MSG_LNET, 0, 0, 0)
#: ksock_msg_hdr + lnet_hdr_nid4: what precedes the payload of a KSOCK_MSG_LNET frame.
LNET_FRAME_HEAD = KSOCK_MSG_HDR_SIZE + LNET_HDR_SIZE


def pack_lnet_head(hdr: LNetHdr, payload: bytes | bytearray | memoryview = b"", *,
                   checksum: bool = False) -> bytes:
    """The 96 bytes that precede ``payload`` in a V3 KSOCK_MSG_LNET frame (ksock_msg_hdr +
    lnet_hdr_nid4), for a scatter-gather send of head and payload without joining them
    (``ksocknal_pack_msg_v2`` fills the header iov, the payload goes as its own kiov).
    ``checksum`` fills ksm_csum over head and payload as ``ksocknal_lib_csum_tx`` does."""
    head = _LNET_KSM + pack_hdr(hdr)
    if not checksum:
        return head
    csum = ksock_csum_parts(head, payload)
    return _KSM_HDR_LE.pack(KSOCK_MSG_LNET, csum, 0, 0) + head[KSOCK_MSG_HDR_SIZE:]


def pack_msg(m: KsockMsg, *, checksum: bool = False) -> bytes:
    """Pack a V3 ksock_msg (``ksocknal_pack_msg_v3``); ``checksum`` fills ksm_csum as
    ``ksocknal_lib_csum_tx`` does when ``enable_csum`` is set (otherwise ``m.csum`` is sent)."""
    c0, c1 = m.zc_cookies
    if m.type == KSOCK_MSG_LNET:
        if m.hdr is None or len(m.payload) != m.hdr.payload_length:
            raise ValueError("LNET ksock_msg needs a header whose payload_length matches")
        body = pack_hdr(m.hdr)
        payload = m.payload
    elif m.type == KSOCK_MSG_NOOP:
        body = payload = b""
    else:
        raise ValueError(f"bad ksock msg type {m.type:#x}")
    csum = m.csum
    if checksum:
        csum = ksock_csum_parts(_KSM_HDR_LE.pack(m.type, 0, c0, c1) + body, payload)
    return b"".join((_KSM_HDR_LE.pack(m.type, csum, c0, c1), body, payload))


def unpack_msg(b: bytes | bytearray | memoryview, *, flip: bool = False) -> KsockMsg:
    """Parse exactly one whole V3 ksock_msg.

    Raises:
        WireProtocolError: short/long buffer, bad type, bad header, or bad checksum.
    """
    if len(b) < KSOCK_MSG_HDR_SIZE:
        raise bad_frame(f"short ksock msg: {len(b)} bytes")
    t, csum, c0, c1 = unpack_ksm_hdr(b, flip)
    hdr = None
    payload = b""
    end = KSOCK_MSG_HDR_SIZE
    if t == KSOCK_MSG_LNET:
        hdr = unpack_hdr(memoryview(b)[end:])
        end += LNET_HDR_SIZE + hdr.payload_length
        if len(b) < end:
            raise bad_frame(f"short ksock msg: {len(b)} < {end} bytes")
        payload = bytes(b[KSOCK_MSG_HDR_SIZE + LNET_HDR_SIZE:end])
    if len(b) != end:
        raise bad_frame(f"ksock msg: {len(b) - end} trailing bytes")
    verify_csum(b, csum)
    return KsockMsg(t, csum, (c0, c1), hdr, payload)
