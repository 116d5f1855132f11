"""Messages, their lifecycle, memory descriptors and match entries (spec §4; lib-msg.c).

Theory of operation: every LNet message this node sends or forwards is a ``Msg`` (``struct
lnet_msg``). It remembers the parameters its first send was made with (source NID, router
NID) so a resend redoes the selection from scratch (spec §3.3). Its lifecycle is the
transition table ``TRANSITIONS`` (STYLE rule 2, like ``nodes/lnd/framing.py``): a phase
(``MsgPhase``) plus the bits ``struct lnet_msg`` keeps, under their lib-msg.c names:
``tx_committed``/``rx_committed`` (committed for sending / for receiving: a forwarded message
is both), ``onactivelist`` (counted in ``msgs_alloc``), ``sending``, ``txcredit`` and
``peertxcredit`` (an NI / peer NI send credit taken), ``rtrcredit`` and ``peerrtrcredit`` (a
router buffer / a peer router credit taken, forwarding only), ``tx_delayed`` (waiting for a
send credit). ``fire`` applies one input; an input the table does not have for the phase is a
local protocol error (``LNetLifecycleError``): a bug in the engine, never wire input.

A message being forwarded carries a ``Forwarding`` record (the NI and peer NI it came from,
the router buffer pool it holds); a routed message the header destination its gateway must
see (``rt_dst``). An ``MD`` is the upper layer's buffer: the initiator's MD receives SEND then
ACK/REPLY (or UNLINK on timeout); a target's MD (attached to a portal with an ``ME``) receives
PUT/GET. Every initiator MD ends with exactly one event whose ``unlinked`` is true. An MD the
engine sends for itself (recovery, discovery and router pings) names its ``MDOwner``: the
component its events go to, by role.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from nodes.lnet.hdr import LNetHdr, MsgType, Payload
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

if TYPE_CHECKING:
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import PeerNI
    from nodes.lnet.rtrpool import BufferPool


class OwnerRole(enum.Enum):
    """Who an internal MD's events go to (``lnet_mt_event_handler`` and friends)."""

    LPNI_RECOVERY = "lpni recovery ping"   # recovery.py (spec §3.5)
    NI_RECOVERY = "local ni recovery ping"  # recovery.py (lnet_recover_local_nis)
    DC_PING = "discovery ping"             # discovery.py (spec §5.2)
    DC_PUSH = "discovery push"
    RTR_PING = "router ping"               # rtrcheck.py (spec §6.4)
    RTR_QUERY = "down peer NI query"       # rtralive.py (rtr-router-query-down)
    PING_MD = "nid metadata ping"          # engine.py (lnet_discover_nid_metadata)


@dataclass(frozen=True, slots=True)
class MDOwner:
    """An internal MD's owner: the component role and the NID it is about."""

    role: OwnerRole
    nid: NID


@dataclass(eq=False, init=False, slots=True)
class MD:
    """``lnet_libmd``: ``data`` is what a GET on it returns; ``sink`` MDs accept any PUT.
    Its ``__init__`` is the generated one written out (compiled, ``actions.py``)."""

    handle: int
    threshold: int
    data: bytes = b""
    max_size: int = 1 << 20
    sink: bool = False
    events: bool = True
    # response tracking (spec §4.3): deadline for the ACK/REPLY and the next hop to blame;
    # None: not tracked; inf: tracked, not armed yet (armed at the first LND hand-off)
    rsp_deadline: float | None = None
    rsp_next_hop: PeerNI | None = None
    rsp_armed: bool = False  # started at the first LND hand-off (hlth-lnt-timeout-after-send)
    # caller-imposed wait (lnetctl ping --timeout): unlink without health consequences
    user_deadline: float | None = None
    unlinked: bool = False
    msg: Msg | None = None
    sent_at: float = 0.0
    op: MsgType | None = None
    owner: MDOwner | None = None

    def __init__(self, handle: int, threshold: int, data: bytes = b"", max_size: int = 1 << 20,
                 sink: bool = False, events: bool = True, rsp_deadline: float | None = None,
                 rsp_next_hop: PeerNI | None = None, rsp_armed: bool = False,
                 user_deadline: float | None = None, unlinked: bool = False,
                 msg: Msg | None = None, sent_at: float = 0.0, op: MsgType | None = None,
                 owner: MDOwner | None = None) -> None:
        self.handle, self.threshold, self.data, self.max_size = handle, threshold, data, max_size
        self.sink, self.events, self.rsp_deadline = sink, events, rsp_deadline
        self.rsp_next_hop, self.rsp_armed, self.user_deadline = (rsp_next_hop, rsp_armed,
                                                                 user_deadline)
        self.unlinked, self.msg, self.sent_at, self.op = unlinked, msg, sent_at, op
        self.owner = owner


