"""Emulated RDMA connection manager: one ``rdma_cm_id`` with its queue pair, bytes in and out.

Theory of operation (STYLE rules 1, 2): ``CmId`` is what o2iblnd holds per connection. Local
calls are the ``rdma_*`` verbs o2iblnd makes (``resolve_addr``, ``resolve_route``,
``connect``, ``accept``, ``reject``, ``disconnect``) plus ``post_send``/``post_recv`` on its
QP; peer input is bytes (``receive_data``, parsed by ``vwire.PacketReader``); time is
``handle_timer(now)``. Outputs are ``SendBytes`` (for the stream to the peer), the QP's
``WorkCompletion``s and ``CmEvent``s, which are what ``kiblnd_cm_callback`` switches on:
ADDR_RESOLVED, ROUTE_RESOLVED, CONNECT_REQUEST, ESTABLISHED, REJECTED (``status`` the IB CM
reason, 28 = consumer defined with a ``kib_rej`` as private data), UNREACHABLE (no answer to
the REQ within ``cm_timeout``: ``status`` -ETIMEDOUT), CONNECT_ERROR (no RTU to our REP),
DISCONNECTED and TIMEWAIT_EXIT (``timewait`` after it).

Every state change is in ``_CM``; a local call with no entry raises ``VerbsError(-EINVAL)``,
a peer CM packet with no entry is a ``WireProtocolError`` (recorded in ``error``; the id is
CLOSED, its QP in ERROR, flushed). The QP follows the CM as rdma_cm drives it: INIT once the
route is resolved (active) or the REQ arrives (passive), RTR+RTS on the REP (active) or on
accept (passive), ERROR on disconnect. Private data is bounded as IB CM bounds it (REQ 56
bytes after rdma_cm's header, REP 196, REJ 148): o2iblnd's 56-byte CONNREQ just fits.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hstatus import HStatus
from nodes.o2ib import vwire
from nodes.o2ib.verbs import (
    Action,
    QpState,
    QueuePair,
    SendWr,
    Transmit,
    VerbsError,
    WorkCompletion,
)
from nodes.o2ib.vwire import Kind, Packet

IB_CM_REJ_CONSUMER_DEFINED: Final = 28
ETIMEDOUT: Final = 110
#: IB CM private data limits (REQ: 92 less rdma_cm's 36-byte header).
PRIVATE_MAX: Final = {Kind.CM_REQ: 56, Kind.CM_REP: 196, Kind.CM_REJ: 148}


class CmEventType(enum.IntEnum):
    """``enum rdma_cm_event_type`` (the values of rdma/rdma_cm.h)."""

    ADDR_RESOLVED = 0
    ROUTE_RESOLVED = 2
    CONNECT_REQUEST = 4
    CONNECT_ERROR = 6
    UNREACHABLE = 7
    REJECTED = 8
    ESTABLISHED = 9
    DISCONNECTED = 10
    TIMEWAIT_EXIT = 15


class CmState(enum.Enum):
    IDLE = "idle"
    ADDR_RESOLVED = "address resolved"
    ROUTE_RESOLVED = "route resolved"
    CONNECTING = "REQ sent"
    REQ_RCVD = "REQ received"
    ACCEPTING = "REP sent"
    CONNECTED = "established"
    TIMEWAIT = "disconnected, in timewait"
    CLOSED = "closed"


class CmInput(enum.Enum):
    RESOLVE_ADDR = "resolve_addr"
    RESOLVE_ROUTE = "resolve_route"
    CONNECT = "connect"
    ACCEPT = "accept"
    REJECT = "reject"
    DISCONNECT = "disconnect"
    RX_REQ = "REQ received"
    RX_REP = "REP received"
    RX_RTU = "RTU received"
    RX_REJ = "REJ received"
    RX_DREQ = "DREQ received"
    RX_DREP = "DREP received"
    TIMEOUT = "CM timeout"


S, C = CmState, CmInput
#: (state, input) -> next state. Everything absent is an error (local or peer's).
_CM: Final[dict[tuple[CmState, CmInput], CmState]] = {
    (S.IDLE, C.RESOLVE_ADDR): S.ADDR_RESOLVED, (S.ADDR_RESOLVED, C.RESOLVE_ROUTE):
    S.ROUTE_RESOLVED, (S.ROUTE_RESOLVED, C.CONNECT): S.CONNECTING,
    (S.CONNECTING, C.RX_REP): S.CONNECTED, (S.CONNECTING, C.RX_REJ): S.CLOSED,
    (S.CONNECTING, C.TIMEOUT): S.CLOSED,
    (S.IDLE, C.RX_REQ): S.REQ_RCVD, (S.REQ_RCVD, C.ACCEPT): S.ACCEPTING,
    (S.REQ_RCVD, C.REJECT): S.CLOSED, (S.ACCEPTING, C.RX_RTU): S.CONNECTED,
    (S.ACCEPTING, C.TIMEOUT): S.CLOSED,
    **{(s, C.DISCONNECT): S.TIMEWAIT for s in (S.CONNECTING, S.ACCEPTING, S.CONNECTED)},
    **{(s, C.RX_DREQ): S.TIMEWAIT for s in (S.ACCEPTING, S.CONNECTED, S.TIMEWAIT)},
    (S.TIMEWAIT, C.RX_DREP): S.TIMEWAIT, (S.TIMEWAIT, C.TIMEOUT): S.CLOSED,
}
_RX: Final = {Kind.CM_REQ: C.RX_REQ, Kind.CM_REP: C.RX_REP, Kind.CM_RTU: C.RX_RTU,
              Kind.CM_REJ: C.RX_REJ, Kind.CM_DREQ: C.RX_DREQ, Kind.CM_DREP: C.RX_DREP}


@dataclass(frozen=True, slots=True)
class SendBytes:
    """One packet for the stream: ``data``, then ``tail`` (a large body, not joined)."""

    data: bytes
    tail: bytes | memoryview = b""


@dataclass(frozen=True, slots=True)
class CmEvent:
    """``struct rdma_cm_event`` as ``kiblnd_cm_callback`` reads it."""

    event: CmEventType
    status: int = 0
    private_data: bytes = b""


CmAction = SendBytes | CmEvent | WorkCompletion


class CmId:
    """One connection's cm_id + QP. ``active``: the connecting side."""

    def __init__(self, qp: QueuePair, *, active: bool, cm_timeout: float = 5.0,
                 timewait: float = 1.0) -> None:
        self.active, self.state, self.qp = active, CmState.IDLE, qp
        self.cm_timeout, self.timewait = cm_timeout, timewait
        self._deadline: float | None = None
        self._reader = vwire.PacketReader(qp.pd.pool, qp.placement)
        self.error: WireProtocolError | None = None

    def _step(self, inp: CmInput) -> CmState:
        nxt = _CM.get((self.state, inp))
        if nxt is None:
            if inp in _RX.values():
                raise WireProtocolError(f"emulated IB CM: {inp.value} in state "
                                        f"{self.state.value}", int(HStatus.REMOTE_ERROR))
            raise VerbsError(22, f"rdma_{inp.value} illegal in CM state {self.state.value}")
        prev, self.state = self.state, nxt
        return prev

    def _out(self, acts: list[Action]) -> list[CmAction]:
        if not acts:
            return []
        return [SendBytes(*vwire.pack_parts(a.packet)) if isinstance(a, Transmit) else a
                for a in acts]

    @staticmethod
    def _cm(kind: Kind, private: bytes = b"") -> SendBytes:
        limit = PRIVATE_MAX.get(kind, 0)
        if len(private) > limit:
            raise VerbsError(22, f"{kind.name} private data {len(private)} > {limit} bytes")
        return SendBytes(vwire.pack(Packet(kind, (), private)))

    # --- rdma_* calls -----------------------------------------------------------------------
    def resolve_addr(self) -> list[CmAction]:
        """``rdma_resolve_addr`` (the emulated fabric has no ARP to wait for)."""
        self._step(C.RESOLVE_ADDR)
        return [CmEvent(CmEventType.ADDR_RESOLVED)]

    def resolve_route(self) -> list[CmAction]:
        """``rdma_resolve_route``; o2iblnd then creates the QP (INIT)."""
        self._step(C.RESOLVE_ROUTE)
        self.qp.modify(QpState.INIT)
        return [CmEvent(CmEventType.ROUTE_RESOLVED)]

    def connect(self, private: bytes, now: float) -> list[CmAction]:
        """``rdma_connect`` with the CONNREQ as private data."""
        out = self._cm(Kind.CM_REQ, private)
        self._step(C.CONNECT)
        self._deadline = now + self.cm_timeout
        return [out]

    def accept(self, private: bytes, now: float) -> list[CmAction]:
        """``rdma_accept`` with the CONNACK: QP to RTR and RTS, REP sent, RTU awaited."""
        out = self._cm(Kind.CM_REP, private)
        self._step(C.ACCEPT)
        self.qp.modify(QpState.RTR)
        self.qp.modify(QpState.RTS)
        self._deadline = now + self.cm_timeout
        return [out]

    def reject(self, private: bytes, reason: int = IB_CM_REJ_CONSUMER_DEFINED) -> list[CmAction]:
        """``rdma_reject`` with a ``kib_rej`` (``kiblnd_reject``)."""
        out = self._cm(Kind.CM_REJ, bytes([reason]) + private[:PRIVATE_MAX[Kind.CM_REJ]])
        self._step(C.REJECT)
        return [out]

    def disconnect(self, now: float) -> list[CmAction]:
        """``rdma_disconnect``: QP to ERROR (everything flushed), DREQ, then timewait."""
        self._step(C.DISCONNECT)
        self._deadline = now + self.timewait
        return [*self._out(self.qp.modify(QpState.ERROR)), self._cm(Kind.CM_DREQ),
                CmEvent(CmEventType.DISCONNECTED)]

    def qp_error(self) -> list[CmAction]:
        """The QP enters ERROR (a fatal async event, or the ``qp-error`` fault): every posted
        request flushes; the CM state is left to the disconnect that follows."""
        return self._out(self.qp.modify(QpState.ERROR))

    def qp_error_in_flight(self) -> list[CmAction]:
        """The QP enters ERROR with a send in flight (``QueuePair.async_error``)."""
        return self._out(self.qp.async_error())

    def post_recv(self, wr_id: int, length: int) -> list[CmAction]:
        return self._out(self.qp.post_recv(wr_id, length))

    def post_send(self, wr: SendWr, now: float) -> list[CmAction]:
        return self._out(self.qp.post_send(wr, now))

    # --- clock --------------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        qd = self.qp.next_deadline()
        ds = [d for d in (self._deadline, qd) if d is not None]
        return min(ds) if ds else None

    def handle_timer(self, now: float) -> list[CmAction]:
        out = self._out(self.qp.handle_timer(now))
        if self._deadline is None or now < self._deadline:
            return out
        self._deadline = None
        prev = self._step(C.TIMEOUT)
        if prev is S.CONNECTING:
            return [*out, CmEvent(CmEventType.UNREACHABLE, -ETIMEDOUT)]
        if prev is S.ACCEPTING:
            return out + self._out(self.qp.modify(QpState.ERROR)) + [
                CmEvent(CmEventType.CONNECT_ERROR, -ETIMEDOUT)]
        return [*out, CmEvent(CmEventType.TIMEWAIT_EXIT)]

    # --- the peer's bytes -----------------------------------------------------------------------
    def receive_data(self, data: bytes | memoryview, now: float) -> list[CmAction]:
        """Feed bytes from the peer. A protocol error closes the id and is kept in ``error``
        (raised again on the next call), after the actions of the good packets before it."""
        return self._received(data, 0, now)

    def rx_buffer(self) -> memoryview | None:
        """Where the stream's next bytes go (the reader's ``get_buffer``); None once failed."""
        return None if self.error is not None else self._reader.get_buffer()

    def receive_into(self, n: int, now: float) -> list[CmAction]:
        """``n`` bytes were written into the last ``rx_buffer()`` (as ``receive_data``)."""
        return self._received(None, n, now)

    def _received(self, data: bytes | memoryview | None, n: int, now: float) -> list[CmAction]:
        if self.error is not None:
            raise self.error
        out: list[CmAction] = []
        try:
            pkts = (self._reader.feed(data) if data is not None
                    else self._reader.buffer_updated(n))
            for p in pkts:
                out += self._on_packet(p, now)
            out += self._out(self.qp.flush_ack())  # one ACK for the read's requests
            if self._reader.error is not None:
                raise self._reader.error
        except WireProtocolError as e:
            out += self._out(self.qp.flush_ack())  # the good packets before it
            self.error, self.state, self._deadline = e, CmState.CLOSED, None
            if self.qp.state is not QpState.RESET:
                out += self._out(self.qp.modify(QpState.ERROR))
        return out

    def _on_packet(self, p: Packet, now: float) -> list[CmAction]:
        inp = _RX.get(p.kind)
        if inp is None:
            return self._out(self.qp.on_packet(p, now))
        limit = PRIVATE_MAX.get(p.kind, 0)
        if len(p.data) > limit:
            raise WireProtocolError(f"emulated IB CM: {p.kind.name} private data "
                                    f"{len(p.data)} > {limit} bytes", int(HStatus.REMOTE_ERROR))
        prev = self._step(inp)
        if inp is C.RX_REQ:
            self.qp.modify(QpState.INIT)
            return [CmEvent(CmEventType.CONNECT_REQUEST, 0, bytes(p.data))]
        if inp is C.RX_REP:
            self._deadline = None
            self.qp.modify(QpState.RTR)
            self.qp.modify(QpState.RTS)
            return [self._cm(Kind.CM_RTU), CmEvent(CmEventType.ESTABLISHED, 0, bytes(p.data))]
        if inp is C.RX_RTU:
            self._deadline = None
            return [CmEvent(CmEventType.ESTABLISHED)]
        if inp is C.RX_REJ:
            self._deadline = None
            if not p.data:
                raise WireProtocolError("emulated IB CM: REJ without a reason",
                                        int(HStatus.REMOTE_ERROR))
            return [CmEvent(CmEventType.REJECTED, p.data[0], bytes(p.data[1:]))]
        if inp is C.RX_DREQ and prev is not S.TIMEWAIT:
            self._deadline = now + self.timewait
            return [*self._out(self.qp.modify(QpState.ERROR)), self._cm(Kind.CM_DREP),
                    CmEvent(CmEventType.DISCONNECTED)]
        return []  # DREP, or a repeated DREQ, in timewait
