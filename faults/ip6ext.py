"""The IPv6 extension header chain, walked to the upper-layer header (issue 26, faults on large
NIDs: a segment behind hop-by-hop, routing or destination options is still classified).

Theory of operation (sans-I/O, struct only: STYLE rule 7 keeps scapy off the per-packet path;
the tests forge the packets with scapy's ``IPv6ExtHdr*`` layers). Its users read the packet as
queued, at the offsets :func:`walk` gives (``faults.prefilter.classify``, ``faults.csum``):
nothing is copied. RFC 8200 §4: the fixed
header's Next Header names the first extension header; each extension header starts with its
own Next Header byte and a length byte, in 8-octet units not counting the first 8 (AH, RFC
4302 §2.2: in 4-octet units not counting the first 2). The walk is bounded: at most
:data:`MAX_EXT` headers, every length checked against the packet, so a hostile chain costs a
few steps and ends in a reason, never a traceback.

A **fragment** (RFC 8200 §4.5) is not classified: only the first fragment carries the TCP
header, and the flow tracker cannot follow a stream it sees in pieces (Linux's TCP never
fragments: it sizes its segments to the path MTU). The interposer counts it
(``v6_fragments``) and lets it pass, as every packet it cannot classify. ESP hides what
follows; "no next header" (59) has nothing to classify.

The TCP/UDP checksum's pseudo-header (RFC 8200 §8.1) uses the *final* destination when a
routing header is present: :func:`walk` reports it (type 0 and type 2: the last address of
the list; a segment routing header, RFC 8754 §2: segment list [0]).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Extension headers with the generic (next header, length in 8 octets) layout.
HOP_BY_HOP, ROUTING, FRAGMENT, DEST_OPTS, AH, ESP, NO_NEXT = 0, 43, 44, 60, 51, 50, 59
MOBILITY, HIP, SHIM6 = 135, 139, 140
EXT_HEADERS = frozenset({HOP_BY_HOP, ROUTING, FRAGMENT, DEST_OPTS, AH, ESP, MOBILITY, HIP,
                         SHIM6})
#: Most extension headers walked (RFC 8200 §4.1 recommends at most one of each, destination
#: options twice: eight names every header of that list once, and a little more).
MAX_EXT = 10
FIXED = 40

#: Why a packet's chain gives no upper-layer header (the interposer's counter names).
FRAGMENTED = "v6_fragments"
UNREADABLE = "v6_unclassified"


@dataclass(frozen=True, slots=True)
class Chain:
    """Where the upper-layer header starts (``off``), its protocol (``proto``), the number of
    extension headers walked, and the pseudo-header's destination (``final_dst``: None when
    it is the fixed header's)."""

    proto: int
    off: int
    count: int = 0
    final_dst: bytes | None = None


def walk(data: bytes | memoryview) -> Chain | str:
    """The upper-layer header of IPv6 ``data``, or why there is none (:data:`FRAGMENTED`,
    :data:`UNREADABLE`: truncated, too long a chain, ESP, no next header)."""
    n = len(data)
    if n < FIXED or data[0] >> 4 != 6:
        return UNREADABLE
    nxt, off, count = data[6], FIXED, 0
    final: bytes | None = None
    while nxt in EXT_HEADERS:
        if count >= MAX_EXT or nxt == ESP or n < off + 8:
            return UNREADABLE
        if nxt == FRAGMENT:
            return FRAGMENTED
        length = (data[off + 1] + 2) * 4 if nxt == AH else (data[off + 1] + 1) * 8
        if n < off + length:
            return UNREADABLE
        if nxt == ROUTING and data[off + 3] > 0:  # segments left: not the last hop yet
            final = _final_destination(data, off, length) or final
        nxt, off, count = data[off], off + length, count + 1
    if nxt == NO_NEXT:
        return UNREADABLE
    return Chain(nxt, off, count, final)


def _final_destination(data: bytes | memoryview, off: int, length: int) -> bytes | None:
    """The routing header's final destination (type 0 and 2: the last address; type 4,
    segment routing: segment list [0]); None for a type it does not know."""
    rtype = data[off + 2]
    if rtype in (0, 2) and length >= 24:
        return bytes(data[off + length - 16:off + length])
    if rtype == 4 and length >= 24:
        return bytes(data[off + 8:off + 24])
    return None

