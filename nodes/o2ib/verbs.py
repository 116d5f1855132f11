"""Emulated IB verbs: a reliable-connected queue pair, its completions, registered memory.

Theory of operation (STYLE rules 1, 2): ``QueuePair`` is a sans-I/O machine. Its inputs are
local verbs calls (``modify``, ``post_recv``, ``post_send``), the peer's packets
(``on_packet``, decoded by ``vwire``) and the clock (``handle_timer(now)``); its outputs are
``Transmit`` (a packet for the peer) and ``WorkCompletion`` (what ``ib_poll_cq`` would return
to ``kiblnd_complete``). One QP has one CQ, as o2iblnd gives each connection its own.

QP states follow ``ib_qp_state`` through one table, ``_QP``: RESET → INIT → RTR → RTS, any →
ERROR. A local call with no entry raises ``VerbsError`` (the -EINVAL ``ib_post_send`` /
``ib_modify_qp`` return); in ERROR every posted and every newly posted request completes
with ``WR_FLUSH_ERR`` (what ``kiblnd_close_conn`` drains, seed 003 hlth-lnd-drain-qp).
Packets reaching a QP that is not RTR/RTS are dropped, as an HCA drops them.

Responder ACKs are coalesced, as IBA allows (9.7.5.1.2: an ACK acknowledges every request
up to its PSN): one read's SENDs and RDMA WRITEs are answered by one ACK of the last, sent
at the end of the read (``flush_ack``) or before a NAK or READ response, which would
otherwise overtake it; the requester completes, in order, every request up to the ACKed
sequence number but one waiting out an RNR NAK (resent, acknowledged on its own).

Requester side: each send WR gets a sequence number and a deadline. The emulated stream is
already reliable, so a missing ACK means the peer is gone: after ``retry_count`` + 1 ack
timeouts the WR completes ``RETRY_EXC_ERR``. An RNR NAK (no receive posted at the peer)
resends the SEND after ``rnr_delay``, at most ``rnr_retry_count`` times (7: forever, as
IBA) before ``RNR_RETRY_EXC_ERR``. Responder side: SEND consumes the oldest receive (too
long → LOC_LEN_ERR there, REM_INV_REQ_ERR at the sender); RDMA WRITE/READ check the rkey,
the access right and the bounds against the ``ProtectionDomain``'s regions (→
REM_ACCESS_ERR); ``fail_next_rdma(n)`` makes the next n RDMAs fail with REM_OP_ERR (for the
``rdma-error`` fault kind). Any error completion moves both ends' QPs as IBA does
(requester to ERROR; responder to ERROR on an access, length or operational error). Queues
are bounded (``max_send_wr``/``max_recv_wr``, ``-ENOMEM`` past them).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Final

from nodes.o2ib.pd import MemoryRegion, ProtectionDomain
from nodes.o2ib.vwire import Kind, Packet, Syndrome


class VerbsError(Exception):
    """A local verbs call that is illegal now; ``errno`` as the kernel verb returns it."""

    def __init__(self, errno: int, descr: str) -> None:
        super().__init__(descr)
        self.errno = -abs(errno)


class QpState(enum.IntEnum):
    """``enum ib_qp_state`` (the states o2iblnd's QPs pass through)."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    ERROR = 6


class WcStatus(enum.IntEnum):
    """``enum ib_wc_status`` values o2iblnd sees."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    WR_FLUSH_ERR = 5
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13


class Opcode(enum.Enum):
    SEND = "send"
    RDMA_WRITE = "rdma_write"
    RDMA_READ = "rdma_read"
    RECV = "recv"


class QpInput(enum.Enum):
    TO_INIT = "modify to INIT"
    TO_RTR = "modify to RTR"
    TO_RTS = "modify to RTS"
    TO_ERROR = "modify to ERROR"
    POST_RECV = "post_recv"
    POST_SEND = "post_send"


Q, In = QpState, QpInput
#: (state, local input) -> next state; absent: VerbsError(-EINVAL), state unchanged.
_QP: Final[dict[tuple[QpState, QpInput], QpState]] = {
    (Q.RESET, In.TO_INIT): Q.INIT, (Q.INIT, In.TO_RTR): Q.RTR, (Q.RTR, In.TO_RTS): Q.RTS,
    (Q.INIT, In.POST_RECV): Q.INIT, (Q.RTR, In.POST_RECV): Q.RTR, (Q.RTS, In.POST_RECV): Q.RTS,
    (Q.RTS, In.POST_SEND): Q.RTS,
    (Q.ERROR, In.POST_RECV): Q.ERROR, (Q.ERROR, In.POST_SEND): Q.ERROR,
    **{(s, In.TO_ERROR): Q.ERROR for s in QpState},
}
_MODIFY: Final = {Q.INIT: In.TO_INIT, Q.RTR: In.TO_RTR, Q.RTS: In.TO_RTS, Q.ERROR: In.TO_ERROR}
_EINVAL, _ENOMEM = 22, 12
_NAK_STATUS: Final = {Syndrome.REM_INV_REQ: WcStatus.REM_INV_REQ_ERR,
                      Syndrome.REM_ACCESS: WcStatus.REM_ACCESS_ERR,
                      Syndrome.REM_OP: WcStatus.REM_OP_ERR}


# init written out: mypyc compiles it (a dataclass's generated __init__ runs interpreted)
@dataclass(init=False, slots=True, unsafe_hash=True, kw_only=True)
class SendWr:
    """``ib_send_wr``: SEND of ``data``; RDMA_WRITE of ``data`` to (rkey, remote_addr);
    RDMA_READ of ``length`` bytes from (rkey, remote_addr) into ``local`` at ``local_addr``."""

    wr_id: int
    opcode: Opcode
    data: bytes | memoryview = b""
    rkey: int = 0
    remote_addr: int = 0
    length: int = 0
    local: MemoryRegion | None = None
    local_addr: int = 0

    def __init__(self, *, wr_id: int, opcode: Opcode, data: bytes | memoryview = b"",
                 rkey: int = 0, remote_addr: int = 0, length: int = 0,
                 local: MemoryRegion | None = None, local_addr: int = 0) -> None:
        self.wr_id, self.opcode, self.data, self.rkey = wr_id, opcode, data, rkey
        self.remote_addr, self.length, self.local, self.local_addr = (remote_addr, length,
                                                                      local, local_addr)


@dataclass(init=False, slots=True, unsafe_hash=True)
class Transmit:
    packet: Packet

    def __init__(self, packet: Packet) -> None:
        self.packet = packet


@dataclass(init=False, slots=True, unsafe_hash=True)
class WorkCompletion:
    """``ib_wc`` as ``kiblnd_complete`` receives it."""

    wr_id: int
    opcode: Opcode
    status: WcStatus
    byte_len: int = 0
    data: bytes | memoryview = b""

    def __init__(self, wr_id: int, opcode: Opcode, status: WcStatus, byte_len: int = 0,
                 data: bytes | memoryview = b"") -> None:
        self.wr_id, self.opcode, self.status = wr_id, opcode, status
        self.byte_len, self.data = byte_len, data


Action = Transmit | WorkCompletion


@dataclass(init=False, slots=True)
class _Outstanding:
    wr: SendWr
    seq: int
    deadline: float
    retries: int
    rnr_retries: int
    packet: Packet
    rnr_wait: bool = False
    fatal: bool = False  # the QP errs with this one in flight, at its deadline (qp-error)

    def __init__(self, wr: SendWr, seq: int, deadline: float, retries: int,
                 rnr_retries: int, packet: Packet) -> None:
        self.wr, self.seq, self.deadline, self.retries = wr, seq, deadline, retries
        self.rnr_retries, self.packet, self.rnr_wait, self.fatal = (rnr_retries, packet,
                                                                    False, False)


class QueuePair:
    """One RC QP and its CQ."""

    def __init__(self, pd: ProtectionDomain, *, max_send_wr: int = 256,
                 max_recv_wr: int = 256, ack_timeout: float = 1.0, retry_count: int = 5,
                 rnr_delay: float = 0.01, rnr_retry_count: int = 6) -> None:
        self.pd, self.state = pd, QpState.RESET
        self.max_send_wr, self.max_recv_wr = max_send_wr, max_recv_wr
        self.ack_timeout, self.retry_count = ack_timeout, retry_count
        self.rnr_delay, self.rnr_retry_count = rnr_delay, rnr_retry_count
        self._rq: deque[tuple[int, int]] = deque()  # (wr_id, length)
        self._sq: dict[int, _Outstanding] = {}  # seq -> WR awaiting its ACK (IBA order)
        self._seq = 0
        self._fail_rdma = 0
        self._ack_due = 0  # responder: the last request accepted, its ACK not yet sent
        self.rnr_until = 0.0  # receiver not ready before then (the ``rnr`` fault kind)
        self.error_armed = False  # the ``qp-error`` fault waits for a send in flight

    def _step(self, inp: QpInput) -> None:
        nxt = _QP.get((self.state, inp))
        if nxt is None:
            raise VerbsError(_EINVAL, f"{inp.value} illegal in QP state {self.state.name}")
        self.state = nxt

    def modify(self, to: QpState) -> list[Action]:
        """``ib_modify_qp``; to ERROR flushes every outstanding request."""
        inp = _MODIFY.get(to)
        if inp is None:
            raise VerbsError(_EINVAL, f"modify to {to.name} is not emulated")
        self._step(inp)
        return self._flush() if to is Q.ERROR else []

    def post_recv(self, wr_id: int, length: int) -> list[Action]:
        """``ib_post_recv``: one receive buffer of ``length`` bytes."""
        if self.state is not Q.RTS:  # (RTS: the table's answer is RTS; the common case)
            self._step(In.POST_RECV)
        if self.state is Q.ERROR:
            return [WorkCompletion(wr_id, Opcode.RECV, WcStatus.WR_FLUSH_ERR)]
        if len(self._rq) >= self.max_recv_wr:
            raise VerbsError(_ENOMEM, f"receive queue full ({self.max_recv_wr})")
        self._rq.append((wr_id, length))
        return []

    def post_send(self, wr: SendWr, now: float) -> list[Action]:
        """``ib_post_send``: one signaled request."""
        if self.state is not Q.RTS:  # (as post_recv)
            self._step(In.POST_SEND)
        if self.state is Q.ERROR:
            return [WorkCompletion(wr.wr_id, wr.opcode, WcStatus.WR_FLUSH_ERR)]
        if len(self._sq) >= self.max_send_wr:
            raise VerbsError(_ENOMEM, f"send queue full ({self.max_send_wr})")
        if wr.opcode is Opcode.RECV:
            raise VerbsError(_EINVAL, "RECV is not a send opcode")
        if wr.opcode is Opcode.RDMA_READ and (
                wr.local is None or wr.local_addr < 0
                or wr.local_addr + wr.length > len(wr.local.buf)):
            raise VerbsError(_EINVAL, "RDMA_READ needs a local region that fits its length")
        self._seq += 1
        if wr.opcode is Opcode.SEND:
            pkt = Packet(Kind.SEND, (self._seq,), wr.data)
        elif wr.opcode is Opcode.RDMA_WRITE:
            pkt = Packet(Kind.WRITE, (self._seq, wr.rkey, wr.remote_addr), wr.data)
        else:
            pkt = Packet(Kind.READ_REQ, (self._seq, wr.rkey, wr.remote_addr, wr.length))
        self._sq[self._seq] = _Outstanding(wr, self._seq, now + self.ack_timeout,
                                           self.retry_count, self.rnr_retry_count, pkt)
        if self.error_armed:  # the fatal error comes with this request in flight: the
            self.error_armed = False  # CQ reports it later, as the HCA does, not in the post
            self._sq[self._seq].fatal = True
            self._sq[self._seq].deadline = now
            return []
        return [Transmit(pkt)]

    def async_error(self) -> list[Action]:
        """A fatal QP error with a send in flight (the ``qp-error`` fault; a fabric's come
        so, and over loopback a send is outstanding only for microseconds): now if one is
        outstanding, else the next one posted errs at the next CQ poll (``handle_timer``)."""
        if self._sq or self.state is Q.ERROR:
            return self.modify(Q.ERROR)
        self.error_armed = True
        return []

    def fail_next_rdma(self, n: int) -> None:
        """Responder: the next ``n`` RDMA requests fail with REM_OP (fault injection)."""
        self._fail_rdma = max(0, n)

    def next_deadline(self) -> float | None:
        return min((o.deadline for o in self._sq.values()), default=None)

    def handle_timer(self, now: float) -> list[Action]:
        """Ack timeouts and RNR waits that fell due."""
        out: list[Action] = []
        for o in list(self._sq.values()):
            if o.deadline > now or self.state is Q.ERROR:
                continue
            if o.fatal:
                return out + self._to_error()
            if o.rnr_wait:  # an RNR wait ended: resend
                o.rnr_wait = False
                o.deadline = now + self.ack_timeout
                out.append(Transmit(o.packet))
            elif o.retries > 0:
                o.retries -= 1
                o.deadline = now + self.ack_timeout
            else:
                out += self._fail(o, WcStatus.RETRY_EXC_ERR)
        return out

    # --- the peer's packets ---------------------------------------------------------------
    def placement(self, kind: Kind, fields: tuple[int, ...], n: int) -> memoryview | None:
        """Where the stream reader puts a large RDMA WRITE's data as it arrives: the target
        region itself, when the WRITE will be accepted (the HCA's DMA; no copy later)."""
        if kind is not Kind.WRITE or self.state not in (Q.RTR, Q.RTS) or self._fail_rdma:
            return None
        mr = self.pd.check(fields[1], fields[2], n, write=True)
        return None if mr is None else memoryview(mr.buf)[fields[2]:fields[2] + n]

    def flush_ack(self) -> list[Action]:
        """Responder: the coalesced ACK of the requests accepted since the last one sent."""
        seq, self._ack_due = self._ack_due, 0
        return [Transmit(Packet(Kind.ACK, (seq,)))] if seq else []

    def on_packet(self, p: Packet, now: float) -> list[Action]:
        """One packet; a request accepted is ACKed by the next ``flush_ack``."""
        if self.state not in (Q.RTR, Q.RTS):
            return []  # an HCA drops packets for a QP not ready to receive
        if p.kind in (Kind.ACK, Kind.NAK, Kind.READ_RESP):
            return self._on_response(p, now)
        seq = p.fields[0]
        if p.kind is Kind.SEND:
            if not self._rq or now < self.rnr_until:
                return [*self.flush_ack(), Transmit(Packet(Kind.NAK, (seq, Syndrome.RNR)))]
            wr_id, length = self._rq.popleft()
            if len(p.data) > length:
                wc = WorkCompletion(wr_id, Opcode.RECV, WcStatus.LOC_LEN_ERR)
                return [wc, *self.flush_ack(),
                        Transmit(Packet(Kind.NAK, (seq, Syndrome.REM_INV_REQ))),
                        *self._to_error()]
            self._ack_due = seq
            return [WorkCompletion(wr_id, Opcode.RECV, WcStatus.SUCCESS, len(p.data), p.data)]
        if self._fail_rdma:
            self._fail_rdma -= 1  # a responder error: its QP enters ERROR too (IBA 9.9.3)
            return [*self.flush_ack(), Transmit(Packet(Kind.NAK, (seq, Syndrome.REM_OP))),
                    *self._to_error()]
        write = p.kind is Kind.WRITE
        length = len(p.data) if write else p.fields[3]
        mr = self.pd.check(p.fields[1], p.fields[2], length, write=write)
        if mr is None:
            return [*self.flush_ack(), Transmit(Packet(Kind.NAK, (seq, Syndrome.REM_ACCESS))),
                    *self._to_error()]
        addr = p.fields[2]
        if write:
            if not p.placed:  # (placed: it is in mr.buf already, ``placement``)
                mr.buf[addr:addr + length] = p.data
            self._ack_due = seq
            return []
        return [*self.flush_ack(),
                Transmit(Packet(Kind.READ_RESP, (seq,), bytes(mr.buf[addr:addr + length])))]

    def _on_response(self, p: Packet, now: float) -> list[Action]:
        o = self._sq.get(p.fields[0])
        if o is None:
            return []  # a late answer to a request already failed
        if p.kind is Kind.NAK and p.fields[1] == Syndrome.RNR:
            if o.rnr_retries == 0 and self.rnr_retry_count != 7:
                return self._fail(o, WcStatus.RNR_RETRY_EXC_ERR)
            if self.rnr_retry_count != 7:  # 7: retry forever (IBA)
                o.rnr_retries -= 1
            o.rnr_wait = True
            o.deadline = now + self.rnr_delay
            return []
        if p.kind is Kind.NAK:
            return self._fail(o, _NAK_STATUS[Syndrome(p.fields[1])])
        if p.kind is Kind.READ_RESP:
            del self._sq[o.seq]
            if o.wr.local is not None:
                o.wr.local.buf[o.wr.local_addr:o.wr.local_addr + len(p.data)] = p.data
            return [WorkCompletion(o.wr.wr_id, o.wr.opcode, WcStatus.SUCCESS, o.wr.length)]
        acked: list[_Outstanding] = []
        for x in self._sq.values():  # in sequence order
            if x.seq > o.seq:
                break
            if not x.rnr_wait:
                acked.append(x)
        out: list[Action] = []
        for x in acked:  # a coalesced ACK: every request up to its PSN, in order
            del self._sq[x.seq]
            n = x.wr.length if x.wr.opcode is Opcode.RDMA_READ else len(x.wr.data)
            out.append(WorkCompletion(x.wr.wr_id, x.wr.opcode, WcStatus.SUCCESS, n))
        return out

    def _fail(self, o: _Outstanding, status: WcStatus) -> list[Action]:
        del self._sq[o.seq]
        return [WorkCompletion(o.wr.wr_id, o.wr.opcode, status), *self._to_error()]

    def _to_error(self) -> list[Action]:
        self._step(In.TO_ERROR)
        return self._flush()

    def _flush(self) -> list[Action]:
        out: list[Action] = [WorkCompletion(o.wr.wr_id, o.wr.opcode, WcStatus.WR_FLUSH_ERR)
                             for o in self._sq.values()]
        out += [WorkCompletion(w, Opcode.RECV, WcStatus.WR_FLUSH_ERR) for w, _ in self._rq]
        self._sq.clear()
        self._rq.clear()
        return out
