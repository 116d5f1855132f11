"""Sans-I/O connection table of one socklnd: peers, typed connections, choice, races, limits
and timeouts. No sockets, no asyncio, no clock: the driver passes ``now`` and carries out
what the answers say (STYLE rule 1).

Theory of operation (lnet/klnds/socklnd/socklnd.c, socklnd_cb.c, socklnd_proto.c):

* A *peer* is one (local NI, peer NID) pair (``struct ksock_peer_ni``): the txs waiting for a
  connection (``ksnp_tx_queue``) and its established connections (``ksnp_conns``), each of a
  type. With ``typed_conns`` (ksocklnd's default) a peer wants one SOCKLND_CONN_CONTROL and
  ``conns_per_peer`` each of BULK_IN and BULK_OUT (``ksocknal_conn_cb_mask``,
  ``ksocknal_incr_conn_count``); without, ``conns_per_peer`` of SOCKLND_CONN_ANY. A
  connection accepted from the peer counts too: its type is the peer's, inverted
  (``ksocknal_invert_type``), so one side's BULK_OUT is the other's BULK_IN.
* ``wanted_type``: the type the connector makes next (``ksocknal_connect``: CONTROL first,
  then BULK_IN while it has no more than BULK_OUT, then BULK_OUT).
* ``choose``: the connection a tx goes on (``ksocknal_find_conn_locked`` with
  ``ksocknal_match_tx_v3``): a message of ``min_bulk`` (1 KiB) or more with its headers
  prefers a BULK_OUT connection, a smaller one the CONTROL connection, each falling back on
  the other; BULK_IN carries none of our LNET messages; among equals the least loaded
  (bytes queued), then the one posted to least recently (``ksnd_round_robin``). Untyped
  (SOCKLND_CONN_ANY) connections take anything (``ksocknal_match_tx``; V3's own match
  refuses ANY, which only V1/V2 peers used).
* ``passive_verdict`` / ``active_verdict``: ``ksocknal_create_conn``'s rules. A passive
  connection loses the *race* (refused with EALREADY, hello ctype NONE) when its peer's NID
  is lower than ours and we are connecting to it ourselves, so the higher NID's connections
  win; a connection that would exceed ``conns_per_peer`` of its type is a *duplicate*
  (refused); and, a limit the kernel does not need, a peer never holds more than
  ``MAX_CONNS_FACTOR`` x ``conns_per_peer`` connections (STYLE rule 4: bounded by what a
  peer controls). Stale incarnations are the driver's (it closes the old connections).
* Handshakes in progress are counted per source address and bounded the same way
  (``begin_handshake``), so a peer cannot hold more than its connections plus those.
* Timeouts (``ksocknal_check_peer_timeouts``, called once a tick with ``now``):
  ``stale_txs`` — txs that waited the LND timeout for a connection
  (``ksocknal_flush_stale_txs``); ``rx_stalled`` — a frame begun and not finished, no byte
  for the timeout ("Timeout receiving from ...", ``ksocknal_find_timed_out_conn``);
  ``tx_stalled`` — data queued or in the socket's send queue and no progress for the timeout
  ("Timeout sending data to ..."), unless the kernel is still retransmitting, in which case
  TCP_USER_TIMEOUT decides (up to twice the timeout).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodes.lnd import wire
from nodes.lnd.framing import KsockConnection
from nodes.lnd.sendq import SendQueue, Tx
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

Status = tuple[int, HStatus]  # (rc, hstatus) a tx ends with (errmap.py)

CONTROL, BULK_IN, BULK_OUT, ANY = (wire.SOCKLND_CONN_CONTROL, wire.SOCKLND_CONN_BULK_IN,
                                   wire.SOCKLND_CONN_BULK_OUT, wire.SOCKLND_CONN_ANY)
TYPE_NAMES = {ANY: "any", CONTROL: "control", BULK_IN: "bulk_in", BULK_OUT: "bulk_out"}
#: socklnd_modparams.c ``min_bulk``: the smallest "large" message (headers included).
MIN_BULK = 1 << 10
#: socklnd.h SOCKNAL_MAX_RETRIES: lost races before settling for what is connected.
SOCKNAL_MAX_RETRIES = 3
#: A peer holds at most this many x conns_per_peer connections (issue 11: bounded input).
MAX_CONNS_FACTOR = 3
_NO, _MAY, _YES = 0, 1, 2


class Verdict(enum.Enum):
    ACCEPT = "accept"
    RACE = "connection race resolution"  # EALREADY
    DUPLICATE = "duplicate"
    TOO_MANY = "too many connections from that peer"


@dataclass(eq=False, slots=True)
class Conn:
    """One established connection (``struct ksock_conn``) as the table sees it."""

    ni: NID
    peer_nid: NID
    peer_ip: str
    ctype: int
    incarnation: int
    active: bool
    framer: KsockConnection
    now: float
    sendq: SendQueue = field(default_factory=SendQueue)
    last_post: int = 0  # ksnc_tx_last_post, as a sequence number
    last_tx: float = 0.0  # last send progress (ksnc_tx_deadline - timeout)
    last_rx: float = 0.0  # last byte received (ksnc_rx_deadline - timeout)
    last_outq: int = 0
    last_acked: int = 0
    closed: bool = False
    io: Any = None  # the driver's per-connection state

    def __post_init__(self) -> None:
        self.last_tx = self.last_rx = self.now

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.ctype, str(self.ctype))

    @property
    def inflight(self) -> Tx | None:
        """The tx partly written (posted), if any."""
        return self.sendq.posted


@dataclass(eq=False, slots=True)
class Peer:
    """One (local NI, peer NID) pair (``struct ksock_peer_ni`` + its ``ksock_conn_cb``)."""

    ni: NID
    nid: NID
    queue: deque[Tx] = field(default_factory=deque)
    conns: list[Conn] = field(default_factory=list)
    connector: Any = None  # the driver's running connector (ksnr_scheduled)
    retry_at: float = 0.0  # no new connector before (ksnr_timeout)
    ealready: int = 0  # races lost in a row (ksnr_retry_count)
    #: ``ksnp_conn_cb``: this side connects to the peer. Made when a send finds no peer
    #: (``ksocknal_launch_packet`` -> ``ksocknal_add_peer``); a peer made by an accept has
    #: none, sends on the peer's connections and never connects (unlinked with its last one)
    conn_cb: bool = False

    @property
    def connecting(self) -> bool:
        return self.connector is not None

    @property
    def conn(self) -> Conn | None:
        """The first connection (the only one when untyped with conns_per_peer 1)."""
        return self.conns[0] if self.conns else None


@dataclass(slots=True)
class Closed:
    """What closing connections means (``ksocknal_close_conn_locked`` +
    ``ksocknal_terminate_conn``): the driver closes their sockets, tells LNet the peer NI is
    dead if ``dead`` (before failing the txs, so the resends see it), fails each tx with its
    status, and reports each connection down."""

    conns: list[Conn]
    failed: list[tuple[Tx, Status]]
    dead: bool


class ConnTable:
    """Every peer of one socklnd and the decisions about their connections."""

    def __init__(self, *, typed: bool = True, min_bulk: int = MIN_BULK) -> None:
        self.typed = typed
        self.min_bulk = min_bulk
        self.peers: dict[tuple[NID, NID], Peer] = {}
        self.conns_per_peer: dict[NID, int] = {}  # per local NI (lnd_conns_per_peer)
        self.handshakes: dict[str, int] = {}  # in progress, per source address
        self.incarnations: dict[NID, int] = {}  # last incarnation seen per peer NID
        self._posts = 0

    # --- peers and types ----------------------------------------------------------------
    def peer(self, ni: NID, nid: NID) -> Peer:
        p = self.peers.get((ni, nid))
        if p is None:
            p = self.peers[(ni, nid)] = Peer(ni, nid)
        return p

    def max_conns(self, ni: NID) -> int:
        """conns_per_peer of ``ni`` (``ksnr_max_conns``)."""
        return self.conns_per_peer.get(ni, 1)

    def count(self, p: Peer, ctype: int) -> int:
        return sum(1 for c in p.conns if c.ctype == ctype)

    def wanted_type(self, p: Peer) -> int | None:
        """``ksocknal_connect``: the type to connect next, None when all are connected."""
        cpp = self.max_conns(p.ni)
        if not self.typed:
            return ANY if self.count(p, ANY) < cpp else None
        if self.count(p, CONTROL) < 1:  # one control connection per peer
            return CONTROL
        bi, bo = self.count(p, BULK_IN), self.count(p, BULK_OUT)
        if bi < cpp and bi <= bo:
            return BULK_IN
        if bo < cpp:
            return BULK_OUT
        return BULK_IN if bi < cpp else None

    def wants_connector(self, p: Peer, now: Callable[[], float]) -> bool:
        """``ksocknal_find_connectable_conn_cb_locked``: launch a connector now? Never for a
        peer without a ``conn_cb`` (only accepted connections); always when
        nothing is connected (each send tries again, as ksocklnd's first attempt does);
        otherwise for missing types once the retry interval has passed."""
        cpp = self.max_conns(p.ni)
        if not p.conn_cb or p.connecting or len(p.conns) >= (1 + 2 * cpp if self.typed else cpp):
            return False  # (the common case, checked first: every type connected)
        if self.wanted_type(p) is None:
            return False
        return not p.conns or now() >= p.retry_at

    # --- choosing a connection ----------------------------------------------------------
    def _match(self, ctype: int, nob: int) -> int:
        if ctype == ANY:
            return _YES
        if ctype == BULK_OUT:
            return _MAY if nob < self.min_bulk else _YES
        if ctype == CONTROL:
            return _MAY if nob >= self.min_bulk else _YES
        return _NO  # BULK_IN (SOCKLND_CONN_ACK) carries only ZC-ACK noops

    def choose(self, p: Peer, msg_len: int) -> Conn | None:
        """``ksocknal_find_conn_locked``: the connection for a message of ``msg_len``."""
        conns = p.conns
        if len(conns) == 1 and conns[0].ctype == ANY:
            return conns[0]
        nob = wire.LNET_FRAME_HEAD + msg_len
        best: Conn | None = None
        best_key = (-1, 0, 0)
        for c in conns:
            m = self._match(c.ctype, nob)
            if m == _NO:
                continue
            key = (m, -c.sendq.nob, -c.last_post)
            if best is None or key > best_key:
                best, best_key = c, key
        if best is not None:
            self._posts += 1
            best.last_post = self._posts
        return best

    # --- establishing -------------------------------------------------------------------
    def passive_verdict(self, p: Peer, ctype: int) -> Verdict:
        """``ksocknal_create_conn`` (passive, after the stale check): race, duplicate, limit."""
        if p.connecting and p.nid < p.ni:
            return Verdict.RACE
        return self.active_verdict(p, ctype)

    def active_verdict(self, p: Peer, ctype: int) -> Verdict:
        """``ksocknal_create_conn``: refuse a duplicate (a type already at conns_per_peer)
        and anything past the per-peer bound."""
        cpp = self.max_conns(p.ni)
        # "Refuse to duplicate an existing connection, unless this is a loopback connection"
        # (ksocknal_create_conn): a node's own NID reached from that NID (LNet sends to its own
        # NIDs through the LND) holds the active and the passive end of each connection
        loopback = p.ni == p.nid
        if not loopback and self.count(p, ctype) >= (1 if ctype == CONTROL else cpp):
            return Verdict.DUPLICATE
        if len(p.conns) >= MAX_CONNS_FACTOR * cpp * (2 if loopback else 1):
            return Verdict.TOO_MANY
        return Verdict.ACCEPT

    def attach(self, p: Peer, c: Conn) -> tuple[bool, bool]:
        """Add ``c`` to ``p``. Returns whether LNet hears the peer NI is alive (its first
        connection) and whether with ``reset`` (an incarnation other than the last one
        seen: it rebooted)."""
        first = not p.conns
        p.conns.append(c)
        p.ealready = 0
        last = self.incarnations.get(p.nid)
        self.incarnations[p.nid] = c.incarnation
        return first, first and last is not None and last != c.incarnation

    def take(self, p: Peer, c: Conn) -> list[Tx]:
        """The waiting txs ``c`` carries, in order (``ksocknal_create_conn``: "Take packets
        blocking for this connection")."""
        head = wire.LNET_FRAME_HEAD
        keep: deque[Tx] = deque()
        taken: list[Tx] = []
        for tx in p.queue:
            (taken if self._match(c.ctype, head + len(tx.payload)) != _NO else keep).append(tx)
        p.queue = keep
        return taken

    @staticmethod
    def drain(p: Peer) -> list[Tx]:
        """The txs waiting for a connection *now* (a resend LNet queues while they fail
        waits for a new attempt)."""
        txs = list(p.queue)
        p.queue.clear()
        return txs

    def close(self, p: Peer | None, conns: list[Conn], queued: Status,
              posted: Status | None = None, *, peer_failed: bool = True,
              connector_idle: bool = True) -> Closed:
        """Close ``conns`` of ``p``: posted txs end with ``posted`` (default ``queued``),
        queued ones with ``queued``, and with the last connection the peer's waiting txs
        too. The peer NI is dead (``ksocknal_peer_failed``) unless the close is local
        (``peer_failed=False``) or a connection or another connect attempt remains."""
        dead = [c for c in conns if not c.closed]
        posted_txs: list[Tx] = []
        queued_txs: list[Tx] = []
        for c in dead:
            c.closed = True
            if p is not None:
                self.detach(p, c)
            first, rest = c.sendq.clear()
            posted_txs += [first] if first is not None else []
            queued_txs += rest
        notify = False
        if p is not None and dead and not p.conns:
            notify = peer_failed and connector_idle
            queued_txs += self.drain(p)
        failed = [(tx, posted or queued) for tx in posted_txs]
        failed += [(tx, queued) for tx in queued_txs]
        return Closed(dead, failed, notify)

    def detach(self, p: Peer, c: Conn) -> None:
        if c in p.conns:
            p.conns.remove(c)

    def begin_handshake(self, ip: str, limit: int) -> bool:
        """Count a passive handshake from ``ip``; False (refuse it) past ``limit``."""
        n = self.handshakes.get(ip, 0)
        if n >= limit:
            return False
        self.handshakes[ip] = n + 1
        return True

    def end_handshake(self, ip: str) -> None:
        n = self.handshakes.get(ip, 0) - 1
        if n > 0:
            self.handshakes[ip] = n
        else:
            self.handshakes.pop(ip, None)

    # --- timeouts -----------------------------------------------------------------------
    def stale_txs(self, p: Peer, now: float) -> list[Tx]:
        """``ksocknal_flush_stale_txs``: txs of a peer without connections that waited past
        their deadline (stopping at the first still in time)."""
        out: list[Tx] = []
        if not p.conns:
            while p.queue and p.queue[0].deadline <= now:
                out.append(p.queue.popleft())
        return out

    @staticmethod
    def rx_stalled(c: Conn, now: float, timeout: float) -> bool:
        """A frame begun and no byte of it for ``timeout`` ("Timeout receiving")."""
        return c.framer.rx_pending > 0 and now - c.last_rx >= timeout

    @staticmethod
    def tx_stalled(c: Conn, now: float, timeout: float, outq: int, acked: int | None,
                   retransmitting: bool) -> bool:
        """Data to send and no progress for ``timeout`` ("Timeout sending data"). Progress
        is the socket's send queue (SIOCOUTQ) shrinking or ``tcpi_bytes_acked`` moving; a
        connection the kernel is retransmitting on is TCP_USER_TIMEOUT's for up to twice the
        timeout (a peer that acknowledges but does not read is ours)."""
        busy = len(c.sendq) > 0 or outq > 0
        if not busy or outq < c.last_outq:
            c.last_tx = now
        c.last_outq = outq
        if acked is not None and acked != c.last_acked:
            c.last_acked = acked
            c.last_tx = now
        stale = now - c.last_tx
        if busy and stale < 2 * timeout and retransmitting:
            return False
        return busy and stale >= timeout


__all__ = ["ANY", "BULK_IN", "BULK_OUT", "CONTROL", "MAX_CONNS_FACTOR", "MIN_BULK",
           "SOCKNAL_MAX_RETRIES", "TYPE_NAMES", "Closed", "Conn", "ConnTable", "Peer", "Status",
           "Verdict"]
