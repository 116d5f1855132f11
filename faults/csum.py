"""Layer-4 checksums of a raw IPv4 or IPv6 packet, for the ``corrupt`` fault's ``csum`` param.

Theory of operation: a corrupted segment keeps a valid checksum (``csum: fix``, so the bits
reach LNet: RFC 793/768 pseudo-header for IPv4, RFC 8200 §8.1 for IPv6) or gets one sure to be
wrong (``csum: bad``, so the receiver's kernel drops it). An IPv6 packet's extension headers
are walked (``faults/ip6ext.py``) to its upper-layer header, and a routing header's final
destination goes in the pseudo-header (RFC 8200 §8.1); a fragment is left as it is.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from faults import ip6ext

#: checksum offset in the L4 header: TCP, UDP, ICMP, ICMPv6
_CSUM_OFF = {6: 16, 17: 6, 1: 2, 58: 2}


def _sum16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def _l3(data: bytes) -> tuple[int, int, Callable[[int], bytes]]:
    """(header length, L4 protocol, pseudo-header of an L4 length); an IPv6 fragment or
    unreadable chain is protocol -1 (no checksum touched)."""
    if data[0] >> 4 == 6:
        chain = ip6ext.walk(data)
        if isinstance(chain, str):
            return len(data), -1, lambda n: b""
        proto, dst = chain.proto, chain.final_dst or data[24:40]
        return chain.off, proto, lambda n: data[8:24] + dst + struct.pack("!IxxxB", n, proto)
    proto = data[9]
    if proto == 1:  # ICMPv4 has no pseudo-header
        return (data[0] & 0x0F) * 4, proto, lambda n: b""
    return (data[0] & 0x0F) * 4, proto, lambda n: data[12:20] + struct.pack("!BBH", 0, proto, n)


def fix_l4_checksum(data: bytes) -> bytes:
    """Recompute the TCP/UDP checksum of an IPv4 or IPv6 packet."""
    ihl, proto, pseudo = _l3(data)
    off = {6: 16, 17: 6}.get(proto)
    if off is None or len(data) < ihl + off + 2:
        return data
    seg = bytearray(data[ihl:])
    seg[off:off + 2] = b"\0\0"
    csum = ~_sum16(pseudo(len(seg)) + bytes(seg)) & 0xFFFF
    if proto == 17 and csum == 0:
        csum = 0xFFFF
    seg[off:off + 2] = struct.pack("!H", csum)
    return data[:ihl] + bytes(seg)


def break_l4_checksum(data: bytes) -> bytes:
    """A packet whose TCP/UDP/ICMP checksum is sure to be wrong (``csum: bad``).

    Flipped bits can cancel in a ones'-complement sum (a 0->1 and a 1->0 at the same bit of
    two 16-bit words), leaving a corrupted packet that still verifies; then the checksum
    field itself is flipped too, so the receiver's kernel always drops it."""
    ihl, proto, pseudo = _l3(data)
    off = _CSUM_OFF.get(proto)
    if off is None or len(data) < ihl + off + 2:
        return data
    seg = data[ihl:]
    if proto == 17 and seg[off:off + 2] == b"\0\0":
        return data  # UDP without a checksum: nothing to break
    if _sum16(pseudo(len(seg)) + seg) != 0xFFFF:
        return data  # already wrong
    out = bytearray(data)
    out[ihl + off + 1] ^= 0x01
    return bytes(out)
