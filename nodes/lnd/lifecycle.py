"""The life of established connections: up, down, what their txs end with, and timeouts.

Theory of operation: ``Lifecycle`` carries out what ``conntable.py`` decides, with
``connio.py`` moving the bytes, and is the only place that calls the node's callbacks
(``on_rx``, ``on_tx_done``, ``on_conn``, ``on_notify``), each guarded so a raising callback
cannot break the LND.

* Up (``establish``, the tail of ``ksocknal_create_conn``): stale connections of another
  incarnation close first; a duplicate (or one past the per-peer bound) is dropped; the
  connection joins the table, the loop watches its socket in this same call, it takes the
  txs waiting for it, and LNet hears the peer NI is alive with its first connection
  (``reset`` when the incarnation changed: it rebooted).
* Down (``close``, ``ksocknal_close_conn_locked`` + ``ksocknal_terminate_conn``): sockets
  closed, LNet told the peer NI is dead when that applies (before the txs fail, so their
  resends see it), every tx failed with its status (``errmap.py``), each connection reported
  down. ``failed`` is ``ksocknal_close_conn_and_siblings``: an error on one connection closes
  every connection of that peer; a clean EOF only its own.
* Batches: the frames of one read and the txs one write completed reach the node as one
  batch: ``on_batch(True)`` before the first callback, ``on_batch(False)`` after the last, so
  the node may carry out the engine's actions once per batch (``NodeDriver.hold``).
* Timeouts (``timed_out``, ``ksocknal_find_timed_out_conn``, once a tick): "Timeout
  receiving" (a frame begun, nothing more for the timeout: up to 1 MiB held) closes the
  peer's connections as an error (-EIO, LOCAL_ERROR) and reports the peer NI dead; "Timeout
  sending data" fails the posted tx as NETWORK_TIMEOUT and the rest as LOCAL_TIMEOUT.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno as E
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from nodes.lnd import handshake, wire
from nodes.lnd.connio import ConnIO
from nodes.lnd.conntable import Conn, ConnTable, Peer, Status, Verdict
from nodes.lnd.errmap import FAILURES, close_error, connect_failure, transmit_hstatus
from nodes.lnd.framing import Event, LNetMessageReceived, Payload
from nodes.lnd.ratelimit import RateLimitedLog
from nodes.lnd.sendq import Tx
from nodes.lnet.hdr import LNetHdr
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

_log = logging.getLogger("lnet.socklnd")
_CLOSED = FAILURES["conn_closed"]
RX_TIMEOUT = "rx timeout"  # the rate-limited log's kind for "Timeout receiving"


@dataclass(init=False, slots=True)
class RxMsg:
    """One received LNET message, as handed to the engine (not frozen: a frozen
    dataclass sets each field through ``object.__setattr__``, ~3x the cost, per frame; its
    ``__init__`` written out: compiled, where the dataclass one would run as Python)."""

    ni: NID
    peer_nid: NID
    peer_ip: str
    hdr: LNetHdr
    payload: Payload

    def __init__(self, ni: NID, peer_nid: NID, peer_ip: str, hdr: LNetHdr,
                 payload: Payload) -> None:
        self.ni, self.peer_nid, self.peer_ip, self.hdr = ni, peer_nid, peer_ip, hdr
        self.payload = payload


class Lifecycle:
    """Connections up and down, tx completions and the node's callbacks."""

    def __init__(self, table: ConnTable, *, on_rx: Callable[[RxMsg], None],
                 on_tx_done: Callable[[int, int, HStatus], None],
                 on_conn: Callable[[str, NID, NID, str], None] | None,
                 on_notify: Callable[[NID, NID, bool, bool], None] | None,
                 timeout_of: Callable[[NID], float], live: Callable[[Peer], bool],
                 refusals: RateLimitedLog,
                 on_batch: Callable[[bool], None] | None = None) -> None:
        self._table = table
        self._on_batch = on_batch
        self._on_rx, self._on_tx_done = on_rx, on_tx_done
        self._on_conn, self._on_notify = on_conn, on_notify
        self._timeout_of, self._live = timeout_of, live
        self._refusals = refusals
        self._io = ConnIO(deliver=self.deliver, completed=self.completed, failed=self.failed)

    @staticmethod
    def _loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def hold_writes(self) -> None:
        """``ConnIO.hold``: txs queued until ``release_writes`` are written by it."""
        self._io.hold()

    def release_writes(self) -> None:
        self._io.release()

    def queue(self, c: Conn, tx: Tx) -> None:
        """Queue ``tx`` on ``c`` (``ksocknal_queue_tx_locked``)."""
        self._io.queue(c, tx)

    def call_tx_done(self, tx_id: int, rc: int, hstatus: HStatus) -> None:
        try:
            self._on_tx_done(tx_id, rc, hstatus)
        except Exception:
            _log.exception("on_tx_done(%d) raised", tx_id)

    def done(self, tx: Tx, rc: int, hstatus: HStatus) -> None:
        if not tx.done:
            tx.done = True
            self.call_tx_done(tx.tx_id, rc, hstatus)

    def fail(self, txs: Iterable[Tx], status: Status) -> None:
        """``ksocknal_txlist_done``."""
        for tx in txs:
            self.done(tx, *status)

    def _batch(self, begin: bool) -> None:
        if self._on_batch is not None:
            try:
                self._on_batch(begin)
            except Exception:
                _log.exception("on_batch raised")

    def completed(self, c: Conn, txs: list[Tx]) -> None:
        """The txs one write finished, as one batch (``on_batch``)."""
        self._batch(True)
        try:
            on_tx_done, ok = self._on_tx_done, HStatus.OK
            for tx in txs:  # ``done`` inlined: once per message sent
                if not tx.done:
                    tx.done = True
                    try:
                        on_tx_done(tx.tx_id, 0, ok)
                    except Exception:
                        _log.exception("on_tx_done(%d) raised", tx.tx_id)
        finally:
            self._batch(False)

    def deliver(self, c: Conn, events: list[Event]) -> None:
        """The frames of one read (or one slice of it), as one batch (``on_batch``)."""
        self._batch(True)
        try:
            for ev in events:
                if type(ev) is LNetMessageReceived:
                    try:
                        self._on_rx(RxMsg(c.ni, c.peer_nid, c.peer_ip, ev.hdr, ev.payload))
                    except Exception:
                        _log.exception("on_rx raised")
        finally:
            self._batch(False)

    def _notify(self, ni: NID, nid: NID, alive: bool, reset: bool = False) -> None:
        if self._on_notify is not None:
            try:
                self._on_notify(ni, nid, alive, reset)
            except Exception:
                _log.exception("on_notify raised")

    def _conn_event(self, event: str, c: Conn, reason: str) -> None:
        if self._on_conn is not None:
            try:
                self._on_conn(event, c.ni, c.peer_nid, reason)
            except Exception:
                _log.exception("on_conn raised")

    def establish(self, p: Peer, hs: handshake.Handshake, active: bool) -> None:
        """``ksocknal_create_conn``'s tail: the connection joins the table and the loop
        watches its socket in this same call."""
        inc, ctype = hs.hello.src_incarnation, wire.invert_ctype(hs.hello.ctype)
        self.close_stale(p, inc)
        verdict = self._table.active_verdict(p, ctype)
        if verdict is not Verdict.ACCEPT or not self._live(p):
            _log.debug("socklnd: %s -> %s: %s", p.ni, p.nid, verdict.value)
            hs.sock.close()  # lost to a connection established meanwhile, or NI gone
            return
        c = Conn(p.ni, p.nid, hs.peer_ip, ctype, inc, active, hs.framer, self._loop().time())
        alive, reset = self._table.attach(p, c)
        self._io.attach(c, hs.sock)
        self.set_user_timeout(c)
        self._conn_event("up", c, f"{'active' if active else 'passive'} {c.type_name}")
        if alive:
            self._notify(p.ni, p.nid, True, reset)
        if hs.framer.error is None:  # else the txs wait: feed() closes c, failing them
            for tx in self._table.take(p, c):
                self._io.queue(c, tx)
        self._io.feed(c, hs.early)

    def close_stale(self, p: Peer, incarnation: int) -> None:
        """The peer rebooted: its connections of another incarnation are stale."""
        self.close(p, [c for c in p.conns if c.incarnation != incarnation],
                    "stale: peer incarnation changed", _CLOSED, None, False)

    def connect_failed(self, p: Peer, rc: int) -> None:
        """``ksocknal_connect`` failed with nothing connected: LNet hears the peer NI is
        dead, then the waiting txs fail (``ksocknal_txlist_done``)."""
        if p.connector is None or p.connector is asyncio.current_task():
            self._notify(p.ni, p.nid, False)
        self.fail(self._table.drain(p), connect_failure(rc))

    def failed(self, c: Conn, why: str, err: int | None) -> None:
        """A connection failed (``ksocknal_close_conn_and_siblings``); a clean EOF closes
        only itself. A write failing with ETIMEDOUT is REMOTE_TIMEOUT for its posted tx.
        A clean EOF is closed with error 0 (socklnd_cb.c ``ksocknal_process_receive``), so
        ``ksnp_error`` stays 0 and ``ksocknal_terminate_conn`` never calls
        ``ksocknal_peer_failed``: LNet is not told the peer NI died (LU-20023); the txs it
        takes down fail as on any close, and their health check lowers the peer NI."""
        p = self._table.peers.get((c.ni, c.peer_nid))
        protocol = why.startswith("protocol error")
        if protocol:
            _log.error("socklnd: %s from %s (%s)", why, c.peer_nid, c.peer_ip)
        error = close_error(err, protocol) != 0
        conns = p.conns if p is not None and error else [c]
        self.close(p, conns, why, _CLOSED, (-E.EIO, transmit_hstatus(err)), peer_failed=error)

    def close(self, p: Peer | None, conns: list[Conn], reason: str, queued: Status,
               posted: Status | None = None, peer_failed: bool = True) -> int:
        """Close ``conns`` of ``p`` (``ConnTable.close`` says what that means): returns how
        many were closed."""
        idle = p is None or p.connector is None or p.connector is asyncio.current_task()
        res = self._table.close(p, conns, queued, posted, peer_failed=peer_failed,
                                connector_idle=idle)
        for c in res.conns:
            with contextlib.suppress(Exception):
                c.framer.close()
            self._io.detach(c)
        if res.dead and p is not None:
            self._notify(p.ni, p.nid, False)
        for tx, status in res.failed:
            self.done(tx, *status)
        for c in res.conns:
            _log.info("socklnd: connection %s -> %s (%s) %s down: %s", c.ni, c.peer_nid,
                      c.peer_ip, c.type_name, reason)
            self._conn_event("down", c, reason)
        return len(res.conns)

    def set_user_timeout(self, c: Conn) -> None:
        """``TCP_USER_TIMEOUT``: TCP gives up on unacknowledged data two monitor ticks after
        the LND timeout, so the monitor still sees zero-window stalls first."""
        ConnIO.set_user_timeout(c, self._timeout_of(c.ni) + 2 * self._tick(c.ni))

    def _tick(self, ni: NID) -> float:
        """How often the monitor looks at ``ni``'s connections."""
        return min(1.0, self._timeout_of(ni) / 4)

    def timed_out(self, p: Peer, c: Conn, now: float) -> bool:
        """``ksocknal_find_timed_out_conn`` for ``c``; closes its peer's conns if so."""
        timeout = self._timeout_of(c.ni)
        if self._table.rx_stalled(c, now, timeout):
            self._refusals.log(now, logging.ERROR, RX_TIMEOUT,
                              f"socklnd: Timeout receiving from {c.peer_nid} ({c.peer_ip}), "
                              f"{c.framer.rx_pending} bytes of a frame held")
            self.close(p, p.conns, "Timeout receiving from peer", _CLOSED)
            return True
        if self._table.tx_stalled(c, now, timeout, *ConnIO.probe(c)):
            _log.error("socklnd: timeout sending data to %s (%s); the network or that node "
                       "may be down", c.peer_nid, c.peer_ip)
            # posted tx: network timeout; not yet posted: local timeout (seed 003 hlth-lnd-*)
            self.close(p, p.conns, "timeout sending data", FAILURES["unposted_timeout"],
                        FAILURES["posted_timeout"])
            return True
        return False


__all__ = ["RX_TIMEOUT", "Lifecycle", "RxMsg"]
