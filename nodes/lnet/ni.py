"""Local side: ``lnet_net`` and ``lnet_ni`` with credits, health and statistics (spec §1.2).

Theory of operation: a node has nets (``tcp``, ``tcp1``...), each with one or more NIs
(cfg-020: several NIs on one net is Multi-Rail). Every NI owns a tx credit pool per CPT that the
engine takes on send and returns on completion; when one goes negative the message waits in
that CPT's FIFO queue (spec §1.5, seed 001; ``cpt.py``). The loopback NI ``0@lo`` always
exists and bypasses credits. Health counters are kept here; the rules that move them live in
the engine.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from nodes.lnet.counters import IfaceStats, LinkEvents
from nodes.lnet.cpt import cpt_of_nid
from nodes.lnet.nid import NID, Net
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.msg import MD, Msg

LNET_NI_STATUS_UP: Final = 0x15AAC0DE
LNET_NI_STATUS_DOWN: Final = 0xDEADFACE

#: LND defaults (spec §0): credits, peer_credits, peer_timeout; socklnd timeout 50 s.
DEFAULT_CREDITS: Final = 256
DEFAULT_PEER_CREDITS: Final = 8
DEFAULT_PEER_TIMEOUT: Final = 180
SOCKLND_TIMEOUT: Final = 50


@dataclass(slots=True)
class NetTunables:
    """Per-net tunables shown under ``tunables:`` (spec §9.3)."""

    peer_timeout: int = DEFAULT_PEER_TIMEOUT
    peer_credits: int = DEFAULT_PEER_CREDITS
    peer_buffer_credits: int = 0
    credits: int = DEFAULT_CREDITS


@dataclass(eq=False, slots=True)
class TxQueue:
    """``lnet_tx_queue``: one CPT's share of an NI's TX credits and the messages waiting for
    one (``nodes/lnet/cpt.py``)."""

    credits: int
    max_credits: int
    min_credits: int
    delayed: deque[Msg] = field(default_factory=deque)


@dataclass(slots=True)
class NIHealthStats:
    """``health stats:`` of a local NI (spec §4.6)."""

    fatal_error: int = 0
    interrupts: int = 0
    dropped: int = 0
    aborted: int = 0
    no_route: int = 0
    timeouts: int = 0
    error: int = 0
    # NETWORK_TIMEOUTs of messages sent from this NI (hlth-stt-network-timeout-resends): real
    # LNet counts them per peer NI only, so this shows in ``lctl testbed_stats``, not lnetctl
    network_timeout: int = 0


@dataclass(eq=False, slots=True)
class LNetNI:
    """One local interface. ``interface`` is the device name (``eth0``); cfg-040 is 1:1."""

    nid: NID
    interface: str
    net: LNetNet
    cpts: tuple[int, ...] = (0,)
    dev_cpt: int = -1
    status: int = LNET_NI_STATUS_UP
    healthv: int = LNET_MAX_HEALTH_VALUE
    fatal_error: bool = False
    seq: int = 0
    sel_priority: int = 0xFFFF_FFFF
    tx_credits: int = DEFAULT_CREDITS
    max_tx_credits: int = DEFAULT_CREDITS
    min_tx_credits: int = DEFAULT_CREDITS
    #: per CPT (``ni_tx_queues``); ``tx_credits`` is their sum (``ni_tx_credits``)
    tx_queues: dict[int, TxQueue] = field(default_factory=dict)
    stats: IfaceStats = field(default_factory=IfaceStats)
    hstats: NIHealthStats = field(default_factory=NIHealthStats)
    ping_count: int = 0
    next_ping: float = 0.0
    recovery_state: int = 0  # recovery.RECOVERY_PENDING | RECOVERY_FAILED
    ping_md: MD | None = None  # ni_ping_mdh: the outstanding local recovery ping
    lnd_timeout: int = SOCKLND_TIMEOUT
    conns_per_peer: int = 1
    tos: int = -1  # socklnd ``tos`` (lnd tunables): -1 leaves the IP ToS alone
    #: an o2ib NI's ``lnd tunables`` before conns_per_peer (nodes/o2ib/kibtx.py ``lnetctl``)
    lnd_o2ib: dict[str, int] = field(default_factory=dict)
    link_events: LinkEvents = field(default_factory=LinkEvents)  # hlth-stt-ni-down/up-events

    @property
    def is_lo(self) -> bool:
        return self.nid.is_lo

    def take_tx_credit(self, peer_nid: NID) -> TxQueue:
        """``lnet_post_send_locked``'s NI credit: one of ``ni_tx_credits`` and of the queue
        of the peer NI's CPT (``ni_tx_queues[lnet_cpt_of_nid]``), returned (below 0: the
        message waits in it)."""
        tq = self.tx_queues[cpt_of_nid(peer_nid, self.cpts)]
        tq.credits -= 1
        tq.min_credits = min(tq.min_credits, tq.credits)
        self.tx_credits -= 1
        self.min_tx_credits = min(self.min_tx_credits, self.tx_credits)
        return tq

    def give_tx_credit(self, peer_nid: NID, msg: Msg) -> TxQueue:
        """``lnet_return_tx_credits_locked``: the credit back to its CPT queue (``msg`` out
        of its waiters if there); returns the queue, whose next waiter may go."""
        tq = self.tx_queues[cpt_of_nid(peer_nid, self.cpts)]
        if msg in tq.delayed:
            tq.delayed.remove(msg)
        tq.credits += 1
        self.tx_credits += 1
        return tq

    @property
    def status_str(self) -> str:
        if self.is_lo:
            return "up"
        if self.fatal_error:
            return "down"
        return "up" if self.status == LNET_NI_STATUS_UP else "down"


@dataclass(eq=False, slots=True)
class LNetNet:
    """One configured network; ``seq`` is the round-robin stamp of ``lnet_net``."""

    net: Net
    tunables: NetTunables = field(default_factory=NetTunables)
    nis: list[LNetNI] = field(default_factory=list)
    seq: int = 0
    sel_priority: int = 0xFFFF_FFFF

    @property
    def healthv(self) -> int:
        """Net health = best NI health among NIs not in fatal state (api-ni.c)."""
        values = [ni.healthv for ni in self.nis if not ni.fatal_error]
        return max(values) if values else 0
