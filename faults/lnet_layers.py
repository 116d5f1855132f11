"""Scapy layers for LNet over socklnd: acceptor connreq, ksock hello, ksock_msg, lnet_hdr.

Theory of operation (STYLE rule 6): the same byte layouts as ``nodes/lnd/wire.py`` (which owns
the constants and is what the node daemons use), declared as scapy ``fields_desc`` in wire
order with little-endian field types, for dissecting captures, forging and rewriting packets
a fault rule targets, and reports. ``tests/unit/test_lnet_layers.py`` builds a corpus with
``wire.py`` and checks these layers dissect it field for field and rebuild the same bytes.

* :class:`LNetAcceptorConnreq` (16 bytes, lnet-idl.h ``lnet_acceptor_connreq``), then the
  :class:`KsockHello` the connecting side sends right after it.
* :class:`KsockHello` (``ksock_hello_msg_nid4``, 56 bytes + ``nips`` * 4 IPs); ``nips`` is a
  count field filled in ``post_build``.
* :class:`KsockMsg` (``ksock_msg_hdr``, 24 bytes), followed for ``KSOCK_MSG_LNET`` by
  :class:`LNetHdr` (``lnet_hdr_nid4``, 72 bytes: 32 fixed, then the 40-byte union laid out per
  ``type``; unused union bytes are zero) and ``payload_length`` bytes of payload.
  ``payload_length`` left ``None`` is filled in ``post_build``; ``extract_padding`` stops the
  payload there, so what follows (the next ksock_msg of the segment) is padding.
* :class:`KsockMsg` is what TCP port 988 binds to; its ``dispatch_hook`` picks the connreq or
  hello layer from the first four bytes (the stream of a socklnd connection starts with them),
  and its ``tcp_reassemble`` (bgp.py's model) returns a layer once a whole unit has arrived,
  so ``sniff(session=TCPSession)`` and pcaps decode whole LNet messages.

Limits: the hello parsed is V2/V3 in little-endian order (a byte-swapped peer dissects with
swapped numbers); ``tcp_reassemble`` returns the first whole unit of its buffer and scapy then
discards the buffer, so several messages in one reassembly are only seen as padding.
"""

from __future__ import annotations

import struct
from typing import Any

from scapy.fields import (
    ConditionalField,
    FieldLenField,
    FieldListField,
    LEIntEnumField,
    LEIntField,
    LELongField,
    LESignedIntField,
    StrLenField,
    XLEIntField,
    XLELongField,
)
from scapy.layers.inet import TCP
from scapy.packet import Packet, bind_layers

from nodes.lnd.wire import (
    CONNREQ_SIZE,
    HELLO_SIZE,
    KSOCK_MSG_HDR_SIZE,
    KSOCK_MSG_LNET,
    KSOCK_MSG_NOOP,
    KSOCK_PROTO_V3,
    LNET_ACCEPTOR_PORT,
    LNET_PROTO_ACCEPTOR_MAGIC,
    LNET_PROTO_ACCEPTOR_VERSION,
    LNET_PROTO_MAGIC,
)
from nodes.lnet.hdr import LNET_HDR_SIZE, MsgType

MSG_TYPES = {int(t): t.name for t in MsgType}
KSM_TYPES = {KSOCK_MSG_NOOP: "NOOP", KSOCK_MSG_LNET: "LNET"}
_ACK, _PUT, _GET, _REPLY, _HELLO = (int(t) for t in MsgType)
#: bytes of the 40-byte union each message type uses (the rest is zero)
_UNION_USED = {_ACK: 28, _PUT: 40, _GET: 36, _REPLY: 16, _HELLO: 12}
_UNION_SIZE = LNET_HDR_SIZE - 32
_NONE = 0xFFFF_FFFF_FFFF_FFFF


def _is(*types: int) -> Any:
    return lambda pkt: pkt.type in types


class _UnionPad(StrLenField):
    """Zero bytes after the union member of ``type`` (built as zeros when left empty)."""

    def i2m(self, pkt: Any, x: Any) -> bytes:
        if not x:
            return bytes(_UNION_SIZE - _UNION_USED.get(pkt.type, 0))
        return bytes(x)


class LNetAcceptorConnreq(Packet):
    """``struct lnet_acceptor_connreq``: what ``lnet_connect`` sends first."""

    name = "LNet acceptor connreq"
    fields_desc = [  # noqa: RUF012 - scapy reads this class attribute
        XLEIntField("magic", LNET_PROTO_ACCEPTOR_MAGIC),
        LEIntField("version", LNET_PROTO_ACCEPTOR_VERSION),
        XLELongField("nid", 0),
    ]


