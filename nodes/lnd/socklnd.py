"""socklnd: the asyncio driver around ``framing.KsockConnection`` (aioquic ``protocol.py`` style).

Theory of operation: one acceptor socket per local address on ``ip:port`` (988,
``lnet_acceptor``), shared by every NI on that address (refcounted: it closes with the last of
them); the connreq's NID picks the NI (``lnet_accept``), and a connreq for a NID no NI has is
refused ("No matching NI", -EPERM: closed without a reply). One
TCP connection per (local NI, peer NID) pair, of type SOCKLND_CONN_ANY — i.e. ksocklnd with
``typed_conns=0`` and ``conns_per_peer=1``, so no CONTROL/BULK_IN/BULK_OUT split. A connection
is made on demand by ``send`` (``ksocknal_launch_packet`` → ``ksocknal_connect``), bound to the
NI's IP and, like ``lnet_connect``, to a reserved source port 1023..512 (falling back to an
ephemeral port without CAP_NET_BIND_SERVICE; the passive side does not treat such a peer as a
userspace process). A connection accepted from a peer carries our sends to that peer too. When
both sides connect at once, ``ksocknal_create_conn``'s race resolution applies: the passive side
refuses (hello with ctype SOCKLND_CONN_NONE) when it is itself connecting and the peer's NID is
lower, and refuses a duplicate of an established connection unless the peer's incarnation
changed (then the stale connection is closed, ``ksocknal_close_peer_stale_conns``); the refused
active side sees EALREADY and waits for the winning connection. Messages on a pair go out in
FIFO order. No threads; sockets are non-blocking and driven with ``loop.sock_*``.

Every ``send`` ends in exactly one ``on_tx_done(tx_id, rc, hstatus)``. The audit against
ksocklnd (spec §3.7; seed 003 hlth-lnd-*; socklnd_cb.c/socklnd.c); a tx is *posted* once its
frame was handed to the connection's transport, and *complete* once all of it is in the kernel
(``tx_resid == 0``); the transport buffers at most one posted tx (write high-water mark 0), as
the kernel has at most one partly written tx per connection:

==========================================  ============  ================  ====================
failure                                     rc            hstatus           real code
==========================================  ============  ================  ====================
frame fully in the kernel (no zero-copy)    0             OK                ksocknal_tx_done
connect refused (nobody on port 988)        -ECONNREFUSED REMOTE_DROPPED    ksocknal_connect ->
                                                                            txlist_done
connect: no route / link down / reset       -ENETUNREACH, REMOTE_DROPPED    (same)
                                            -EHOSTUNREACH,
                                            -ENETDOWN,
                                            -ECONNRESET
connect/handshake failed otherwise          -errno        LOCAL_ERROR       (same)
(EADDRNOTAVAIL, EPROTO, ECONNABORTED...)
connect not done within the NI's timeout    -ETIMEDOUT    LOCAL_TIMEOUT (*) ksocknal_connect
                                                                            deadline
tx waited the timeout for a connection      -ETIMEDOUT    LOCAL_TIMEOUT (*) ksocknal_flush_stale_txs
send queue made no progress for the         posted tx:    NETWORK_TIMEOUT   ksocknal_find_timed_
timeout (SIOCOUTQ not draining): conn       -ETIMEDOUT                      out_conn (o2iblnd's
closed                                      queued txs:   LOCAL_TIMEOUT (*) kiblnd_abort_txs split
                                            -ETIMEDOUT                      for queued vs posted)
reset by peer / EOF / protocol error /      -EIO          LOCAL_ERROR       close_conn_locked ->
stale incarnation: conn closed; posted and                                  process_transmit
queued txs                                                                  (-ESHUTDOWN) ->
                                                                            tx_done(resid != 0)
socket error ETIMEDOUT (TCP gave up, see   -EIO          REMOTE_TIMEOUT    ksocknal_process_
below): the posted tx                                                       transmit
carrier loss on the NI's interface          -ENETDOWN     REMOTE_DROPPED    ksocknal_del_peer
(``link_down``): conns of the NI and conns                                  (txlist_done
routed over that interface closed, posted                                   -ENETDOWN); snd-085
and queued txs; later sends on the NI
shutdown_ni / close                         -ECONNABORTED LOCAL_ABORTED     this API (ksocklnd:
                                                                            -ENETDOWN)
send on an NI that is not started           -ENETDOWN     LOCAL_ABORTED     this API
payload length wrong or > LNET_MTU          -EINVAL       LOCAL_ERROR       caller bug
==========================================  ============  ================  ====================

(*) Seed 003 (hlth-lnd-local-timeout, hlth-lnd-network-timeout) separates a *local
timeout* (timed out before it was posted) from a *network timeout* (posted, not completed), as
o2iblnd does; today's ksocklnd reports NETWORK_TIMEOUT for both. We follow the seed
(docs/differences.md): LOCAL_TIMEOUT is resendable on another NI, NETWORK_TIMEOUT is not
(spec §3.2). Each NI has its own timeout (``lnetctl net set --net N --lnd-timeout S``; seed 003
hlth-lnd-tx-timeout-from-lnet).

TCP gives up too (hlth-lnd-remote-timeout): every established socket carries
``TCP_USER_TIMEOUT`` = the NI's timeout + two monitor ticks, so data the peer never
acknowledges aborts the connection with ETIMEDOUT, which ``ksocknal_process_transmit`` reports
as REMOTE_TIMEOUT for the tx being written. While the kernel is retransmitting unacknowledged
data (``tcpi_retransmits``) the progress monitor leaves that connection to it; a peer that
acknowledges but does not read (zero window) is the monitor's (NETWORK_TIMEOUT), as is any
stall the kernel has not resolved by twice the timeout.

Peer NI aliveness goes up to LNet through ``on_notify(ni, peer_nid, alive, reset)``
(``lnet_notify``, seed 002 rtr-mr-lnd-notify): dead when a connection attempt failed or a
connection closed on an error and no connection or attempt to that peer NI remains
(``ksocknal_peer_failed``); alive when a connection is established, with ``reset`` when the
peer's incarnation differs from the last one seen (it rebooted: its health history is void).
LNet's "peer NI dead" call (``lnd_notify_peer_down`` = ``ksocknal_notify_gw_down``, seed 002
rtr-mr-notify-dead) is ``notify_peer_down``: every connection to that NID is closed and what
it held fails with -ENETDOWN / REMOTE_DROPPED, so LNet resends it on another path.

Received LNET messages go to ``on_rx``; NOOPs are ignored. A bad connreq/hello (wrong NID,
protocol) refuses just that connection with a log line; a WireProtocolError on an established
connection closes just that connection (``on_conn("down", ...)``); the LND keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno as E
import fcntl
import ipaddress
import logging
import socket
import struct
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from nodes.lnd import wire
from nodes.lnd.errmap import FAILURES, connect_failure, transmit_hstatus
from nodes.lnd.errmap import txlist_hstatus as txlist_hstatus  # re-exported (tests)
from nodes.lnd.framing import (
    ConnreqReceived,
    Event,
    HelloReceived,
    KsockConnection,
    LNetMessageReceived,
)
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_MTU, LNET_PID_LUSTRE, LNetHdr
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

_log = logging.getLogger("lnet.socklnd")
_CLOSED = FAILURES["conn_closed"]
#: linux/sockios.h SIOCOUTQ (== TIOCOUTQ): bytes not yet acknowledged by the peer
SIOCOUTQ = 0x5411
_RECV_CHUNK = 1 << 16


def _tcp_state(sock: socket.socket) -> tuple[bool, int | None]:
    """(``tcpi_retransmits`` > 0, ``tcpi_bytes_acked``) from struct tcp_info: retransmitting
    means the peer never acknowledged some data (zero-window probes do not count), so
    TCP_USER_TIMEOUT will end a dead path; bytes acked moving is progress the SIOCOUTQ
    sampling cannot see while the send queue is refilled. (Not ``tcpi_last_ack_recv``: the
    ACKs of zero-window probes refresh it while nothing moves.)"""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 128)
    except OSError:
        return False, None
    if len(info) < 128:
        return len(info) > 2 and info[2] > 0, None
    return info[2] > 0, struct.unpack_from("Q", info, 120)[0]


@dataclass(frozen=True, slots=True)
class RxMsg:
    """One received LNET message, as handed to the engine."""

    ni: NID
    peer_nid: NID
    peer_ip: str
    hdr: LNetHdr
    payload: bytes


@dataclass(eq=False, slots=True)
class _Tx:
    tx_id: int
    hdr: LNetHdr
    payload: bytes
    deadline: float
    done: bool = False


def _set_event() -> asyncio.Event:
    ev = asyncio.Event()
    ev.set()
    return ev


class _ConnProtocol(asyncio.Protocol):
    """Feeds an established connection's bytes to the socklnd, in order."""

    def __init__(self, lnd: SockLND, p: _Peer, c: _Conn) -> None:
        self.lnd, self.p, self.c = lnd, p, c

    def data_received(self, data: bytes) -> None:
        self.lnd._on_data(self.p, self.c, data)

    def eof_received(self) -> bool:
        self.lnd._close_conn(self.p, self.c, "peer closed the connection", *_CLOSED)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        why = f"connection lost: {exc}" if exc else "peer closed the connection"
        # ksocknal_process_transmit: a write failing with ETIMEDOUT (TCP gave up, see
        # TCP_USER_TIMEOUT) is REMOTE_TIMEOUT (seed 003 hlth-lnd-remote-timeout)
        posted = transmit_hstatus(exc.errno if isinstance(exc, OSError) else None)
        self.lnd._close_conn(self.p, self.c, why, *_CLOSED, posted=(-E.EIO, posted))

    def pause_writing(self) -> None:
        self.c.can_write.clear()

    def resume_writing(self) -> None:
        self.lnd._posted_complete(self.c)
        self.c.can_write.set()


