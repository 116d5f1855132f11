"""The socklnd V4 (16-byte NID) layouts of a stream unit, for the stream tracker (issue 26
item 8).

Theory of operation (sans-I/O, no state): ``flowtrack.parse_unit`` frames every unit of both
protocols (the first word says which unit; its length and checks); what differs in V4 is read
here, with the layouts of ``nodes/lnd/wire6.py`` (socklnd_proto.c ``ksocknal_pack_msg_v4`` /
``ksocknal_send_hello_v4``, lnet-idl.h ``lnet_hdr_nid16``). The protocol follows the socket's
address family (``ksocknal_create_conn``: V4 on AF_INET6), so a flow carried by IPv6 is read
with these, an IPv4 one with V3's. Units:

* ``lnet_acceptor_connreq_v2`` (28 bytes, version 2; a v1 connreq, 16 bytes, is still legal):
  :func:`connreq16`;
* ``ksock_hello_msg`` V4 (80 bytes, ``nips`` always 0): :func:`hello16`;
* an LNET ksock_msg (24 + 96 + ``payload_length``): dest and src ``struct lnet_nid`` (20
  bytes each), then pids, type and payload_length as in nid4: :func:`lnet_fixed16`,
  :data:`PORTAL_OFF16`.

NIDs are returned as :func:`nid_key` values, the key ``nodes.lnet.nid.NID`` compares by: the
nid4 for a 4-byte address, ``1 << 192 | net_id << 128 | addr`` for an IPv6 one, so a rule's
``src_nid``/``dst_nid`` compare as integers whatever the NID's size.
"""

from __future__ import annotations

import struct

from nodes.lnd.wire import CONNREQ_SIZE, KSOCK_PROTO_V4, LNET_PROTO_ACCEPTOR_VERSION
from nodes.lnd.wire6 import (
    CONNREQ2_SIZE,
    HELLO4_SIZE,
    LNET_FRAME_HEAD16,
    LNET_PROTO_ACCEPTOR_VERSION_16,
    NID_STRUCT_SIZE,
)
from nodes.lnet.hdr import MsgType
from nodes.lnet.nid import NID

_U32 = struct.Struct("<I")
_NID_HEAD = struct.Struct(">BBH")
_FIXED16 = struct.Struct("<IIII")  # dest_pid, src_pid, type, payload_length (after 2 NIDs)
#: ksock_msg_hdr + lnet_hdr_nid16: bytes of an LNET unit read before it is classified
HEAD16 = LNET_FRAME_HEAD16
#: ptl_index offset in lnet_hdr_nid16 of a PUT / GET (the union starts at byte 56)
PORTAL_OFF16 = {int(MsgType.PUT): 56 + 32, int(MsgType.GET): 56 + 24}
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


def lnet_fixed16(b: bytes | memoryview, h: int
                 ) -> tuple[int | None, int | None, int, int, int, int]:
    """(dest, src, dest_pid, src_pid, type, payload_length) of the ``lnet_hdr_nid16`` at
    ``h``; a NID of a size no NID has is None."""
    dpid, spid, mtype, plen = _FIXED16.unpack_from(b, h + 2 * NID_STRUCT_SIZE)
    return nid16_key(b, h), nid16_key(b, h + NID_STRUCT_SIZE), dpid, spid, mtype, plen


def connreq16(b: bytes | memoryview, off: int, avail: int) -> tuple[int, int | None]:
    """(length, the connreq's NID) of the acceptor connreq at ``off``: v2 (a ``struct
    lnet_nid``) or v1 (a nid4); length ``NEED`` or ``BAD`` (another version)."""
    if avail < 8:
        return NEED, None
    version = _U32.unpack_from(b, off + 4)[0]
    if version == LNET_PROTO_ACCEPTOR_VERSION:
        if avail < CONNREQ_SIZE:
            return NEED, None
        return CONNREQ_SIZE, int.from_bytes(b[off + 8:off + 16], "little")
    if version != LNET_PROTO_ACCEPTOR_VERSION_16:
        return BAD, None
    if avail < CONNREQ2_SIZE:
        return NEED, None
    return CONNREQ2_SIZE, nid16_key(b, off + 8)


def hello16(b: bytes | memoryview, off: int, avail: int) -> tuple[int, int | None, int | None]:
    """(length, src, dest) of the V4 hello at ``off`` (``nips`` must be 0)."""
    if avail < HELLO4_SIZE:
        return NEED, None, None
    if _U32.unpack_from(b, off + 4)[0] != KSOCK_PROTO_V4 \
            or _U32.unpack_from(b, off + HELLO4_SIZE - 4)[0] != 0:
        return BAD, None, None
    return HELLO4_SIZE, nid16_key(b, off + 8), nid16_key(b, off + 8 + NID_STRUCT_SIZE)