@dataclass(eq=False, slots=True)
class ME:
    """``lnet_me``: match entry on a portal; ``ignore_bits`` are don't-care match bits.
    Its ``__init__`` is the generated one written out (compiled, ``actions.py``)."""

    portal: int
    match_bits: int
    ignore_bits: int
    md: MD

    def __init__(self, portal: int, match_bits: int, ignore_bits: int, md: MD) -> None:
        self.portal, self.match_bits, self.ignore_bits, self.md = (portal, match_bits,
                                                                   ignore_bits, md)

    def matches(self, match_bits: int) -> bool:
        return (self.match_bits ^ match_bits) & ~self.ignore_bits == 0


@dataclass(eq=False, init=False, slots=True)
class Forwarding:
    """What a router holds for a message it forwards (``msg_routing``, spec §1.5/§1.6).
    Its ``__init__`` is the generated one written out (one per forwarded message)."""

    rxni: LNetNI
    rxpeer: PeerNI
    pool: BufferPool | None = None  # the buffer pool while ``rtrcredit`` is held

    def __init__(self, rxni: LNetNI, rxpeer: PeerNI, pool: BufferPool | None = None) -> None:
        self.rxni, self.rxpeer, self.pool = rxni, rxpeer, pool


class MsgPhase(enum.Enum):
    NEW = "allocated"                     # on the active list, not committed
    WAIT_DISCOVERY = "on lp_dc_pendq"     # the send gate holds it (spec §2.2 step 5)
    WAIT_ROUTE = "parked on a gateway"    # routes wait for router discovery (seed 002)
    WAIT_RTRCREDIT = "on lp_rtrq"         # forwarding: no peer router credit
    WAIT_BUFFER = "on rbp_msgs"           # forwarding: no router buffer
    COMMITTED = "tx committed"            # selected; credits being taken
    TX_DELAYED = "waiting for a credit"   # on an NI / peer NI tx queue (msg_tx_delayed)
    FAULT_DELAYED = "held by a delay rule"  # spec §8.3
    SENDING = "with the LND"              # a Transmit is out, awaiting TxCompleted
    DONE = "finalized"

    # members are singletons: identity hash (C) instead of Enum's hash of the name (a
    # Python call per ``NEXT`` lookup, several per message)
    __hash__ = object.__hash__


class MsgInput(enum.Enum):
    WAIT_DISCOVERY = "wait for discovery"
    WAIT_ROUTE = "wait for router discovery"
    WAIT_RTRCREDIT = "wait for a peer router credit"
    WAIT_BUFFER = "wait for a router buffer"
    READY = "ready to send"               # discovery done, route found, buffer taken
    COMMIT = "commit for sending"
    QUEUE = "queue for a send credit"
    CREDIT = "send credit granted"
    DELAY = "delay rule holds it"
    RELEASE = "delay rule releases it"
    TRANSMIT = "hand to the LND"
    RESEND = "decommit for a resend"
    FINALIZE = "finalize"

    __hash__ = object.__hash__  # (as MsgPhase)


class LNetLifecycleError(Exception):
    """An input the message lifecycle has no transition for (a local protocol error)."""


class _Table(dict[tuple[MsgPhase, MsgInput], MsgPhase]):
    """The transition table; a missing (phase, input) raises ``LNetLifecycleError``, so the
    send path may apply a transition as a plain lookup: ``msg.phase = NEXT[msg.phase, inp]``."""

    def __missing__(self, key: tuple[MsgPhase, MsgInput]) -> MsgPhase:
        raise LNetLifecycleError(f"cannot {key[1].value} a message {key[0].value}")


P, I_ = MsgPhase, MsgInput
_WAITING: Final = (P.NEW, P.WAIT_DISCOVERY, P.WAIT_ROUTE, P.WAIT_RTRCREDIT, P.WAIT_BUFFER)
_POSTING: Final = (P.COMMITTED, P.TX_DELAYED, P.FAULT_DELAYED)
#: (phase, input) -> next phase (STYLE rule 2). Everything absent is a lifecycle error.
TRANSITIONS: Final[dict[tuple[MsgPhase, MsgInput], MsgPhase]] = _Table({
    (P.NEW, I_.WAIT_DISCOVERY): P.WAIT_DISCOVERY,
    (P.NEW, I_.WAIT_ROUTE): P.WAIT_ROUTE,
    (P.NEW, I_.WAIT_RTRCREDIT): P.WAIT_RTRCREDIT,
    (P.NEW, I_.WAIT_BUFFER): P.WAIT_BUFFER,
    (P.WAIT_RTRCREDIT, I_.WAIT_BUFFER): P.WAIT_BUFFER,
    **{(p, I_.READY): P.NEW for p in _WAITING},
    (P.NEW, I_.COMMIT): P.COMMITTED,
    (P.COMMITTED, I_.QUEUE): P.TX_DELAYED,
    (P.TX_DELAYED, I_.CREDIT): P.COMMITTED,
    (P.COMMITTED, I_.DELAY): P.FAULT_DELAYED,
    (P.FAULT_DELAYED, I_.RELEASE): P.COMMITTED,
    (P.COMMITTED, I_.TRANSMIT): P.SENDING,
    # a failed attempt goes back to NEW for a full reselection (lnet_resend_msg_locked)
    **{(p, I_.RESEND): P.NEW for p in (*_POSTING, P.SENDING)},
    **{(p, I_.FINALIZE): P.DONE for p in (*_WAITING, *_POSTING, P.SENDING)},
})
NEXT: Final = TRANSITIONS


