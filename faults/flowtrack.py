"""Follow each TCP connection's socklnd byte stream, so every LNet message is classified.

Theory of operation (issue 32 item 2; sans-I/O: segments in, messages out, no clock). TCP
keeps no message boundaries: one segment may carry many ksock_msgs (a GSO segment of 64 KiB
carries fifteen 4 KiB PUTs) and one PUT spans several segments, so the first-bytes peek of
``prefilter.classify`` sees ~2 % of the messages of a PUT stream. :class:`FlowTracker` keeps,
per flow (one direction of one connection, by addresses and ports), where the next stream unit
starts (``_Flow.end``, an absolute sequence number) and walks each segment from one unit to
the next as the socklnd receiver's framing does (``nodes/lnd/framing.py``): the acceptor
connreq (16 bytes), the ksock hello (56 + 4 * ``nips``), a NOOP ksock_msg (24), an LNET
ksock_msg (24 + 72 + ``payload_length``). :meth:`FlowTracker.feed` returns the messages a
segment carries bytes of, so a rule selects every segment of a matching message;
:meth:`FlowTracker.step` is the hot path alone (a segment that only continues the current
message's payload: the flow, whose ``note`` the caller may use to memoise its verdict).

* **Bounded memory.** Per flow: the next boundary, at most :data:`HEAD_MAX` bytes of a header split
  across segments (V4: 120), and the last :data:`HISTORY` units (start, end, message) for
  retransmissions; never payload. At most :data:`MAX_FLOWS` flows, the least recently seen
  evicted first (counted; an evicted flow resynchronises when seen again; a flow seen only
  in the middle of a payload keeps its place, so that path costs no reordering). A FIN or RST ends
  the flow's state. :meth:`FlowTracker.flow_bytes` measures it.
* **Retransmissions** (a segment below the next expected byte) are judged by the history of
  the units they overlap; older than the history, by a scan (below), counted ``rescanned``.
* **Gaps** (bytes never seen: a flow first seen mid-connection, a segment the queue never
  saw) keep the flow in step while they lie inside a unit whose header was read; a gap over a
  boundary loses step (``gaps``). Out of step, a segment is scanned for a plausible header:
  the ksock_msg type ``0xc1`` (or the acceptor/hello magic) at any offset, an lnet_hdr whose
  type is one of LNet's five, ``payload_length`` at most ``LNET_MTU``, both pids
  ``LNET_PID_LUSTRE`` (or user pids), and, when the unit ends inside the segment, a valid unit
  right after it. The first such offset puts the flow back in step (``resyncs``). The last
  :data:`HEAD_MAX` - 1 bytes (V4: 119) of an out-of-step segment are kept, so a header split
  across two segments is still found. Payload that imitates a header can mislead the scan
  (documented in faults/README.md); a stream of garbage never resynchronises and costs
  nothing but the scan.
* **socklnd V4** (IPv6 connections, ``feed(wide=True)``): connreq v2, the 80-byte hello and
  ``lnet_hdr_nid16`` units are read by ``faults/unit6.py``, NIDs as its ``nid_key``.
* **A header split across segments** is classified when its last byte arrives: the segment
  that completes it is selected, the one with its first bytes is judged without it.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections import OrderedDict
from dataclasses import dataclass

from faults.unit6 import HEAD16, PORTAL_OFF16, connreq16, hello16, lnet_fixed16
from nodes.lnd.wire import (
    CONNREQ_SIZE,
    HELLO_SIZE,
    KSOCK_MSG_HDR_SIZE,
    KSOCK_MSG_LNET,
    KSOCK_MSG_NOOP,
    LNET_INTERFACES_NUM,
    LNET_PROTO_ACCEPTOR_MAGIC,
    LNET_PROTO_MAGIC,
)
from nodes.lnet.hdr import LNET_HDR_SIZE, LNET_MTU, LNET_PID_LUSTRE, LNET_PID_USERFLAG, MsgType

#: Bytes of an LNET unit read before it is classified (ksock_msg_hdr + lnet_hdr_nid4).
HEAD_MAX = KSOCK_MSG_HDR_SIZE + LNET_HDR_SIZE
#: Bytes of a header kept across segments: V3's or V4's (lnet_hdr_nid16), the larger.
KEEP_MAX = max(HEAD_MAX, HEAD16)
#: Units remembered per flow for retransmitted segments.
HISTORY = 16
#: Flows followed at once; the least recently seen is forgotten beyond.
MAX_FLOWS = 16384
#: Distinct message classifications kept shared (interned) before the table is reset.
_INTERN_MAX = 4096

_MOD = 1 << 32
_HALF = 1 << 31
_U32 = struct.Struct("<I")
_FIXED = struct.Struct("<QQIIII")  # dest_nid, src_nid, dest_pid, src_pid, type, payload_length
_CONNREQ_NID = struct.Struct("<Q")
_HELLO_NIDS = struct.Struct("<QQ")
_TYPES = {int(t): t.name for t in MsgType}
#: ptl_index offset in lnet_hdr_nid4 of a PUT / GET: after ack_wmd, match_bits, hdr_data (PUT)
#: or return_wmd, match_bits (GET), in the union that starts at byte 32
PORTAL_OFF = {int(MsgType.PUT): 32 + 32, int(MsgType.GET): 32 + 24}
_PATTERNS = (_U32.pack(KSOCK_MSG_LNET), _U32.pack(LNET_PROTO_ACCEPTOR_MAGIC),
             _U32.pack(LNET_PROTO_MAGIC))
#: an OrderedDict entry: hash table slot and linked-list node (CPython 3.11, measured)
_ENTRY = 100
_NEED = -1  # parse: more bytes needed
_BAD = -2  # parse: not a unit


@dataclass(frozen=True, slots=True)
class LNetMsg:
    """What a rule can match of one stream unit: LNet type (``HELLO`` for the acceptor connreq
    and the ksock hello too), NIDs as ``unit6.nid_key`` (a small NID's nid4), portal of a
    PUT/GET."""

    type: str
    src_nid: int | None = None
    dst_nid: int | None = None
    portal: int | None = None


def _pid_ok(pid: int) -> bool:
    return pid == LNET_PID_LUSTRE or bool(pid & LNET_PID_USERFLAG)


def parse_unit(b: bytes | memoryview, off: int, strict: bool = False, wide: bool = False
               ) -> tuple[int, LNetMsg | None]:
    """(length, message) of the unit at ``b[off:]``; length ``_NEED`` or ``_BAD``.

    The one framing of both socklnd protocols: the first word names the unit, ``wide`` (a
    socklnd V4 stream: an IPv6 connection, 16-byte NIDs) says whose layout it has (V4's are
    read by ``faults.unit6``). A NOOP ksock_msg is a unit without a message. ``strict``
    (scanning out of step) also wants LNet's pids and a connreq of a known version."""
    avail = len(b) - off
    if avail < 4:
        return _NEED, None
    first = _U32.unpack_from(b, off)[0]
    if first == KSOCK_MSG_LNET:
        head = HEAD16 if wide else HEAD_MAX
        if avail < head:
            return _NEED, None
        h = off + KSOCK_MSG_HDR_SIZE
        dest, src, dpid, spid, mtype, plen = lnet_fixed16(b, h) if wide \
            else _FIXED.unpack_from(b, h)
        name = _TYPES.get(mtype)
        if name is None or dest is None or src is None or plen > LNET_MTU \
                or (strict and not (_pid_ok(dpid) and _pid_ok(spid))):
            return _BAD, None
        poff = (PORTAL_OFF16 if wide else PORTAL_OFF).get(mtype)
        portal = None if poff is None else _U32.unpack_from(b, h + poff)[0]
        return head + plen, LNetMsg(name, src, dest, portal)
    if first == KSOCK_MSG_NOOP and not strict:
        return (KSOCK_MSG_HDR_SIZE, None) if avail >= KSOCK_MSG_HDR_SIZE else (_NEED, None)
    if first == LNET_PROTO_ACCEPTOR_MAGIC:
        length, nid = connreq16(b, off, avail) if wide else _connreq(b, off, avail, strict)
        return (length, LNetMsg("HELLO", None, nid)) if length > 0 else (length, None)
    if first == LNET_PROTO_MAGIC:
        length, src, dest = hello16(b, off, avail) if wide else _hello(b, off, avail)
        return (length, LNetMsg("HELLO", src, dest)) if length > 0 else (length, None)
    return _BAD, None


def _connreq(b: bytes | memoryview, off: int, avail: int, strict: bool
             ) -> tuple[int, int | None]:
    """V3's acceptor connreq (16 bytes, a nid4): (length, NID)."""
    if avail < CONNREQ_SIZE:
        return _NEED, None
    if strict and _U32.unpack_from(b, off + 4)[0] != 1:
        return _BAD, None
    return CONNREQ_SIZE, _CONNREQ_NID.unpack_from(b, off + 8)[0]


def _hello(b: bytes | memoryview, off: int, avail: int) -> tuple[int, int | None, int | None]:
    """V3's ksock hello (56 + 4 * ``nips`` bytes): (length, src, dest)."""
    if avail < HELLO_SIZE:
        return _NEED, None, None
    nips = _U32.unpack_from(b, off + HELLO_SIZE - 4)[0]
    if nips > LNET_INTERFACES_NUM:
        return _BAD, None, None
    src, dest = _HELLO_NIDS.unpack_from(b, off + 8)
    return HELLO_SIZE + 4 * nips, src, dest


class _Flow:
    """One direction of one connection: where its next unit starts, and a short history."""

    __slots__ = ("cur", "end", "head", "hist", "hmsg", "note", "nxt", "tail", "wide")

    def __init__(self, wide: bool = False) -> None:
        self.wide = wide  # a socklnd V4 stream (IPv6): lnet_hdr_nid16
        self.nxt = -1  # absolute seq of the next byte expected; -1: out of step
        self.end = 0  # absolute seq where the next unit starts (>= nxt while in step)
        self.cur: LNetMsg | None = None  # the unit ending at ``end``
        self.note: object = None  # the caller's memo about ``cur`` (reset when it changes)
        self.head = b""  # first bytes of a header that continues in the next segment
        self.tail = b""  # out of step: the last bytes of the previous segment (at nxt - len)
        self.hist = array("q")  # start, end pairs of the last units
        self.hmsg: list[LNetMsg | None] = []


class FlowTracker:
    """Every flow's position in its stream; ``feed`` one TCP segment at a time."""

    def __init__(self, max_flows: int = MAX_FLOWS) -> None:
        self.max_flows = max_flows
        self.flows: OrderedDict[bytes, _Flow] = OrderedDict()
        self._intern: dict[LNetMsg, LNetMsg] = {}
        self.counters = {"units": 0, "messages": 0, "resyncs": 0, "gaps": 0, "rescanned": 0,
                         "evicted": 0, "unsynced_bytes": 0}

    # -- the one entry point --------------------------------------------------------------

    def step(self, key: bytes, seq: int, flags: int, n: int) -> _Flow | None:
        """The fast path alone: if segment ``seq`` of ``n`` > 0 bytes only continues the
        payload of its flow's current unit, advance and return the flow (its ``cur`` is the
        one message carried, ``note`` the caller's memo about it); else None (``feed``)."""
        flow = self.flows.get(key)
        if flow is None or flags & 0x07 or flow.nxt != seq or flow.head \
                or flow.end < seq + n or n <= 0:
            return None
        flow.nxt = seq + n
        return flow

    def feed(self, key: bytes, seq: int, flags: int, data: bytes | memoryview,
             off: int = 0, wide: bool = False) -> list[LNetMsg]:
        """The messages segment ``seq`` of flow ``key`` (its addresses and ports, as bytes)
        carries bytes of; its payload is ``data[off:]`` (TCP ``flags``: SYN 0x02 starts the
        stream, FIN 0x01 / RST 0x04 end it; ``wide``: the flow is IPv6, socklnd V4)."""
        flow = self.flows.get(key)
        n = len(data) - off
        if flow is not None and not flags & 0x07 and flow.nxt == seq and not flow.head \
                and flow.end >= seq + n:
            # the common case: the next bytes of a payload whose header was read (the flow
            # keeps its place in the eviction order: refreshed on the other paths)
            flow.nxt = seq + n
            cur = flow.cur
            return [cur] if cur is not None and n > 0 else []
        if flow is None or flags & 0x02:
            flow = self._new(key, wide)
            if flags & 0x02:
                flow.nxt = flow.end = seq + 1
        else:
            self.flows.move_to_end(key)
        out: list[LNetMsg] = []
        if n > 0:
            out = self._segment(flow, seq, memoryview(data)[off:] if off else data)
        if flags & 0x05:
            del self.flows[key]
        return out

    def flow_bytes(self) -> int:
        """Bytes held for the flows now (``sys.getsizeof`` of each flow's key, state and
        buffers, plus a dict entry); messages are shared, see ``_intern``."""
        total = 0
        for key, f in self.flows.items():
            total += (_ENTRY + sys.getsizeof(key) + sys.getsizeof(f) + sys.getsizeof(f.head)
                      + sys.getsizeof(f.tail) + sys.getsizeof(f.hist) + sys.getsizeof(f.hmsg))
        return total

    def _new(self, key: bytes, wide: bool = False) -> _Flow:
        flow = _Flow(wide)
        self.flows[key] = flow
        self.flows.move_to_end(key)
        while len(self.flows) > self.max_flows:
            self.flows.popitem(last=False)
            self.counters["evicted"] += 1
        return flow

    def _segment(self, flow: _Flow, seq: int, data: bytes | memoryview) -> list[LNetMsg]:
        if flow.nxt < 0:
            return self._scan(flow, seq, data)
        # unwrap the 32-bit sequence number around the one expected
        start = flow.nxt + ((seq - flow.nxt + _HALF) % _MOD) - _HALF
        stop = start + len(data)
        out: list[LNetMsg] = []
        if start < flow.nxt:  # (partly) retransmitted
            out = self._past(flow, start, min(stop, flow.nxt), data)
            if stop <= flow.nxt:
                return out
            data = memoryview(data)[flow.nxt - start:]
            start = flow.nxt
        if start > flow.nxt:  # bytes never seen
            if flow.head or start > flow.end:
                self.counters["gaps"] += 1
                flow.nxt, flow.head, flow.tail = -1, b"", b""
                return out + self._scan(flow, start, data)
            flow.nxt = start
        return out + self._walk(flow, start, data)

    # -- in step --------------------------------------------------------------------------

    def _walk(self, flow: _Flow, start: int, data: bytes | memoryview) -> list[LNetMsg]:
        out: list[LNetMsg] = []
        n = len(data)
        flow.nxt = start + n
        if flow.end > start:  # the segment begins inside the current unit
            if flow.cur is not None:
                out.append(flow.cur)
            if flow.end >= start + n:
                return out
        pos = flow.end - start  # may be negative: the header began in an earlier segment
        while pos < n:
            if flow.head:
                buf: bytes | memoryview = flow.head + bytes(data[:KEEP_MAX])
                base = -len(flow.head)
            else:
                buf, base = data, 0
            length, msg = parse_unit(buf, pos - base, wide=flow.wide)
            if length == _NEED:  # every unit is known from its first KEEP_MAX bytes
                flow.head = bytes(buf[pos - base:])
                return out
            flow.head = b""
            if length == _BAD:
                self.counters["gaps"] += 1
                flow.nxt, flow.tail = -1, b""
                pos = max(pos, 0)
                return out + self._scan(flow, start + pos, memoryview(data)[pos:])
            msg = self._record(flow, flow.end, length, msg)
            if msg is not None:
                out.append(msg)
            pos = flow.end - start
        return out

    def _record(self, flow: _Flow, at: int, length: int, msg: LNetMsg | None
                ) -> LNetMsg | None:
        if msg is not None:
            msg = self._intern.setdefault(msg, msg)
            if len(self._intern) > _INTERN_MAX:
                self._intern.clear()
            self.counters["messages"] += 1
        self.counters["units"] += 1
        flow.cur, flow.end, flow.note = msg, at + length, None
        hist = flow.hist
        hist.append(at)
        hist.append(at + length)
        flow.hmsg.append(msg)
        if len(flow.hmsg) > 2 * HISTORY:
            del hist[:2 * HISTORY]
            del flow.hmsg[:HISTORY]
        return msg

    def _past(self, flow: _Flow, lo: int, hi: int, data: bytes | memoryview) -> list[LNetMsg]:
        """Messages of the already-seen range [lo, hi): by history, else by a scan."""
        hist, hmsg = flow.hist, flow.hmsg
        if hmsg and hist[0] <= lo:
            out = []
            for i in range(len(hmsg) - 1, -1, -1):
                if hist[2 * i + 1] <= lo:
                    break
                m = hmsg[i]
                if hist[2 * i] < hi and m is not None:
                    out.append(m)
            out.reverse()
            return out
        self.counters["rescanned"] += 1
        return [m for _off, _n, m in scan(memoryview(data)[:hi - lo], wide=flow.wide)
                if m is not None]

    # -- out of step ----------------------------------------------------------------------

    def _scan(self, flow: _Flow, start: int, data: bytes | memoryview) -> list[LNetMsg]:
        tail = flow.tail if flow.tail and flow.nxt == -1 - start else b""
        buf = tail + bytes(data) if tail else data
        base = start - len(tail)
        found = next(iter(scan(buf, limit=1, wide=flow.wide)), None)
        if found is None:
            self.counters["unsynced_bytes"] += len(data)
            keep = bytes(buf[-(KEEP_MAX - 1):])
            flow.tail, flow.nxt = keep, -1 - (start + len(data))
            return []
        self.counters["resyncs"] += 1
        off = found[0]
        flow.tail, flow.head, flow.cur, flow.note = b"", b"", None, None
        flow.end = base + off
        self.counters["unsynced_bytes"] += max(0, off - len(tail))
        return self._walk(flow, base + off, memoryview(buf)[off:])


def scan(b: bytes | memoryview, limit: int = 1 << 30, wide: bool = False
         ) -> list[tuple[int, int, LNetMsg | None]]:
    """(offset, length, message) of plausible units in ``b``, out of step: the first offset
    where a strict unit is followed by a valid unit (or by the end of ``b``), then the
    units chained after it; at most ``limit`` resynchronisation points."""
    out: list[tuple[int, int, LNetMsg | None]] = []
    pos = 0
    n = len(b)
    raw = bytes(b) if isinstance(b, memoryview) else b
    while pos < n and len(out) < limit:
        cands = [i for i in (raw.find(p, pos) for p in _PATTERNS) if i >= 0]
        if not cands:
            break
        off = min(cands)
        length, msg = parse_unit(raw, off, strict=True, wide=wide)
        nxt = off + length
        if length == _NEED or (length > 0 and (nxt >= n or
                                               parse_unit(raw, nxt, wide=wide)[0] != _BAD)):
            out.append((off, length, msg))
            if limit == 1 or length == _NEED:
                break
            while nxt < n:  # chain: every unit after the plausible one
                length, msg = parse_unit(raw, nxt, wide=wide)
                if length < 0:
                    break
                out.append((nxt, length, msg))
                nxt += length
            pos = max(nxt, off + 1)
            continue
        pos = off + 1
    return out
