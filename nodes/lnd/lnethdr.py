"""The LNet header's wire codec: ``struct _lnet_hdr_nid4``, byte for byte (x86, LE), for every
LND that carries it (the socklnd's ``ksock_msg``, ``wire.py``; the o2iblnd's ``kib_msg``,
``nodes/o2ib/msg.py``; the V4 header's fixed part, ``wire6.py``; the simulator's corrupting
link).

Theory of operation (STYLE rule 6): pure ``struct`` packing, no state; the header as a value is
``nodes/lnet/hdr.py`` ``LNetHdr``. Layout (include/uapi/linux/lnet/lnet-idl.h, ``__packed``),
72 bytes: dest_nid u64, src_nid u64, dest_pid u32, src_pid u32, type u32, payload_length u32,
then the 40-byte ``union lnet_cmd_hdr`` (ack / put / get / reply / hello); bytes a member does
not use are 0. The LNet header is always little-endian, whatever the sender's byte order
(``lnet_parse`` reads it with le*_to_cpu). A header that fails ``lnet_parse``'s checks is a
``WireProtocolError`` (``bad_frame``), as is any malformed structure the LNDs' codecs read.
"""

from __future__ import annotations

import struct

from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_HDR_SIZE, LNET_MTU, LNetHdr, MsgType, WireHandle
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import nid4_cached

_HDR_FIXED = struct.Struct("<QQIIII")  # 32 bytes before the union
_WMD = struct.Struct("<QQ")
_ACK = struct.Struct("<QQQI")  # dst_wmd, match_bits, mlength
_PUT = struct.Struct("<QQQQII")  # ack_wmd, match_bits, hdr_data, ptl_index, offset
_GET = struct.Struct("<QQQIII")  # return_wmd, match_bits, ptl_index, src_offset, sink_length
_HELLO_U = struct.Struct("<QI")  # incarnation, type
_UNION_SIZE = LNET_HDR_SIZE - _HDR_FIXED.size  # 40

_REMOTE_ERROR = int(HStatus.REMOTE_ERROR)


def bad_frame(descr: str) -> WireProtocolError:
    return WireProtocolError(descr, _REMOTE_ERROR)


def swab32(v: int) -> int:
    """``__swab32``."""
    return int.from_bytes(v.to_bytes(4, "little"), "big")


def pack_hdr(h: LNetHdr) -> bytes:
    """Pack ``h`` into the 72 bytes of ``struct _lnet_hdr_nid4``; the union per ``h.type``."""
    fixed = _HDR_FIXED.pack(h.dest_nid.nid4, h.src_nid.nid4, h.dest_pid, h.src_pid,
                            int(h.type), h.payload_length)
    w = (h.wmd.interface_cookie, h.wmd.object_cookie)
    if h.type == MsgType.ACK:
        union = _ACK.pack(*w, h.match_bits, h.mlength)
    elif h.type == MsgType.PUT:
        union = _PUT.pack(*w, h.match_bits, h.hdr_data, h.ptl_index, h.offset)
    elif h.type == MsgType.GET:
        union = _GET.pack(*w, h.match_bits, h.ptl_index, h.offset, h.sink_length)
    elif h.type == MsgType.REPLY:
        union = _WMD.pack(*w)
    else:
        union = _HELLO_U.pack(h.incarnation, h.hello_type)
    return fixed + union + bytes(_UNION_SIZE - len(union))


def unpack_hdr(b: bytes | bytearray | memoryview) -> LNetHdr:
    """Unpack the first 72 bytes of ``b`` (``lnet_parse``'s checks on type and length).

    Raises:
        WireProtocolError: short buffer, unknown type, payload_length > LNET_MTU, or an ACK/GET
            carrying a payload (spec §4.1).
    """
    if len(b) < LNET_HDR_SIZE:
        raise bad_frame(f"short lnet_hdr: {len(b)} < {LNET_HDR_SIZE} bytes")
    dest, src, dpid, spid, mtype, plen = _HDR_FIXED.unpack_from(b, 0)
    if (t := _MSG_TYPES.get(mtype)) is None:  # (a dict: the enum call was a tenth of it)
        raise bad_frame(f"bad LNet message type {mtype}")
    if plen > LNET_MTU:
        raise bad_frame(f"payload_length {plen} > LNET_MTU {LNET_MTU}")
    if (t is MsgType.ACK or t is MsgType.GET) and plen != 0:
        raise bad_frame(f"{t.name} with payload_length {plen}")
    off = _HDR_FIXED.size
    dnid, snid = nid4_cached(dest), nid4_cached(src)
    # positional, in LNetHdr's field order (its ``readdressed`` lists it)
    if t is MsgType.ACK:
        ic, oc, mb, mlen = _ACK.unpack_from(b, off)
        return LNetHdr(dnid, snid, dpid, spid, t, plen, WireHandle(ic, oc), mb, mlength=mlen)
    if t is MsgType.PUT:
        ic, oc, mb, hd, ptl, offset = _PUT.unpack_from(b, off)
        return LNetHdr(dnid, snid, dpid, spid, t, plen, WireHandle(ic, oc), mb, hd, ptl,
                       offset)
    if t is MsgType.GET:
        ic, oc, mb, ptl, offset, sink = _GET.unpack_from(b, off)
        return LNetHdr(dnid, snid, dpid, spid, t, plen, WireHandle(ic, oc), mb, 0, ptl,
                       offset, sink)
    if t is MsgType.REPLY:
        ic, oc = _WMD.unpack_from(b, off)
        return LNetHdr(dnid, snid, dpid, spid, t, plen, WireHandle(ic, oc))
    inc, htype = _HELLO_U.unpack_from(b, off)
    return LNetHdr(dnid, snid, dpid, spid, t, plen, incarnation=inc, hello_type=htype)


_MSG_TYPES = {int(t): t for t in MsgType}