@dataclass(eq=False, slots=True)
class _Conn:
    ni: NID
    peer_nid: NID
    peer_ip: str
    sock: socket.socket
    framer: KsockConnection
    incarnation: int
    last_progress: float
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    inflight: _Tx | None = None
    transport: asyncio.Transport | None = None
    can_write: asyncio.Event = field(default_factory=_set_event)
    last_outq: int = 0
    last_acked: int = 0  # tcpi_bytes_acked at the previous monitor tick
    closed: bool = False


@dataclass(eq=False, slots=True)
class _Peer:
    ni: NID
    nid: NID
    queue: deque[_Tx] = field(default_factory=deque)
    conn: _Conn | None = None
    connector: asyncio.Task[None] | None = None


@dataclass(eq=False, slots=True)
class _Listener:
    """The acceptor socket of one local address and the NIs it serves."""

    ip: str
    lsock: socket.socket
    nis: set[NID] = field(default_factory=set)
    accept_task: asyncio.Task[None] | None = None


@dataclass(eq=False, slots=True)
class _NetIf:
    ni: NID
    ip: str
    timeout: float | None = None  # None: the LND-wide default
    link_down: bool = False


class SockLND:
    """The socklnd of one node: NIs, their acceptors, and connections to peer NIs."""

    def __init__(self, *, on_rx: Callable[[RxMsg], None],
                 on_tx_done: Callable[[int, int, HStatus], None],
                 on_conn: Callable[[str, NID, NID, str], None] | None = None,
                 on_notify: Callable[[NID, NID, bool, bool], None] | None = None,
                 incarnation: int, pid: int = LNET_PID_LUSTRE, timeout: float = 50.0,
                 port: int = wire.LNET_ACCEPTOR_PORT) -> None:
        self._on_rx = on_rx
        self._on_tx_done = on_tx_done
        self._on_conn = on_conn
        self._on_notify = on_notify
        self._incarnations: dict[NID, int] = {}  # last incarnation seen per peer NID
        self._incarnation = incarnation
        self._pid = pid
        self._timeout = timeout
        self._port = port
        self._nis: dict[NID, _NetIf] = {}
        self._listeners: dict[str, _Listener] = {}  # by local IP
        self._peers: dict[tuple[NID, NID], _Peer] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._monitor: asyncio.Task[None] | None = None

    # --- public API ---------------------------------------------------------------------
    async def startup_ni(self, ni: NID, ip: str, timeout: float | None = None) -> None:
        """Start ``ni`` on ``ip``, opening the acceptor on ``ip:port`` unless another NI on
        that address already did. Raises OSError if it cannot bind.

        ``timeout`` is the NI's LND timeout (connect, stale tx and send progress); None uses
        the LND-wide one.
        """
        if ni in self._nis:
            raise OSError(E.EEXIST, f"NI {ni} already started")
        lis = self._listeners.get(ip)
        if lis is None:
            lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                lsock.bind((ip, self._port))
                lsock.listen(64)
                lsock.setblocking(False)
            except OSError:
                lsock.close()
                raise
            lis = self._listeners[ip] = _Listener(ip, lsock)
            lis.accept_task = self._spawn(self._accept_loop(lis))
        lis.nis.add(ni)
        self._nis[ni] = _NetIf(ni, ip, timeout=timeout)
        if self._monitor is None:
            self._monitor = self._spawn(self._monitor_loop())

    async def shutdown_ni(self, ni: NID) -> None:
        """Close every connection of ``ni`` (and the acceptor if no other NI is on its
        address); its pending txs are aborted."""
        netif = self._nis.pop(ni, None)
        if netif is None:
            return
        waits: list[asyncio.Task[None]] = []
        lis = self._listeners.get(netif.ip)
        if lis is not None:
            lis.nis.discard(ni)
            if not lis.nis:
                del self._listeners[netif.ip]
                if lis.accept_task is not None:
                    lis.accept_task.cancel()
                    waits.append(lis.accept_task)
                lis.lsock.close()
        for key, p in list(self._peers.items()):
            if p.ni != ni:
                continue
            if p.connector is not None:
                p.connector.cancel()
                waits.append(p.connector)
            if p.conn is not None:
                waits.extend(p.conn.tasks)
                self._close_conn(p, p.conn, "NI shutdown", *FAILURES["ni_shutdown"],
                                 peer_failed=False)
            self._fail_queue(p, *FAILURES["ni_shutdown"])
            del self._peers[key]
        await asyncio.gather(*waits, return_exceptions=True)

    def send(self, tx_id: int, ni: NID, peer: NID, hdr: LNetHdr, payload: bytes) -> None:
        """Queue one LNET message from ``ni`` to ``peer``; completes via ``on_tx_done``."""
        loop = asyncio.get_running_loop()
        netif = self._nis.get(ni)
        if netif is None:
            loop.call_soon(self._call_tx_done, tx_id, *FAILURES["ni_not_started"])
            return
        if netif.link_down:
            # lnet_connect binds to the NI's device: with its carrier gone the connect fails
            # at once, and ksocknal_connect reports -ENETDOWN as REMOTE_DROPPED (spec §3.7)
            loop.call_soon(self._call_tx_done, tx_id, *FAILURES["link_down"])
            return
        if len(payload) != hdr.payload_length or len(payload) > LNET_MTU:
            loop.call_soon(self._call_tx_done, tx_id, *FAILURES["bad_payload"])
            return
        p = self._peers.get((ni, peer))
        if p is None:
            p = self._peers[(ni, peer)] = _Peer(ni, peer)
        p.queue.append(_Tx(tx_id, hdr, payload, loop.time() + self.timeout_of(ni)))
        if p.conn is not None:
            p.conn.wake.set()
        elif p.connector is None:
            p.connector = self._spawn(self._connect(p))

    def set_timeout(self, seconds: float, ni: NID | None = None) -> None:
        """The LND timeout (connect, stale tx, send progress): LND-wide, or of one NI
        (``lnetctl net set --net N --lnd-timeout S``; seed 003 hlth-lnd-tx-timeout-from-lnet)."""
        if ni is None:
            self._timeout = seconds
        elif ni in self._nis:
            self._nis[ni].timeout = seconds
        for p in self._peers.values():
            if p.conn is not None and (ni is None or p.ni == ni):
                self._set_user_timeout(p.conn)

    def _tick(self, ni: NID) -> float:
        """How often the progress monitor looks at ``ni``'s connections."""
        return min(1.0, self.timeout_of(ni) / 4)

    def _set_user_timeout(self, c: _Conn) -> None:
        """``TCP_USER_TIMEOUT``: TCP gives up on unacknowledged data two monitor ticks after
        the LND timeout, so the monitor still sees zero-window stalls first."""
        ms = int((self.timeout_of(c.ni) + 2 * self._tick(c.ni)) * 1000)
        with contextlib.suppress(OSError):
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, ms)

    def timeout_of(self, ni: NID) -> float:
        netif = self._nis.get(ni)
        if netif is None or netif.timeout is None:
            return self._timeout
        return netif.timeout

    def link_down(self, ni: NID, subnet: ipaddress.IPv4Network | None = None) -> int:
        """Carrier loss on ``ni``'s interface (hlt-005/010, snd-080/085): returns #conns closed.

        Closes the NI's connections and those whose peer is on ``subnet`` (reached through
        that interface whatever NI they belong to); every posted or queued tx on them fails
        with -ENETDOWN / REMOTE_DROPPED (``ksocknal_del_peer``), so LNet resends it on another
        path. Until ``link_up``, sends on ``ni`` fail the same way at once.
        """
        netif = self._nis.get(ni)
        if netif is None:
            return 0
        netif.link_down = True
        closed = 0
        for p in list(self._peers.values()):
            routed = subnet is not None and ipaddress.ip_address(p.nid.ip) in subnet
            if p.ni != ni and not routed:
                continue
            if p.connector is not None:
                p.connector.cancel()
                p.connector = None
            if p.conn is not None:
                closed += 1
                self._close_conn(p, p.conn, "link down", *FAILURES["link_down"])
            self._fail_queue(p, *FAILURES["link_down"])
        return closed

    def notify_peer_down(self, nid: NID) -> int:
        """``ksocknal_notify_gw_down``: LNet says peer NI ``nid`` is dead (seed 002
        rtr-mr-notify-dead); close every connection to it. Returns #conns closed."""
        closed = 0
        for p in list(self._peers.values()):
            if p.nid == nid and p.conn is not None:
                closed += 1
                self._close_conn(p, p.conn, "LNet: peer NI dead", *FAILURES["peer_down"],
                                 peer_failed=False)
        _log.warning("socklnd: LNet notified peer NI %s dead: %d connection(s) closed", nid,
                     closed)
        return closed

    def link_up(self, ni: NID) -> None:
        """Carrier back on ``ni``'s interface: it connects again on demand."""
        netif = self._nis.get(ni)
        if netif is not None:
            netif.link_down = False

    async def close(self) -> None:
        """Shut every NI down and stop all tasks."""
        for ni in list(self._nis):
            await self.shutdown_ni(ni)
        if self._monitor is not None:
            self._monitor.cancel()
            await asyncio.gather(self._monitor, return_exceptions=True)
            self._monitor = None
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- completion and callbacks ------------------------------------------------------
    def _call_tx_done(self, tx_id: int, rc: int, hstatus: HStatus) -> None:
        try:
            self._on_tx_done(tx_id, rc, hstatus)
        except Exception:
            _log.exception("on_tx_done(%d) raised", tx_id)

    def _done(self, tx: _Tx, rc: int, hstatus: HStatus) -> None:
        if not tx.done:
            tx.done = True
            self._call_tx_done(tx.tx_id, rc, hstatus)

    def _fail_queue(self, p: _Peer, rc: int, hstatus: HStatus) -> None:
        """``list_splice_init`` + ``ksocknal_txlist_done``: fail what is queued *now*; a tx
        LNet resends meanwhile (a resend to the same peer NI) waits for a new attempt."""
        txs, p.queue = p.queue, deque()
        for tx in txs:
            self._done(tx, rc, hstatus)

    def _notify(self, ni: NID, nid: NID, alive: bool, reset: bool = False) -> None:
        if self._on_notify is None:
            return
        try:
            self._on_notify(ni, nid, alive, reset)
        except Exception:
            _log.exception("on_notify raised")

    def _peer_failed(self, p: _Peer) -> None:
        """``ksocknal_peer_failed``: dead only if no connection or attempt remains."""
        if p.conn is None and (p.connector is None or p.connector is asyncio.current_task()):
            self._notify(p.ni, p.nid, False)

    def _conn_event(self, event: str, c: _Conn, reason: str) -> None:
        if self._on_conn is None:
            return
        try:
            self._on_conn(event, c.ni, c.peer_nid, reason)
        except Exception:
            _log.exception("on_conn raised")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("socklnd task failed", exc_info=task.exception())

    # --- active side: ksocknal_connect / lnet_connect ---------------------------------
    async def _connect(self, p: _Peer) -> None:
        backoff = 0.05
        try:
            while (p.queue and p.conn is None and p.ni in self._nis
                   and self._peers.get((p.ni, p.nid)) is p):
                try:
                    async with asyncio.timeout(self.timeout_of(p.ni)):
                        won = await self._attempt(p)
                except WireProtocolError as exc:
                    _log.error("socklnd: bad hello from %s: %s", p.nid, exc)
                    rc = -E.EPROTO
                except OSError as exc:  # includes TimeoutError from our deadline
                    rc = -(exc.errno or E.ETIMEDOUT)
                    _log.warning("socklnd: connect %s -> %s failed: rc = %d", p.ni, p.nid, rc)
                else:
                    if won:
                        return
                    # EALREADY: lost the race; the peer's connection will carry the queue
                    await asyncio.sleep(backoff)
                    backoff = min(2 * backoff, 1.0)
                    continue
                self._peer_failed(p)
                self._fail_queue(p, *connect_failure(rc))
                # txs queued while those failed (LNet's resends) get a fresh attempt
        finally:
            if p.connector is asyncio.current_task():
                p.connector = None

    async def _open(self, local_ip: str, peer_ip: str) -> socket.socket:
        """``lnet_connect``: source ports 1023..512 (next one on EADDRINUSE/EADDRNOTAVAIL),
        then an ephemeral port (also straight away without CAP_NET_BIND_SERVICE)."""
        loop = asyncio.get_running_loop()
        ports = deque([*range(wire.LNET_ACCEPTOR_MAX_RESERVED_PORT,
                              wire.LNET_ACCEPTOR_MIN_RESERVED_PORT - 1, -1), 0])
        while True:
            port = ports.popleft()
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.setblocking(False)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((local_ip, port))
                await loop.sock_connect(s, (peer_ip, self._port))
                return s
            except OSError as exc:
                s.close()
                if port and exc.errno in (E.EACCES, E.EPERM):
                    ports = deque([0])
                elif not (port and exc.errno in (E.EADDRINUSE, E.EADDRNOTAVAIL)):
                    raise
            except BaseException:
                s.close()
                raise

    async def _attempt(self, p: _Peer) -> bool:
        """One connection attempt; False when the peer refused it with ctype NONE (EALREADY)."""
        loop = asyncio.get_running_loop()
        sock = await self._open(self._nis[p.ni].ip, p.nid.ip)
        try:
            framer = KsockConnection(active=True)
            ours = wire.KsockHello(p.ni, p.nid, self._pid, LNET_PID_LUSTRE, self._incarnation,
                                   0, wire.SOCKLND_CONN_ANY)
            await loop.sock_sendall(sock, framer.send_handshake(p.nid, ours))
            events: list[Event] = []
            while not events:
                data = await loop.sock_recv(sock, _RECV_CHUNK)
                if not data:
                    raise ConnectionAbortedError(E.ECONNABORTED, "EOF while reading hello")
                events = framer.receive_data(data)
            # a framer.error after the hello is the reader's to report, on an "up" conn
            first = events[0]
            assert isinstance(first, HelloReceived)
            hello = first.hello
            if hello.ctype == wire.SOCKLND_CONN_NONE:
                sock.close()
                return False
            if hello.src_nid != p.nid or hello.dst_nid != p.ni:
                raise WireProtocolError(
                    f"connected to {p.nid} but it claimed to be {hello.src_nid} "
                    f"(for {hello.dst_nid})")
            if wire.invert_ctype(hello.ctype) != wire.SOCKLND_CONN_ANY:
                raise WireProtocolError(f"mismatched conn type {hello.ctype}")
        except BaseException:
            sock.close()
            raise
        self._establish(p, sock, framer, hello.src_incarnation, events[1:])
        return True

    # --- passive side: lnet_acceptor / lnet_accept / ksocknal_accept -------------------
    async def _accept_loop(self, lis: _Listener) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _addr = await loop.sock_accept(lis.lsock)
            except OSError as exc:
                if self._listeners.get(lis.ip) is not lis:
                    return
                _log.warning("socklnd: accept on %s failed: %s", lis.ip, exc)
                await asyncio.sleep(0.1)
                continue
            sock.setblocking(False)
            self._spawn(self._passive(lis, sock))

    async def _passive(self, lis: _Listener, sock: socket.socket) -> None:
        """``lnet_accept`` + ``ksocknal_accept``: the connreq's NID picks the NI."""
        loop = asyncio.get_running_loop()
        framer = KsockConnection(active=False)
        peer_ip = "?"
        ni: NID | None = None
        # lnet_acceptor_timeout: before the connreq names the NI, the tightest of the address's
        limit = min((self.timeout_of(n) for n in lis.nis), default=self._timeout)
        try:
            peer_ip = sock.getpeername()[0]
            hello: wire.KsockHello | None = None
            async with asyncio.timeout(limit):
                while hello is None:
                    data = await loop.sock_recv(sock, _RECV_CHUNK)
                    if not data:
                        raise ConnectionAbortedError(E.ECONNABORTED, "EOF during handshake")
                    for ev in framer.receive_data(data):
                        if isinstance(ev, ConnreqReceived):
                            if ev.nid not in self._nis:  # lnet_accept: -EPERM, no reply
                                raise PermissionError(
                                    E.EPERM, f"Refusing connection from {peer_ip} for "
                                    f"{ev.nid}: No matching NI")
                            ni = ev.nid
                        if isinstance(ev, HelloReceived):
                            hello = ev.hello
                    if framer.error is not None:
                        raise framer.error
            assert ni is not None  # the framer yields the connreq before the hello
            if hello.dst_nid != ni:
                raise WireProtocolError(f"hello for {hello.dst_nid} on a connreq for {ni}")
            ctype = wire.invert_ctype(hello.ctype)
            if ctype == wire.SOCKLND_CONN_NONE:
                raise WireProtocolError(f"unexpected conn type {hello.ctype}")
            if ni not in self._nis:
                raise ConnectionAbortedError(E.ECONNABORTED, f"{ni} shut down meanwhile")
            p = self._peers.get((ni, hello.src_nid))
            if p is None:
                p = self._peers[(ni, hello.src_nid)] = _Peer(ni, hello.src_nid)
            refuse = self._refuse(p, hello)
            reply = wire.KsockHello(ni, hello.src_nid, self._pid, hello.src_pid,
                                    self._incarnation, hello.src_incarnation,
                                    wire.SOCKLND_CONN_NONE if refuse else ctype)
            await loop.sock_sendall(sock, framer.send_hello(reply))
        except PermissionError as exc:
            _log.error("socklnd: %s", exc.strerror)  # lnet_accept's LCONSOLE_ERROR
            sock.close()
            return
        except (OSError, WireProtocolError) as exc:
            _log.error("socklnd: refusing connection from %s on %s: %s", peer_ip,
                       ni or lis.ip, exc)
            sock.close()
            return
        except BaseException:
            sock.close()
            raise
        if refuse or ni not in self._nis:
            sock.close()
            return
        self._establish(p, sock, framer, hello.src_incarnation, [])

    def _refuse(self, p: _Peer, hello: wire.KsockHello) -> bool:
        """``ksocknal_create_conn`` (passive): race resolution and duplicate refusal."""
        if p.conn is not None:
            if p.conn.incarnation == hello.src_incarnation:
                return True  # duplicate of an established conn: tell the peer with CONN_NONE
            self._close_conn(p, p.conn, "stale: peer incarnation changed", *_CLOSED,
                             peer_failed=False)
            return False
        return p.connector is not None and hello.src_nid < p.ni

    # --- established connection -------------------------------------------------------
    def _establish(self, p: _Peer, sock: socket.socket, framer: KsockConnection,
                   incarnation: int, early: list[Event]) -> None:
        if p.conn is not None or self._peers.get((p.ni, p.nid)) is not p:
            sock.close()  # lost to a connection established meanwhile, or NI shut down
            return
        loop = asyncio.get_running_loop()
        c = _Conn(p.ni, p.nid, sock.getpeername()[0], sock, framer, incarnation, loop.time())
        p.conn = c
        self._set_user_timeout(c)
        self._conn_event("up", c, "active" if framer.active else "passive")
        last = self._incarnations.get(p.nid)
        self._incarnations[p.nid] = incarnation
        self._notify(p.ni, p.nid, True, last is not None and last != incarnation)
        c.tasks = [self._spawn(self._run_conn(p, c, early))]

    async def _run_conn(self, p: _Peer, c: _Conn, early: list[Event]) -> None:
        """Established phase on an asyncio transport: in-order reads, buffered writes.

        Why a transport and not ``sock_recv``/``sock_sendall``: the transport owns the fd for
        both directions with flow control (``pause_writing``), so frames can neither
        interleave nor be reordered however the kernel splits the stream.
        """
        loop = asyncio.get_running_loop()
        try:
            transport, _proto = await loop.connect_accepted_socket(
                lambda: _ConnProtocol(self, p, c), sock=c.sock)
        except OSError as exc:
            self._close_conn(p, c, f"cannot attach transport: {exc}", *_CLOSED)
            return
        c.transport = transport
        # at most one posted tx sits in user space, as one partly written tx in the kernel
        transport.set_write_buffer_limits(high=0, low=0)
        self._deliver(c, early)
        self._on_data(p, c, b"")  # bytes held during the handshake
        await self._writer(p, c)

    def _on_data(self, p: _Peer, c: _Conn, data: bytes) -> None:
        if c.closed:
            return
        try:
            if c.framer.error is not None:
                raise c.framer.error
            self._deliver(c, c.framer.receive_data(data))
            if c.framer.error is not None:
                raise c.framer.error
        except WireProtocolError as exc:
            _log.error("socklnd: protocol error from %s (%s): %s", c.peer_nid, c.peer_ip, exc)
            self._close_conn(p, c, f"protocol error: {exc}", *_CLOSED)

    def _deliver(self, c: _Conn, events: list[Event]) -> None:
        for ev in events:
            if isinstance(ev, LNetMessageReceived):
                try:
                    self._on_rx(RxMsg(c.ni, c.peer_nid, c.peer_ip, ev.hdr, ev.payload))
                except Exception:
                    _log.exception("on_rx raised")

    async def _writer(self, p: _Peer, c: _Conn) -> None:
        """Stream queued txs in FIFO order; a tx is done once all of it is in the kernel.

        The transport pauses (high-water 0) whenever a frame did not fit the socket at once;
        that frame is ``c.inflight`` (posted) until ``resume_writing`` completes it.
        """
        loop = asyncio.get_running_loop()
        while not c.closed:
            while not p.queue:
                c.wake.clear()
                await c.wake.wait()
                if c.closed:
                    return
            await c.can_write.wait()
            if c.closed or c.transport is None:
                return
            tx = p.queue.popleft()
            c.transport.write(c.framer.send_lnet(tx.hdr, tx.payload))
            c.last_progress = loop.time()
            if c.transport.get_write_buffer_size():
                c.inflight = tx
            else:
                self._done(tx, 0, HStatus.OK)

    def _posted_complete(self, c: _Conn) -> None:
        """The transport drained: the posted tx is wholly in the kernel (``tx_resid == 0``)."""
        tx, c.inflight = c.inflight, None
        if tx is not None and not c.closed:
            self._done(tx, 0, HStatus.OK)

    def _close_conn(self, p: _Peer, c: _Conn, reason: str, rc: int, hstatus: HStatus,
                    posted: tuple[int, HStatus] | None = None, *,
                    peer_failed: bool = True) -> None:
        """``ksocknal_close_conn_locked`` + ``ksocknal_terminate_conn``: fail what it held.

        Queued txs end with (rc, hstatus); the posted one with ``posted`` if given. Unless
        the close was local (``peer_failed=False``) LNet hears the peer NI is dead when no
        other connection or attempt remains (``ksocknal_peer_failed``), before the txs fail,
        so their resends see it.
        """
        if c.closed:
            return
        c.closed = True
        with contextlib.suppress(Exception):
            c.framer.close()
        me = asyncio.current_task()
        for t in c.tasks:
            if t is not me:
                t.cancel()
        if c.transport is not None:
            c.transport.abort()
        else:
            c.sock.close()
        c.wake.set()
        c.can_write.set()
        if p.conn is c:
            p.conn = None
        if peer_failed:
            self._peer_failed(p)
        if c.inflight is not None:
            self._done(c.inflight, *(posted or (rc, hstatus)))
            c.inflight = None
        self._fail_queue(p, rc, hstatus)
        _log.info("socklnd: connection %s -> %s (%s) down: %s", c.ni, c.peer_nid, c.peer_ip,
                  reason)
        self._conn_event("down", c, reason)

    # --- timeouts: ksocknal_check_peer_timeouts, once a tick ---------------------------
    async def _monitor_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            timeouts = [self._timeout, *(n.timeout for n in self._nis.values() if n.timeout)]
            await asyncio.sleep(min(1.0, min(timeouts) / 4))
            now = loop.time()
            for p in list(self._peers.values()):
                if p.conn is None:
                    # ksocknal_flush_stale_txs: stop at the first tx still in time; never
                    # posted, so a local timeout (seed 003 hlth-lnd-local-timeout)
                    while p.queue and p.queue[0].deadline <= now:
                        self._done(p.queue.popleft(), *FAILURES["unposted_timeout"])
                else:
                    self._check_progress(p, p.conn, now)

    def _check_progress(self, p: _Peer, c: _Conn, now: float) -> None:
        """``ksocknal_find_timed_out_conn``: data queued but the send queue is not draining."""
        try:
            outq = struct.unpack("i", fcntl.ioctl(c.sock.fileno(), SIOCOUTQ, b"\0" * 4))[0]
        except OSError:
            outq = 0
        pending = c.transport.get_write_buffer_size() if c.transport is not None else 0
        busy = pending > 0 or outq > 0 or c.inflight is not None
        if not busy or outq < c.last_outq:
            c.last_progress = now
        c.last_outq = outq
        retransmitting, acked = _tcp_state(c.sock)
        if acked is not None and acked != c.last_acked:
            c.last_acked = acked
            c.last_progress = now
        stale = now - c.last_progress
        if busy and stale < 2 * self.timeout_of(c.ni) and retransmitting:
            return  # unacknowledged data: TCP_USER_TIMEOUT decides (REMOTE_TIMEOUT)
        if busy and stale >= self.timeout_of(c.ni):
            _log.error("socklnd: timeout sending data to %s (%s); the network or that node may "
                       "be down", c.peer_nid, c.peer_ip)
            # posted tx: network timeout; not yet posted: local timeout (seed 003 hlth-lnd-*)
            self._close_conn(p, c, "timeout sending data", *FAILURES["unposted_timeout"],
                             posted=FAILURES["posted_timeout"])