class KsockHello(Packet):
    """``struct ksock_hello_msg_nid4`` (V2/V3)."""

    name = "ksock hello"
    fields_desc = [  # noqa: RUF012 - scapy reads this class attribute
        XLEIntField("magic", LNET_PROTO_MAGIC),
        LEIntField("version", KSOCK_PROTO_V3),
        XLELongField("src_nid", 0),
        XLELongField("dst_nid", 0),
        LEIntField("src_pid", 0),
        LEIntField("dst_pid", 0),
        LELongField("src_incarnation", 0),
        LELongField("dst_incarnation", 0),
        LESignedIntField("ctype", 0),
        FieldLenField("nips", None, count_of="ips", fmt="<I"),
        FieldListField("ips", [], LEIntField("ip", 0), count_from=lambda pkt: pkt.nips),
    ]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


class KsockMsg(Packet):
    """``struct ksock_msg_hdr`` (V3); an ``LNetHdr`` follows when ``type`` is LNET."""

    name = "ksock msg"
    fields_desc = [  # noqa: RUF012 - scapy reads this class attribute
        LEIntEnumField("type", KSOCK_MSG_LNET, KSM_TYPES),
        XLEIntField("csum", 0),
        LELongField("zc_cookie0", 0),
        LELongField("zc_cookie1", 0),
    ]

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args: Any, **kargs: Any) -> type:
        if _pkt and len(_pkt) >= 4:
            magic = struct.unpack_from("<I", _pkt)[0]
            if magic == LNET_PROTO_ACCEPTOR_MAGIC:
                return LNetAcceptorConnreq
            if magic == LNET_PROTO_MAGIC:
                return KsockHello
        return cls

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        if self.type == KSOCK_MSG_NOOP:
            return b"", s
        return s, b""

    @classmethod
    def tcp_reassemble(cls, data: bytes, metadata: dict[str, Any], session: Any = None
                       ) -> Packet | None:
        """A whole connreq(+hello), hello or ksock_msg from the stream bytes, else None."""
        need = unit_length(data)
        if need is None or len(data) < need:
            return None
        return cls(data)


class LNetHdr(Packet):
    """``struct _lnet_hdr_nid4``: 32 fixed bytes, then the union per ``type``."""

    name = "LNet hdr"
    fields_desc = [  # noqa: RUF012 - scapy reads this class attribute
        XLELongField("dest_nid", 0),
        XLELongField("src_nid", 0),
        LEIntField("dest_pid", 12345),
        LEIntField("src_pid", 12345),
        LEIntEnumField("type", _PUT, MSG_TYPES),
        LEIntField("payload_length", None),
        ConditionalField(XLELongField("wmd_interface", _NONE), _is(_ACK, _PUT, _GET, _REPLY)),
        ConditionalField(XLELongField("wmd_object", _NONE), _is(_ACK, _PUT, _GET, _REPLY)),
        ConditionalField(XLELongField("match_bits", 0), _is(_ACK, _PUT, _GET)),
        ConditionalField(LEIntField("mlength", 0), _is(_ACK)),
        ConditionalField(XLELongField("hdr_data", 0), _is(_PUT)),
        ConditionalField(LEIntField("ptl_index", 0), _is(_PUT, _GET)),
        ConditionalField(LEIntField("offset", 0), _is(_PUT, _GET)),
        ConditionalField(LEIntField("sink_length", 0), _is(_GET)),
        ConditionalField(LELongField("incarnation", 0), _is(_HELLO)),
        ConditionalField(LEIntField("hello_type", 0), _is(_HELLO)),
        _UnionPad("pad", b"",
                  length_from=lambda pkt: _UNION_SIZE - _UNION_USED.get(pkt.type, 0)),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.payload_length is None:
            pkt = pkt[:28] + struct.pack("<I", len(pay)) + pkt[32:]
        return pkt + pay

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        n = self.payload_length or 0
        return s[:n], s[n:]


def unit_length(data: bytes) -> int | None:
    """Bytes of the first whole stream unit in ``data`` (None: not enough to tell yet)."""
    if len(data) < 4:
        return None
    magic = struct.unpack_from("<I", data)[0]
    if magic == LNET_PROTO_ACCEPTOR_MAGIC:
        return CONNREQ_SIZE
    if magic == LNET_PROTO_MAGIC:
        if len(data) < HELLO_SIZE:
            return None
        return HELLO_SIZE + 4 * struct.unpack_from("<I", data, HELLO_SIZE - 4)[0]
    if magic == KSOCK_MSG_NOOP:
        return KSOCK_MSG_HDR_SIZE
    if len(data) < KSOCK_MSG_HDR_SIZE + 32:
        return None
    plen = struct.unpack_from("<I", data, KSOCK_MSG_HDR_SIZE + 28)[0]
    return KSOCK_MSG_HDR_SIZE + LNET_HDR_SIZE + plen


bind_layers(LNetAcceptorConnreq, KsockHello)
bind_layers(KsockMsg, LNetHdr, type=KSOCK_MSG_LNET)
bind_layers(TCP, KsockMsg, dport=LNET_ACCEPTOR_PORT)
bind_layers(TCP, KsockMsg, sport=LNET_ACCEPTOR_PORT)

__all__ = ["KsockHello", "KsockMsg", "LNetAcceptorConnreq", "LNetHdr",
           "unit_length"]
