"""The 96-byte head of a KSOCK_MSG_LNET frame in one ``struct.pack`` (the send hot path).

Theory of operation: ``wire.pack_lnet_head`` builds a frame's head as the packed
ksock_msg_hdr, then ``pack_hdr``'s fixed part, union member and zero padding, joined (three
joins and a padding allocation per frame). Here one precompiled ``Struct`` per message type
lays out the same 96 bytes in a single ``pack`` (``ksocknal_pack_msg_v2``: ksock_msg_hdr of
type KSOCK_MSG_LNET, no checksum, no zero-copy cookies, then ``struct _lnet_hdr_nid4``).
Byte for byte what ``wire.pack_lnet_head`` gives (tests/unit/test_wire.py); the connection
machine (``framing.py``) uses it for every frame it sends without a checksum. Measured with
``timeit``: ~35 % less per head (issue 13, benchmarks/msgrate.py).
"""

from __future__ import annotations

import struct

from nodes.lnd import wire
from nodes.lnet.hdr import LNET_HDR_SIZE, LNetHdr, MsgType

#: ksock_msg_hdr (type, csum, zc cookies) + lnet_hdr_nid4's 32 bytes before the union
_FIXED = "<IIQQQQIIII"
_UNION_SIZE = LNET_HDR_SIZE - struct.calcsize("<QQIIII")  # 40


def _head(union: str) -> struct.Struct:
    return struct.Struct(f"{_FIXED}{union}{_UNION_SIZE - struct.calcsize('<' + union)}x")


_ACK = _head("QQQI")  # dst_wmd, match_bits, mlength
_PUT = _head("QQQQII")  # ack_wmd, match_bits, hdr_data, ptl_index, offset
_GET = _head("QQQIII")  # return_wmd, match_bits, ptl_index, src_offset, sink_length
_REPLY = _head("QQ")  # dst_wmd


def pack_head(h: LNetHdr) -> bytes:
    """``wire.pack_lnet_head(h)`` (no checksum) in one ``pack``."""
    t = h.type
    fixed = (wire.KSOCK_MSG_LNET, 0, 0, 0, h.dest_nid.nid4, h.src_nid.nid4, h.dest_pid,
             h.src_pid, int(t), h.payload_length, h.wmd.interface_cookie,
             h.wmd.object_cookie)
    if t is MsgType.PUT:
        return _PUT.pack(*fixed, h.match_bits, h.hdr_data, h.ptl_index, h.offset)
    if t is MsgType.ACK:
        return _ACK.pack(*fixed, h.match_bits, h.mlength)
    if t is MsgType.GET:
        return _GET.pack(*fixed, h.match_bits, h.ptl_index, h.offset, h.sink_length)
    if t is MsgType.REPLY:
        return _REPLY.pack(*fixed)
    return wire.pack_lnet_head(h)  # HELLO: not sent in a KSOCK_MSG_LNET frame by us


__all__ = ["pack_head"]
