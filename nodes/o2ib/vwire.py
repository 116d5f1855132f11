"""The emulated fabric's packet codec: what one emulated HCA port sends to another.

Theory of operation: real IB carries CM MADs and RC transport packets (SEND, RDMA WRITE,
RDMA READ request/response, ACK, NAK with a syndrome). The emulation carries the same
operations as length-prefixed packets over any reliable byte stream (a socket between
``ib*`` addresses, or the simulator's fabric). This module owns that layout only:
``u32 length`` (of what follows) ``u8 kind`` then the kind's fields, little-endian.

Decoding is incremental and bounded: ``PacketReader`` keeps at most one packet in progress,
never more than ``MAX_PACKET`` bytes; a bad length or kind or a short body raises one
``WireProtocolError`` line (hstatus REMOTE_ERROR), and the reader stays failed. It is fed
either bytes (``feed``, the simulator) or, on a daemon, straight from the socket
(``get_buffer``/``buffer_updated``, asyncio's ``BufferedProtocol`` contract): headers and
small packets land in one staging buffer, a body above ``DIRECT_MIN`` (an RDMA's data) in a
buffer of its own lent by the node's ``BufferPool`` and handed on as a read-only view, so a
1 MiB RDMA WRITE is received without a copy and without a fresh allocation (benchmarks/o2ib.py:
py-spy found the receiver's time in the reader's copies and 1 MiB allocations).
Encoding, ``pack_parts``, gives a packet's head and, for a large body, the body apart, so the
sender writes it from the LNet payload without joining it to the head.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from nodes.lnd.bufpool import BufferPool
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_MTU
from nodes.lnet.hstatus import HStatus

#: The largest packet: an RDMA of one whole LNet MTU plus its fields.
MAX_PACKET: Final = LNET_MTU + 64
#: a body longer than this is received into a pooled buffer of its own (no staging copy) and
#: sent apart from its head (``pack_parts``)
DIRECT_MIN: Final = 1 << 14
#: the reader's staging buffer: headers and packets up to DIRECT_MIN
STAGE: Final = 1 << 16
_LEN = struct.Struct("<I")
_FIELDS_MAX: Final = 20  # the longest fixed fields of any kind (READ_REQ)


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

_KIND_OF: Final[dict[int, Kind]] = {int(k): k for k in Kind}
#: each kind's fixed-field bytes after the kind byte (testbed/observe/o2ibcap.py's dissector)
FIELD_SIZES: Final[dict[Kind, int]] = {k: s.size for k, s in _FIXED.items()}


# init written out: mypyc compiles it (a dataclass's generated __init__ runs interpreted)
@dataclass(init=False, slots=True, unsafe_hash=True)
class Packet:
    """One packet; ``placed``: its data was received straight into the memory its
    ``placer`` named (an RDMA WRITE's target region, as an HCA's DMA)."""

    kind: Kind
    fields: tuple[int, ...] = ()
    data: bytes | memoryview = b""
    placed: bool = False

    def __init__(self, kind: Kind, fields: tuple[int, ...] = (),
                 data: bytes | memoryview = b"", placed: bool = False) -> None:
        self.kind, self.fields, self.data, self.placed = kind, fields, data, placed


#: where a large body goes, given its kind, fields and length (None: a buffer of the pool)
Placer = Callable[[Kind, tuple[int, ...], int], "memoryview | None"]


def _bad(descr: str) -> WireProtocolError:
    return WireProtocolError(f"emulated IB: {descr}", int(HStatus.REMOTE_ERROR))


def pack(p: Packet) -> bytes:
    """One packet on the byte stream."""
    return bytes(pack_parts(p, split=MAX_PACKET)[0])


def pack_parts(p: Packet, split: int = DIRECT_MIN) -> tuple[bytes, bytes | memoryview]:
    """One packet as (head, tail): the whole packet and ``b""`` when its data is at most
    ``split`` bytes, else the length, kind and fields, and the data itself (not copied)."""
    fx = _FIXED.get(p.kind)
    fields = fx.pack(*p.fields) if fx else b""
    n = 1 + len(fields) + len(p.data)
    if n > MAX_PACKET:
        raise ValueError(f"{p.kind.name} packet of {n} bytes > {MAX_PACKET}")
    head = _LEN.pack(n) + bytes((p.kind,)) + fields
    if len(p.data) > split:
        return head, p.data
    return head + p.data, b""


def unpack(body: bytes | memoryview) -> Packet:
    """One packet body (kind byte onwards); a memoryview's data stays a view of it."""
    kind, fields, off = unpack_head(body, 0, len(body))
    return Packet(kind, fields, body[off:])


