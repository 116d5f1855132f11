"""The emulated fabric's packet codec: what one emulated HCA port sends to another.

Theory of operation: real IB carries CM MADs and RC transport packets (SEND, RDMA WRITE,
RDMA READ request/response, ACK, NAK with a syndrome). The emulation carries the same
operations as length-prefixed packets over any reliable byte stream (a socket between
``ib*`` addresses, or the simulator's fabric). This module owns that layout only:
``u32 length`` (of what follows) ``u8 kind`` then the kind's fields, little-endian.

Decoding is incremental and bounded: ``PacketReader.feed`` keeps at most one packet in
progress, never more than ``MAX_PACKET`` bytes; a bad length or kind or a short body raises
one ``WireProtocolError`` line (hstatus REMOTE_ERROR), and the reader stays failed.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_MTU
from nodes.lnet.hstatus import HStatus

#: The largest packet: an RDMA of one whole LNet MTU plus its fields.
MAX_PACKET: Final = LNET_MTU + 64
_LEN = struct.Struct("<I")


class Kind(enum.IntEnum):
    CM_REQ = 1  # private data: CONNREQ
    CM_REP = 2  # private data: CONNACK
    CM_RTU = 3
    CM_REJ = 4  # private data: kib_rej
    CM_DREQ = 5
    CM_DREP = 6
    SEND = 10  # seq, payload
    WRITE = 11  # seq, rkey, addr, data
    READ_REQ = 12  # seq, rkey, addr, length
    READ_RESP = 13  # seq, data
    ACK = 14  # seq
    NAK = 15  # seq, syndrome


class Syndrome(enum.IntEnum):
    """NAK reasons the responder returns (IBA 9.7.5.2.8 AETH NAK codes, by meaning)."""

    RNR = 1
    REM_INV_REQ = 2
    REM_ACCESS = 3
    REM_OP = 4


#: fixed fields after the kind byte; the rest of the packet is ``data``
_FIXED: Final[dict[Kind, struct.Struct]] = {
    Kind.SEND: struct.Struct("<I"), Kind.WRITE: struct.Struct("<IIQ"),
    Kind.READ_REQ: struct.Struct("<IIQI"), Kind.READ_RESP: struct.Struct("<I"),
    Kind.ACK: struct.Struct("<I"), Kind.NAK: struct.Struct("<IB"),
}


@dataclass(frozen=True, slots=True)
class Packet:
    kind: Kind
    fields: tuple[int, ...] = ()
    data: bytes = b""


def _bad(descr: str) -> WireProtocolError:
    return WireProtocolError(f"emulated IB: {descr}", int(HStatus.REMOTE_ERROR))


def pack(p: Packet) -> bytes:
    """One packet on the byte stream."""
    fx = _FIXED.get(p.kind)
    body = bytes([p.kind]) + (fx.pack(*p.fields) if fx else b"") + p.data
    if len(body) > MAX_PACKET:
        raise ValueError(f"{p.kind.name} packet of {len(body)} bytes > {MAX_PACKET}")
    return _LEN.pack(len(body)) + body


def unpack(body: bytes) -> Packet:
    """One packet body (kind byte onwards)."""
    if not body:
        raise _bad("empty packet")
    if body[0] not in Kind._value2member_map_:
        raise _bad(f"unknown packet kind {body[0]}")
    kind = Kind(body[0])
    fx = _FIXED.get(kind)
    if fx is None:
        return Packet(kind, (), body[1:])
    if len(body) < 1 + fx.size:
        raise _bad(f"short {kind.name}: {len(body)} < {1 + fx.size} bytes")
    fields = tuple(int(v) for v in fx.unpack_from(body, 1))
    if kind is Kind.NAK and fields[1] not in Syndrome._value2member_map_:
        raise _bad(f"unknown NAK syndrome {fields[1]}")
    return Packet(kind, fields, body[1 + fx.size:])


class PacketReader:
    """Bytes in, packets out; at most one packet buffered."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.error: WireProtocolError | None = None

    def feed(self, data: bytes) -> list[Packet]:
        if self.error is not None:
            raise self.error
        self._buf += data
        out: list[Packet] = []
        try:
            while len(self._buf) >= 4:
                (n,) = _LEN.unpack_from(self._buf, 0)
                if n == 0 or n > MAX_PACKET:
                    raise _bad(f"packet length {n} not in 1..{MAX_PACKET}")
                if len(self._buf) < 4 + n:
                    break
                body = bytes(self._buf[4:4 + n])
                del self._buf[:4 + n]
                out.append(unpack(body))
        except WireProtocolError as e:
            self.error = e
            self._buf.clear()
            if not out:
                raise
        return out