@dataclass(eq=False, init=False, slots=True)
class Msg:
    """``lnet_msg``. ``hdr`` is rebuilt at each commit (new source/destination on resend).
    Its ``__init__`` is the generated one written out, so that mypyc compiles it
    (``actions.py``): one per message."""

    mid: int
    type: MsgType
    hdr: LNetHdr
    payload: Payload
    md: MD | None = None
    is_response: bool = False
    recovery: bool = False
    no_resend: bool = False
    final_dst: NID | None = None
    src_nid_param: NID | None = None
    rtr_nid_param: NID | None = None
    txni: LNetNI | None = None
    txpeer: PeerNI | None = None
    fwd: Forwarding | None = None   # msg_routing: the receive side of a forwarded message
    rt_dst: NID | None = None       # routed: the header destination behind the gateway
    phase: MsgPhase = MsgPhase.NEW
    # the bits of struct lnet_msg (lib-msg.c), see the module doc
    tx_committed: bool = False
    rx_committed: bool = False
    onactivelist: bool = False
    sending: bool = True
    txcredit: bool = False
    peertxcredit: bool = False
    rtrcredit: bool = False
    peerrtrcredit: bool = False
    tx_delayed: bool = False
    deadline: float = 0.0
    retry_count: int = 0
    hstatus: HStatus = HStatus.OK
    tx_id: int | None = None
    committed_at: float = 0.0
    md_cpt: int | None = None  # NUMA node of the message memory (snd-020), None = unknown
    traced: bool = False       # its MsgTrace ``complete`` was emitted (exactly once)
    fixed_ni: bool = False     # the local NI of this attempt was not the selector's choice

    def __init__(self, mid: int, type: MsgType, hdr: LNetHdr, payload: Payload,
                 md: MD | None = None, is_response: bool = False, recovery: bool = False,
                 no_resend: bool = False, final_dst: NID | None = None,
                 src_nid_param: NID | None = None, rtr_nid_param: NID | None = None,
                 txni: LNetNI | None = None, txpeer: PeerNI | None = None,
                 fwd: Forwarding | None = None, rt_dst: NID | None = None,
                 phase: MsgPhase = MsgPhase.NEW, tx_committed: bool = False,
                 rx_committed: bool = False, onactivelist: bool = False, sending: bool = True,
                 txcredit: bool = False, peertxcredit: bool = False, rtrcredit: bool = False,
                 peerrtrcredit: bool = False, tx_delayed: bool = False, deadline: float = 0.0,
                 retry_count: int = 0, hstatus: HStatus = HStatus.OK, tx_id: int | None = None,
                 committed_at: float = 0.0, md_cpt: int | None = None, traced: bool = False,
                 fixed_ni: bool = False) -> None:
        self.mid, self.type, self.hdr, self.payload, self.md = mid, type, hdr, payload, md
        self.is_response, self.recovery, self.no_resend = is_response, recovery, no_resend
        self.final_dst, self.src_nid_param = final_dst, src_nid_param
        self.rtr_nid_param, self.txni, self.txpeer = rtr_nid_param, txni, txpeer
        self.fwd, self.rt_dst, self.phase = fwd, rt_dst, phase
        self.tx_committed, self.rx_committed = tx_committed, rx_committed
        self.onactivelist, self.sending, self.txcredit = onactivelist, sending, txcredit
        self.peertxcredit, self.rtrcredit = peertxcredit, rtrcredit
        self.peerrtrcredit, self.tx_delayed, self.deadline = peerrtrcredit, tx_delayed, deadline
        self.retry_count, self.hstatus, self.tx_id = retry_count, hstatus, tx_id
        self.committed_at, self.md_cpt, self.traced = committed_at, md_cpt, traced
        self.fixed_ni = fixed_ni

    def fire(self, inp: MsgInput) -> None:
        """Apply one lifecycle input (``TRANSITIONS``); raises ``LNetLifecycleError``."""
        nxt = TRANSITIONS.get((self.phase, inp))
        if nxt is None:
            raise LNetLifecycleError(f"message {self.mid} ({self.type.name}): cannot "
                                     f"{inp.value} when {self.phase.value}")
        self.phase = nxt

    @property
    def nob(self) -> int:
        return len(self.payload)