def unpack_head(buf: bytes | bytearray | memoryview, at: int,
                size: int) -> tuple[Kind, tuple[int, ...], int]:
    """The kind and fields of the packet body of ``size`` bytes at ``buf[at:]`` (at least
    its kind and fields are there) and where its data starts, relative to ``at``."""
    if size <= 0:
        raise _bad("empty packet")
    kind = _KIND_OF.get(buf[at])
    if kind is None:
        raise _bad(f"unknown packet kind {buf[at]}")
    fx = _FIXED.get(kind)
    if fx is None:
        return kind, (), 1
    if size < 1 + fx.size:
        raise _bad(f"short {kind.name}: {size} < {1 + fx.size} bytes")
    fields: tuple[int, ...] = fx.unpack_from(buf, at + 1)
    if kind is Kind.NAK and fields[1] not in Syndrome._value2member_map_:
        raise _bad(f"unknown NAK syndrome {fields[1]}")
    return kind, fields, 1 + fx.size


class PacketReader:
    """Bytes in, packets out; at most one packet buffered. ``pool``: where bodies above
    ``DIRECT_MIN`` are received (a fresh buffer each without one), unless ``placer`` names
    the memory they are for (the QP's: an RDMA WRITE's registered target)."""

    def __init__(self, pool: BufferPool | None = None, placer: Placer | None = None) -> None:
        self._stage = bytearray(STAGE)
        self._view = memoryview(self._stage)
        self._start = self._end = 0  # the staged bytes not yet parsed
        self._body: memoryview | None = None  # a large packet's data being received
        self._got = 0  # ... bytes of it so far
        self._head: tuple[Kind, tuple[int, ...]] = (Kind.SEND, ())  # ... its kind, fields
        self._pool = pool
        self._placer, self._placed = placer, False
        self.error: WireProtocolError | None = None

    def get_buffer(self) -> memoryview:
        """Where the next bytes from the stream go (``BufferedProtocol.get_buffer``)."""
        if self._body is not None:
            return self._body[self._got:]
        if self._start and STAGE - self._end < DIRECT_MIN + 8:
            n = self._end - self._start
            self._view[:n] = self._view[self._start:self._end]
            self._start, self._end = 0, n
        return self._view[self._end:]

    def buffer_updated(self, n: int) -> list[Packet]:
        """``n`` bytes were written into the last ``get_buffer()``: the packets completed.
        A protocol error is raised if no packet came before it, else kept (``error``) and
        raised on the next call."""
        if self.error is not None:
            raise self.error
        out: list[Packet] = []
        try:
            self._take(n, out)
        except WireProtocolError as e:
            self.error = e
            self._body, self._start, self._end = None, 0, 0
            if not out:
                raise
        return out

    def feed(self, data: bytes | bytearray | memoryview) -> list[Packet]:
        """Bytes from the stream, copied in as the socket would have written them."""
        if self.error is not None:
            raise self.error
        src = memoryview(data)
        out: list[Packet] = []
        i = 0
        while i < len(src) and self.error is None:
            buf = self.get_buffer()
            k = min(len(buf), len(src) - i)
            buf[:k] = src[i:i + k]
            i += k
            try:
                out += self.buffer_updated(k)
            except WireProtocolError:
                if not out:
                    raise
        return out

    def _take(self, n: int, out: list[Packet]) -> None:
        body = self._body
        if body is not None:
            self._got += n
            if self._got < len(body):
                return
            self._body = None
            out.append(Packet(self._head[0], self._head[1], body.toreadonly(), self._placed))
            return
        self._end += n
        view, end = self._view, self._end
        start = self._start
        while end - start >= 4:
            (size,) = _LEN.unpack_from(view, start)
            if size == 0 or size > MAX_PACKET:
                raise _bad(f"packet length {size} not in 1..{MAX_PACKET}")
            if end - start >= 4 + size:
                out.append(unpack(bytes(view[start + 4:start + 4 + size])))
                start += 4 + size
                continue
            if size > DIRECT_MIN and end - start >= 4 + 1 + _FIELDS_MAX:
                # its kind and fields known, the rest of its data straight into a buffer of
                # its own (at most LNET_MTU for an RDMA: a pooled one)
                kind, fields, off = unpack_head(view, start + 4, size)
                n = size - off
                target = self._placer(kind, fields, n) if self._placer is not None else None
                self._placed = target is not None
                body = (target if target is not None else self._pool.get(n)
                        if self._pool is not None else memoryview(bytearray(n)))
                have = end - start - 4 - off
                body[:have] = view[start + 4 + off:end]
                self._body, self._got, self._head = body, have, (kind, fields)
                start = end
            break
        if start == end:
            start = end = 0
        self._start, self._end = start, end
