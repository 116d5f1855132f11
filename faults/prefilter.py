"""Struct prefilter: classify an IPv4 or IPv6 packet from NFQUEUE without scapy (STYLE rule 7).

Theory of operation: every queued packet goes through :func:`classify`, which reads the IPv4
header (or the fixed 40-byte IPv6 one and, behind it, the extension header chain walked by
``faults/ip6ext.py``, bounded: offsets stay those of the packet as queued; a fragment, ESP or
an unreadable chain leaves the packet unclassified, its ``unclassified`` naming the
interposer's counter), the TCP/UDP ports or ICMP, and, for TCP port 988
(``LNET_ACCEPTOR_PORT``), peeks at the start of the TCP payload with the offsets of
``nodes/lnd/wire.py``:

* ``0xacce7100`` (acceptor connreq, 16 bytes) optionally followed by a hello, or
  ``LNET_PROTO_MAGIC`` (ksock hello) -> LNet type ``HELLO``;
* a ksock_msg_hdr of type ``KSOCK_MSG_LNET`` (0xc1) followed by at least the first 32 bytes of
  ``lnet_hdr_nid4`` -> its type (ACK/PUT/GET/REPLY/HELLO), dest/src NID, and for PUT/GET the
  portal (``ptl_index`` in the union);
* on IPv6 (socklnd V4, ``nodes/lnd/wire6.py``) the same with ``lnet_hdr_nid16``: 20-byte
  ``struct lnet_nid`` NIDs, read as ``faults.unit6.nid_key`` values;
* anything else on port 988 (a NOOP, or a segment that continues a message) -> LNet type None.

This peek sees only the *first* message of a segment, because TCP keeps no message
boundaries: a segment may carry several ksock_msgs and a large PUT/REPLY spans many segments.
The interposer therefore follows each connection's stream (``faults/flowtrack.py``, fed the
``seq`` and ``tcp_flags`` read here) whenever a rule needs LNet headers, and asks the
:class:`Matcher` about each message a segment carries (:meth:`Matcher.packet`,
:meth:`Matcher.message`); the peek stays for captures and rules without LNet keys.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from faults import ip6ext
from faults.flowtrack import LNetMsg
from faults.spec import Match
from faults.unit6 import PORTAL_OFF16, nid16_key, nid_key
from nodes.lnd.wire import (
    KSOCK_MSG_HDR_SIZE,
    KSOCK_MSG_LNET,
    LNET_ACCEPTOR_PORT,
    LNET_PROTO_ACCEPTOR_MAGIC,
    LNET_PROTO_MAGIC,
)
from nodes.lnet.hdr import LNetHdr, MsgType
from nodes.lnet.nid import NID

_IP_PROTO = {1: "icmp", 6: "tcp", 17: "udp", 58: "icmp"}
_TYPES = {int(t): t.name for t in MsgType}
_TYPE_NAMES = {t: t.name for t in MsgType}  # (Enum.name is a property: slow per message)
_PORTAL_TYPES = (MsgType.PUT, MsgType.GET)
_NIDS = struct.Struct("<QQ")
#: ptl_index offset in lnet_hdr_nid4: after ack_wmd, match_bits, hdr_data (PUT) or
#: return_wmd, match_bits (GET), in the union that starts at byte 32
_PORTAL_OFF = {int(MsgType.PUT): 32 + 32, int(MsgType.GET): 32 + 24}
_U32 = struct.Struct("<I")
_SEQ = struct.Struct("!I")


@dataclass(slots=True)
class Pkt:
    """What the prefilter learnt about one packet."""

    proto: str
    src: str
    dst: str
    sport: int = 0
    dport: int = 0
    l4_off: int = 0  # offset of the L4 payload (TCP data, UDP data, ICMP after its 8 bytes)
    tcp_off: int = 0  # offset of the TCP header
    lnet_type: str | None = None
    src_nid: int | None = None
    dst_nid: int | None = None
    portal: int | None = None
    tcp_flags: int = 0
    seq: int = 0
    v6: bool = False  # IPv6: its socklnd stream is V4 (lnet_hdr_nid16)
    #: IPv6 whose extension chain gives no upper-layer header: why (``ip6ext.FRAGMENTED``,
    #: ``ip6ext.UNREADABLE``, the interposer's counter names); nothing past the fixed header
    #: was read and ``proto`` names the header the walk stopped at
    unclassified: str | None = None

    @property
    def is_lnet(self) -> bool:
        return self.proto == "tcp" and LNET_ACCEPTOR_PORT in (self.sport, self.dport)


def _ip(b: bytes, off: int) -> str:
    return ".".join(str(x) for x in b[off:off + 4])


def classify(data: bytes) -> Pkt | None:
    """Classify raw IPv4 or IPv6 bytes; None for other or truncated headers. IPv6 extension
    headers are walked (``ip6ext.walk``): the upper-layer header is read where the chain ends,
    or the packet comes back ``unclassified`` (a fragment, ESP, a hostile chain)."""
    if len(data) >= 40 and data[0] >> 4 == 6:
        ihl, nxt = 40, data[6]
        src, dst = str(ipaddress.IPv6Address(data[8:24])), str(ipaddress.IPv6Address(data[24:40]))
        if nxt in ip6ext.EXT_HEADERS:
            chain = ip6ext.walk(data)
            if isinstance(chain, str):
                return Pkt(f"ip{nxt}", src, dst, l4_off=40, v6=True, unclassified=chain)
            ihl, nxt = chain.off, chain.proto
        pkt = Pkt(_IP_PROTO.get(nxt, f"ip{nxt}"), src, dst, l4_off=ihl, v6=True)
    elif len(data) >= 20 and data[0] >> 4 == 4:
        ihl = (data[0] & 0x0F) * 4
        pkt = Pkt(_IP_PROTO.get(data[9], f"ip{data[9]}"), _ip(data, 12), _ip(data, 16),
                  l4_off=ihl)
    else:
        return None
    proto = pkt.proto
    if proto == "icmp":
        pkt.l4_off = ihl + 8
    elif proto == "udp" and len(data) >= ihl + 8:
        pkt.sport, pkt.dport = struct.unpack_from("!HH", data, ihl)
        pkt.l4_off = ihl + 8
    elif proto == "tcp" and len(data) >= ihl + 20:
        pkt.tcp_off = ihl
        pkt.sport, pkt.dport = struct.unpack_from("!HH", data, ihl)
        pkt.tcp_flags = data[ihl + 13]
        pkt.seq = _SEQ.unpack_from(data, ihl + 4)[0]
        pkt.l4_off = ihl + (data[ihl + 12] >> 4) * 4
        if pkt.is_lnet:
            _peek_lnet(data, pkt)
    return pkt


def _peek_lnet(data: bytes, pkt: Pkt) -> None:
    """The first message of a port-988 segment: ``lnet_hdr_nid4`` on IPv4 (socklnd V3), the
    96-byte ``lnet_hdr_nid16`` on IPv6 (V4: two 20-byte NIDs before the same fields)."""
    off = pkt.l4_off
    if len(data) < off + 4:
        return
    first = _U32.unpack_from(data, off)[0]
    if first in (LNET_PROTO_ACCEPTOR_MAGIC, LNET_PROTO_MAGIC):
        pkt.lnet_type = "HELLO"
        return
    h = off + KSOCK_MSG_HDR_SIZE
    fixed = h + 40 if pkt.v6 else h + 16  # dest_pid, src_pid, type, payload_length
    if first != KSOCK_MSG_LNET or len(data) < fixed + 16:
        return
    mtype = _U32.unpack_from(data, fixed + 8)[0]
    name = _TYPES.get(mtype)
    if name is None:
        return
    if pkt.v6:
        pkt.dst_nid, pkt.src_nid = nid16_key(data, h), nid16_key(data, h + 20)
        poff = PORTAL_OFF16.get(mtype)
    else:
        pkt.dst_nid, pkt.src_nid = _NIDS.unpack_from(data, h)
        poff = _PORTAL_OFF.get(mtype)
    pkt.lnet_type = name
    if poff is not None and len(data) >= h + poff + 4:
        pkt.portal = _U32.unpack_from(data, h + poff)[0]


class Matcher:
    """The one matcher of a fault's ``match`` (issue 29): the interposer asks it about each
    packet and each message of a stream, the simulator's fabric about each message it
    carries (``header``). Compiled from the typed ``Match`` against integers (NIDs as
    ``unit6.nid_key``: a small NID's nid4, a large one's key beyond 64 bits), for the hot
    path; ``local_nids`` (text, as the interposer's spec file carries them) only matter
    to ``forwarded``."""

    def __init__(self, match: Match, local_nids: Iterable[str] = ()) -> None:
        self.proto = match.proto
        self.types = frozenset(match.types)
        self.src_nid = nid_key(match.src_nid) if match.src_nid is not None else None
        self.dst_nid = nid_key(match.dst_nid) if match.dst_nid is not None else None
        self.portal = match.portal
        self.port = match.port
        self.peer = match.peer
        self.forwarded = match.forwarded
        # a large NID as V4 carries it, and as a V3 hop carries it (lnet_nid_to_nid4)
        nids = [NID.parse(n) for n in local_nids]
        self.local = frozenset([*map(nid_key, nids), *(n.nid4 for n in nids)])
        self.needs_header = bool(self.types or self.src_nid is not None
                                 or self.dst_nid is not None or self.portal is not None
                                 or self.forwarded)

    def __call__(self, pkt: Pkt) -> bool:
        """The rule against a packet judged by its first message (``classify``'s peek)."""
        if not self.packet(pkt):
            return False
        if not self.needs_header:
            return True
        if pkt.lnet_type is None:
            return False
        return self.fields(pkt.lnet_type, pkt.src_nid, pkt.dst_nid, pkt.portal)

    def packet(self, pkt: Pkt) -> bool:
        """The keys every packet has: protocol, port, peer address."""
        if self.proto == "lnet":
            if not pkt.is_lnet:
                return False
        elif self.proto != "any" and pkt.proto != self.proto:
            return False
        if self.port is not None and self.port not in (pkt.sport, pkt.dport):
            return False
        return self.peer is None or self.peer in (pkt.src, pkt.dst)

    def message(self, m: LNetMsg) -> bool:
        """The LNet keys against one message of the stream (``flowtrack``)."""
        return self.fields(m.type, m.src_nid, m.dst_nid, m.portal)

    def header(self, hdr: LNetHdr) -> bool:
        """The LNet keys against the header of a message the simulator's fabric carries (its
        NIDs typed; the portal of a PUT or GET, as the interposer reads ``ptl_index``)."""
        if not self.needs_header:
            return True
        mtype = hdr.type
        return self.fields(
            _TYPE_NAMES[mtype], nid_key(hdr.src_nid) if self.src_nid is not None else None,
            nid_key(hdr.dest_nid) if self.dst_nid is not None else None,
            hdr.ptl_index if mtype in _PORTAL_TYPES else None)

    def fields(self, mtype: str, src: int | None, dst: int | None, portal: int | None) -> bool:
        if self.types and mtype not in self.types:
            return False
        if self.src_nid is not None and src != self.src_nid:
            return False
        if self.dst_nid is not None and dst != self.dst_nid:
            return False
        if self.portal is not None and portal != self.portal:
            return False
        # forwarded by this router: neither end of the LNet message is one of our NIDs
        return not (self.forwarded and (src in self.local or dst in self.local))
