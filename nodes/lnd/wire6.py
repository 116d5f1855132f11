"""ksocklnd V4 wire codec: the structures that carry 16-byte (large) NIDs (issue 26 item 8).

Theory of operation (STYLE rule 6): constants and byte layouts only, no state; like
``wire.py`` (V3) it is packed little-endian, x86. ``framing.py`` decides when each is legal.
The protocol follows the socket's address family (socklnd.c ``ksocknal_create_conn``: V4 on
AF_INET6, V3 on AF_INET), so an IPv4 peer never sees one of these and a router re-packs a
forwarded header per connection, V4 to its IPv6 peers and V3 to its IPv4 ones.

Layouts (all ``__packed``):

* ``struct lnet_nid`` (lnet-types.h), 20 bytes: nid_size u8 (0: 4-byte address, 12: IPv6),
  nid_type u8 (the LND), nid_num big-endian u16, nid_addr[4] big-endian (a 4-byte address in
  nid_addr[0], the rest 0). Never byte-swapped on a flipped connection.
* ``struct lnet_acceptor_connreq_v2`` (lnet-idl.h), 28 bytes: magic 0xacce7100, version
  LNET_PROTO_ACCEPTOR_VERSION_16 (2), the peer's ``struct lnet_nid``; ``lnet_connect`` sends it
  instead of the 16-byte v1 for a large peer NID (acceptor.c).
* ``struct ksock_hello_msg`` (socklnd-idl.h), 80 bytes: magic LNET_PROTO_MAGIC, version 4,
  src and dst ``struct lnet_nid``, src/dst pid u32, src/dst incarnation u64, ctype u32, nips
  u32 (always 0: V4 carries no IP list). ``ksocknal_recv_hello_v4`` swabs pids, incarnations
  and ctype on a flipped connection, never the NIDs.
* ``struct lnet_hdr_nid16`` (the kernel's ``struct lnet_hdr`` as ``lnet_hdr_to_nid16`` writes
  it), 96 bytes: dest and src ``struct lnet_nid``, then dest_pid, src_pid, type,
  payload_length (u32 LE) and the 40-byte union, as in ``lnet_hdr_nid4``.
"""

from __future__ import annotations

import struct
from typing import Final

from nodes.lnd import lnethdr, wire
from nodes.lnet.hdr import LNET_HDR_SIZE, LNetHdr
from nodes.lnet.nid import NID, NID_SIZE_IPV6, Net

LNET_PROTO_ACCEPTOR_VERSION_16: Final = 2
NID_STRUCT_SIZE: Final = 20  # sizeof(struct lnet_nid)
LNET_HDR16_SIZE: Final = LNET_HDR_SIZE + 2 * (NID_STRUCT_SIZE - 8)  # 96
CONNREQ2_SIZE: Final = 8 + NID_STRUCT_SIZE  # 28
HELLO4_SIZE: Final = 8 + 2 * NID_STRUCT_SIZE + 32  # 80
_CONNREQ1_SIZE: Final = 16  # wire.CONNREQ_SIZE, sizeof(struct lnet_acceptor_connreq)
_KSM_SIZE: Final = 24  # wire.KSOCK_MSG_HDR_SIZE, sizeof(struct ksock_msg_hdr)
#: ksock_msg_hdr + lnet_hdr_nid16: what precedes the payload of a V4 KSOCK_MSG_LNET frame
LNET_FRAME_HEAD16: Final = _KSM_SIZE + LNET_HDR16_SIZE
_NID_HEAD = struct.Struct(">BBH")
_HELLO_TAIL_LE = struct.Struct("<IIQQiI")
_HELLO_TAIL_BE = struct.Struct(">IIQQiI")
_NID4_HEAD: Final = 16  # lnet_hdr_nid4's two u64 NIDs: what a nid16 header has 40 bytes in place of


def pack_nid(nid: NID) -> bytes:
    """``struct lnet_nid``, 20 bytes."""
    addr = nid.addr.to_bytes(4 + nid.size, "big")
    return _NID_HEAD.pack(nid.size, nid.net.lnd, nid.net.num) + addr + bytes(16 - len(addr))


def unpack_nid(b: bytes | bytearray | memoryview, off: int = 0) -> NID:
    """A ``struct lnet_nid`` at ``off``.

    Raises:
        WireProtocolError: an address size no NID has (neither 4 nor 16 bytes).
    """
    size, lnd, num = _NID_HEAD.unpack_from(b, off)
    if size not in (0, NID_SIZE_IPV6):
        raise lnethdr.bad_frame(f"struct lnet_nid: nid_size {size}")
    addr = int.from_bytes(bytes(b[off + 4:off + 8 + size]), "big")
    return NID(Net(lnd, num), addr, size)


def pack_connreq(nid: NID) -> bytes:
    """``lnet_connect``'s connreq: v1 (``wire.pack_connreq``) for a nid4, v2 for a large NID."""
    if not nid.is_large:
        return wire.pack_connreq(nid)
    return (struct.pack("<II", wire.LNET_PROTO_ACCEPTOR_MAGIC, LNET_PROTO_ACCEPTOR_VERSION_16)
            + pack_nid(nid))


