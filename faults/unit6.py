"""One socklnd V4 stream unit (16-byte NIDs), for the stream tracker (issue 26 item 8).

Theory of operation (sans-I/O, no state): the V4 twin of ``flowtrack.parse_unit``, with the
layouts of ``nodes/lnd/wire6.py`` (socklnd_proto.c ``ksocknal_pack_msg_v4`` /
``ksocknal_send_hello_v4``, lnet-idl.h ``lnet_hdr_nid16``). The protocol follows the socket's
address family (``ksocknal_create_conn``: V4 on AF_INET6), so a flow carried by IPv6 is read
with this parser, an IPv4 one with V3's. Units:

* ``lnet_acceptor_connreq_v2`` (28 bytes, version 2; a v1 connreq, 16 bytes, is still legal);
* ``ksock_hello_msg`` V4 (80 bytes, ``nips`` always 0);
* a NOOP ksock_msg (24), an LNET ksock_msg (24 + 96 + ``payload_length``): dest and src
  ``struct lnet_nid`` (20 bytes each), then pids, type and payload_length as in nid4.

NIDs are returned as :func:`nid_key` values, the key ``nodes.lnet.nid.NID`` compares by: the
nid4 for a 4-byte address, ``1 << 192 | net_id << 128 | addr`` for an IPv6 one, so a rule's
``src_nid``/``dst_nid`` compare as integers whatever the NID's size.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from nodes.lnd.wire import (
    CONNREQ_SIZE,
    KSOCK_MSG_HDR_SIZE,
    KSOCK_MSG_LNET,
    KSOCK_MSG_NOOP,
    KSOCK_PROTO_V4,
    LNET_PROTO_ACCEPTOR_MAGIC,
    LNET_PROTO_ACCEPTOR_VERSION,
    LNET_PROTO_MAGIC,
)
from nodes.lnd.wire6 import (
    CONNREQ2_SIZE,
    HELLO4_SIZE,
    LNET_FRAME_HEAD16,
    LNET_PROTO_ACCEPTOR_VERSION_16,
    NID_STRUCT_SIZE,
)
from nodes.lnet.hdr import LNET_MTU, LNET_PID_LUSTRE, LNET_PID_USERFLAG, MsgType
from nodes.lnet.nid import NID

if TYPE_CHECKING:
    from faults.flowtrack import LNetMsg

_U32 = struct.Struct("<I")
_NID_HEAD = struct.Struct(">BBH")
_FIXED16 = struct.Struct("<IIII")  # dest_pid, src_pid, type, payload_length (after 2 NIDs)
_TYPES = {int(t): t.name for t in MsgType}
#: ptl_index offset in lnet_hdr_nid16 of a PUT / GET (the union starts at byte 56)
_PORTAL_OFF16 = {int(MsgType.PUT): 56 + 32, int(MsgType.GET): 56 + 24}
NEED, BAD = -1, -2


def nid_key(nid: NID) -> int:
    """The integer a rule compares a NID by (``NID``'s own key: nid4, or beyond 64 bits)."""
    if not nid.is_large:
        return nid.nid4
    return (1 << 192) | (nid.net.net_id << 128) | nid.addr


def nid16_key(b: bytes | memoryview, off: int) -> int | None:
    """:func:`nid_key` of the ``struct lnet_nid`` at ``off`` (None: a size no NID has)."""
    size, lnd, num = (int(x) for x in _NID_HEAD.unpack_from(b, off))
    net_id = (lnd << 16) | num
    if size == 0:
        return (net_id << 32) | int.from_bytes(b[off + 4:off + 8], "big")
    if size == 12:
        return (1 << 192) | (net_id << 128) | int.from_bytes(b[off + 4:off + 20], "big")
    return None


def _pid_ok(pid: int) -> bool:
    return pid == LNET_PID_LUSTRE or bool(pid & LNET_PID_USERFLAG)


def parse_unit16(b: bytes | memoryview, off: int, strict: bool, make: type[LNetMsg]
                 ) -> tuple[int, LNetMsg | None]:
    """(length, message) of the V4 unit at ``b[off:]``; length ``NEED`` or ``BAD``."""
    avail = len(b) - off
    if avail < 4:
        return NEED, None
    first = _U32.unpack_from(b, off)[0]
    if first == KSOCK_MSG_LNET:
        if avail < LNET_FRAME_HEAD16:
            return NEED, None
        h = off + KSOCK_MSG_HDR_SIZE
        dest, src = nid16_key(b, h), nid16_key(b, h + NID_STRUCT_SIZE)
        dpid, spid, mtype, plen = _FIXED16.unpack_from(b, h + 2 * NID_STRUCT_SIZE)
        name = _TYPES.get(mtype)
        if name is None or dest is None or src is None or plen > LNET_MTU \
                or (strict and not (_pid_ok(dpid) and _pid_ok(spid))):
            return BAD, None
        poff = _PORTAL_OFF16.get(mtype)
        portal = None if poff is None else _U32.unpack_from(b, h + poff)[0]
        return LNET_FRAME_HEAD16 + plen, make(name, src, dest, portal)
    if first == KSOCK_MSG_NOOP and not strict:
        return (KSOCK_MSG_HDR_SIZE, None) if avail >= KSOCK_MSG_HDR_SIZE else (NEED, None)
    if first == LNET_PROTO_ACCEPTOR_MAGIC:
        if avail < 8:
            return NEED, None
        version = _U32.unpack_from(b, off + 4)[0]
        if version == LNET_PROTO_ACCEPTOR_VERSION:
            if avail < CONNREQ_SIZE:
                return NEED, None
            return CONNREQ_SIZE, make("HELLO", None, int.from_bytes(b[off + 8:off + 16], "little"))
        if version != LNET_PROTO_ACCEPTOR_VERSION_16:
            return BAD, None
        if avail < CONNREQ2_SIZE:
            return NEED, None
        return CONNREQ2_SIZE, make("HELLO", None, nid16_key(b, off + 8))
    if first == LNET_PROTO_MAGIC:
        if avail < HELLO4_SIZE:
            return NEED, None
        if _U32.unpack_from(b, off + 4)[0] != KSOCK_PROTO_V4 \
                or _U32.unpack_from(b, off + HELLO4_SIZE - 4)[0] != 0:
            return BAD, None
        return HELLO4_SIZE, make("HELLO", nid16_key(b, off + 8),
                                 nid16_key(b, off + 8 + NID_STRUCT_SIZE))
    return BAD, None
