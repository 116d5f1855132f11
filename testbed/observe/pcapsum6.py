"""Stream units of socklnd V4 (IPv6, large NIDs) for ``testbed capture --summary``.

Theory of operation (issue 26 item 8): an IPv6 connection speaks KSOCK_PROTO_V4
(``ksocknal_create_conn``: V4 on AF_INET6), whose units the V3 scapy layers cannot dissect.
:func:`units16` cuts a V4 stream with ``faults.flowtrack.parse_unit`` (connreq v2, the 80-byte
hello, ksock_msg + ``lnet_hdr_nid16``) and decodes each with the daemons' own codec
(``nodes/lnd/wire6.py``: ``unpack_connreq``, ``unpack_hello``, ``unpack_hdr``), yielding
values with the attribute names the V3 path reads from scapy (``src_nid``, ``dest_nid``,
``type``, ``payload_length``, ``ptl_index``, ``wmd_interface``, ``wmd_object``,
``match_bits``), NIDs as their text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from faults.flowtrack import parse_unit
from nodes.lnd import wire, wire6
from nodes.lnd.wire import KSOCK_MSG_HDR_SIZE, LNET_PROTO_ACCEPTOR_MAGIC, LNET_PROTO_MAGIC


@dataclass(frozen=True, slots=True)
class Hdr16:
    """An ``lnet_hdr_nid16`` as the summary reads it."""

    type: int
    src_nid: str
    dest_nid: str
    payload_length: int
    ptl_index: int
    wmd_interface: int
    wmd_object: int
    match_bits: int


@dataclass(frozen=True, slots=True)
class Unit16:
    """One V4 unit: ``kind`` connreq (``nid``), hello (``hello``), noop or lnet (``hdr``)."""

    kind: str
    nid: str = ""
    hello: wire.KsockHello | None = None
    hdr: Hdr16 | None = None


def units16(data: bytes, pos: int = 0) -> Iterator[tuple[int, int, Unit16]]:
    """(offset, length, unit) of each whole unit from ``pos``; stops at the first unit the
    stream ends inside of. Raises ``WireProtocolError``/``ValueError`` on bytes that are no
    V4 unit."""
    while pos < len(data):
        length, _msg = parse_unit(data, pos, wide=True)
        if length == -1 or pos + length > len(data):
            return
        if length < 0:
            raise ValueError(f"no socklnd V4 unit at offset {pos}")
        unit = data[pos:pos + length]
        first = int.from_bytes(unit[:4], "little")
        if first == LNET_PROTO_ACCEPTOR_MAGIC:
            yield pos, length, Unit16("connreq", nid=str(wire6.unpack_connreq(unit, False)))
        elif first == LNET_PROTO_MAGIC:
            yield pos, length, Unit16("hello", hello=wire6.unpack_hello(unit, False))
        elif length == KSOCK_MSG_HDR_SIZE:
            yield pos, length, Unit16("noop")
        else:
            h = wire6.unpack_hdr(unit[KSOCK_MSG_HDR_SIZE:wire6.LNET_FRAME_HEAD16])
            yield pos, length, Unit16("lnet", hdr=Hdr16(
                int(h.type), str(h.src_nid), str(h.dest_nid), h.payload_length, h.ptl_index,
                h.wmd.interface_cookie, h.wmd.object_cookie, h.match_bits))
        pos += length