def connreq_size(version: int) -> int:
    """The whole connreq's size by its version (``lnet_accept``'s switch).

    Raises:
        WireProtocolError: any other version (the acceptor answers with its own and closes).
    """
    if version == wire.LNET_PROTO_ACCEPTOR_VERSION:
        return _CONNREQ1_SIZE
    if version == LNET_PROTO_ACCEPTOR_VERSION_16:
        return CONNREQ2_SIZE
    raise lnethdr.bad_frame(f"acceptor: unsupported connreq version {version}")


def unpack_connreq(b: bytes | bytearray | memoryview, flip: bool) -> NID:
    """``acr_nid`` of a whole connreq of either version."""
    version = struct.unpack_from(">I" if flip else "<I", b, 4)[0]
    if version == LNET_PROTO_ACCEPTOR_VERSION_16:
        return unpack_nid(b, 8)  # struct lnet_nid never needs swabbing
    return wire.unpack_connreq(b)


def pack_hello(h: wire.KsockHello, *, flip: bool = False) -> bytes:
    """``ksocknal_send_hello_v4``: the whole 80-byte struct, nips 0."""
    head = struct.pack(">II" if flip else "<II", wire.LNET_PROTO_MAGIC, wire.KSOCK_PROTO_V4)
    tail = (_HELLO_TAIL_BE if flip else _HELLO_TAIL_LE).pack(
        h.src_pid, h.dst_pid, h.src_incarnation, h.dst_incarnation, h.ctype, 0)
    return head + pack_nid(h.src_nid) + pack_nid(h.dst_nid) + tail


def pack_any_hello(h: wire.KsockHello) -> bytes:
    """A hello of ``h.version``'s layout (``ksocknal_send_hello``: the conn's protocol)."""
    return pack_hello(h) if h.version == wire.KSOCK_PROTO_V4 else wire.pack_hello(h)


def unpack_hello(b: bytes | bytearray | memoryview, flip: bool) -> wire.KsockHello:
    """``ksocknal_recv_hello_v4`` on a whole 80-byte hello.

    Raises:
        WireProtocolError: short, a bad NID, or src_nid LNET_ANY_NID.
    """
    if len(b) < HELLO4_SIZE:
        raise lnethdr.bad_frame(f"short ksock V4 hello: {len(b)} bytes")
    src, dst = unpack_nid(b, 8), unpack_nid(b, 8 + NID_STRUCT_SIZE)
    spid, dpid, sinc, dinc, ctype, _nips = (_HELLO_TAIL_BE if flip else _HELLO_TAIL_LE
                                            ).unpack_from(b, 8 + 2 * NID_STRUCT_SIZE)
    if src.nid4 == 0xFFFF_FFFF_FFFF_FFFF and not src.is_large:
        raise lnethdr.bad_frame("ksock hello: src_nid is LNET_ANY_NID")
    return wire.KsockHello(src, dst, spid, dpid, sinc, dinc, ctype, (), wire.KSOCK_PROTO_V4)


def pack_hdr(h: LNetHdr) -> bytes:
    """``lnet_hdr_to_nid16``: the two NIDs as ``struct lnet_nid``, the rest as nid4's."""
    return pack_nid(h.dest_nid) + pack_nid(h.src_nid) + lnethdr.pack_hdr(h)[_NID4_HEAD:]


def unpack_hdr(b: bytes | bytearray | memoryview) -> LNetHdr:
    """``lnet_hdr_from_nid16`` with ``lnet_parse``'s checks (``lnethdr.unpack_hdr``'s)."""
    if len(b) < LNET_HDR16_SIZE:
        raise lnethdr.bad_frame(f"short lnet_hdr_nid16: {len(b)} < {LNET_HDR16_SIZE} bytes")
    dest, src = unpack_nid(b, 0), unpack_nid(b, NID_STRUCT_SIZE)
    rest = bytes(_NID4_HEAD) + bytes(b[2 * NID_STRUCT_SIZE:LNET_HDR16_SIZE])
    return lnethdr.unpack_hdr(rest).readdressed(src, dest)


def v3_view(h: LNetHdr) -> LNetHdr:
    """The header as a V3 (IPv4) connection delivers it: ``lnet_hdr_to_nid4`` keeps of each
    NID its net and its address's first 32 bits (``lnet_nid_to_nid4``), so a large NID
    routed over an IPv4 hop arrives as ``32.1.13.184@tcp6`` for ``2001:db8::..@tcp6`` (the
    simulator's fabric applies it where a daemon's socklnd packs V3)."""
    src, dst = h.src_nid, h.dest_nid
    return h.readdressed(NID.from_nid4(src.nid4) if src.is_large else src,
                         NID.from_nid4(dst.nid4) if dst.is_large else dst)


def pack_lnet_head(hdr: LNetHdr, payload: bytes | bytearray | memoryview = b"", *,
                   checksum: bool = False) -> bytes:
    """The 120 bytes before ``payload`` in a V4 KSOCK_MSG_LNET frame (``ksocknal_pack_msg_v4``:
    ksock_msg_hdr + lnet_hdr_nid16); ``checksum`` fills ksm_csum over head and payload."""
    head = struct.pack("<IIQQ", wire.KSOCK_MSG_LNET, 0, 0, 0) + pack_hdr(hdr)
    if not checksum:
        return head
    csum = wire.ksock_csum_parts(head, payload)
    return struct.pack("<IIQQ", wire.KSOCK_MSG_LNET, csum, 0, 0) + head[_KSM_SIZE:]
