"""Making and accepting connections: ``ksocknal_connect``'s loop and ``ksocknal_accept``'s
policy, over ``handshake.py``'s sockets and ``conntable.py``'s verdicts.

Theory of operation: one connector task per peer at most (``Peer.connector``,
``ksnr_scheduled``). It makes the peer's missing connection types one at a time
(``ConnTable.wanted_type``), each within the NI's timeout; a refusal with ctype NONE
(EALREADY: we lost the race, or the type is a duplicate) waits 50 ms doubling to 1 s and looks
again — by then the peer's own connections usually supply the type; after
``SOCKNAL_MAX_RETRIES`` such refusals it settles for what is connected if that can carry
messages. A failure with nothing connected fails the peer's waiting txs
(``errmap.connect_failure``) and tells LNet the peer NI is dead; txs LNet queued meanwhile
(its resends) get a fresh attempt. With some types connected the rest wait for the retry
interval (``ksnr_retry_interval``).

A passive connection: the source address may have at most ``MAX_CONNS_FACTOR`` x
conns_per_peer handshakes in progress, each bounded by the tightest timeout of the address's
NIs (``lnet_acceptor_timeout``); the peer's stale connections (another incarnation) are
closed; the table's verdict (race, duplicate, too many) is the ctype of our hello reply.
Every refusal is counted by kind and logged at most a few times per window
(``ratelimit.py``), with its reason (never empty).
"""

from __future__ import annotations

import asyncio
import errno as E
import logging
import socket
from collections.abc import Callable

from nodes.lnd import handshake, wire
from nodes.lnd.bufpool import BufferPool
from nodes.lnd.conntable import (
    ANY,
    BULK_OUT,
    CONTROL,
    MAX_CONNS_FACTOR,
    SOCKNAL_MAX_RETRIES,
    ConnTable,
    Peer,
    Verdict,
)
from nodes.lnd.ratelimit import RateLimitedLog
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_PID_LUSTRE
from nodes.lnet.nid import NID

_log = logging.getLogger("lnet.socklnd")
BACKOFF_MIN, BACKOFF_MAX = 0.05, 1.0


def _reason(exc: BaseException) -> tuple[str, str]:
    """(kind, one-line reason) of a failed handshake; never an empty reason."""
    if isinstance(exc, TimeoutError):
        return "timeout", str(exc) or "handshake not done in time"
    if isinstance(exc, WireProtocolError):
        return "protocol error", str(exc) or "protocol error"
    return "socket error", str(exc) or type(exc).__name__


class Connector:
    """Connect and accept policy of one socklnd (the sockets are ``handshake.py``'s)."""

    def __init__(self, table: ConnTable, *, port: int, pid: int, incarnation: int,
                 ni_ip: Callable[[NID], str | None], timeout_of: Callable[[NID], float],
                 establish: Callable[[Peer, handshake.Handshake, bool], None],
                 close_stale: Callable[[Peer, int], None],
                 connect_failed: Callable[[Peer, int], None],
                 refusals: RateLimitedLog) -> None:
        self._table = table
        self._port, self._pid, self._incarnation = port, pid, incarnation
        self.bulk_port = port  # accept_port_bulk (nodes/lnd/modparams.py)
        self._ni_ip, self._timeout_of = ni_ip, timeout_of
        self._establish, self._close_stale = establish, close_stale
        self._connect_failed = connect_failed
        self.refusals = refusals
        self.pool = BufferPool()  # payload buffers of every connection made here

    # --- active: ksocknal_connect -------------------------------------------------------
    async def run(self, p: Peer) -> None:
        """Make ``p``'s missing connection types while it has connections or waiting txs."""
        loop = asyncio.get_running_loop()
        backoff = BACKOFF_MIN
        try:
            while (p.conns or p.queue) and self._table.peers.get((p.ni, p.nid)) is p:
                ip, ctype = self._ni_ip(p.ni), self._table.wanted_type(p)
                if ip is None or ctype is None:
                    return
                try:
                    async with asyncio.timeout(self._timeout_of(p.ni)):
                        hs = await self._attempt(ip, p, ctype)
                except WireProtocolError as exc:
                    _log.error("socklnd: bad hello from %s: %s", p.nid, exc)
                    rc = -E.EPROTO
                except OSError as exc:  # includes TimeoutError from our deadline
                    rc = -(exc.errno or E.ETIMEDOUT)
                    _log.warning("socklnd: connect %s -> %s failed: rc = %d", p.ni, p.nid, rc)
                else:
                    if hs is not None:
                        self._establish(p, hs, True)
                        backoff = BACKOFF_MIN
                        continue
                    p.ealready += 1  # EALREADY: the peer's connection carries the queue
                    if p.ealready >= SOCKNAL_MAX_RETRIES and self._usable(p):
                        p.retry_at = loop.time() + BACKOFF_MAX
                        return
                    await asyncio.sleep(backoff)
                    backoff = min(2 * backoff, BACKOFF_MAX)
                    continue
                if p.conns:  # the missing types later (ksnr_retry_interval)
                    p.retry_at = loop.time() + backoff
                    return
                self._connect_failed(p, rc)
        finally:
            if p.connector is asyncio.current_task():
                p.connector = None

    @staticmethod
    def _usable(p: Peer) -> bool:
        return any(c.ctype in (ANY, CONTROL, BULK_OUT) for c in p.conns)

    async def _attempt(self, ip: str, p: Peer, ctype: int) -> handshake.Handshake | None:
        # lnet_connect(..., control): the bulk port for every type but CONTROL
        port = self._port if ctype == CONTROL else self.bulk_port
        sock = await handshake.open_socket(ip, p.nid.ip, port)
        try:
            return await handshake.active(sock, ni=p.ni, peer_nid=p.nid, pid=self._pid,
                                          dst_pid=LNET_PID_LUSTRE,
                                          incarnation=self._incarnation, ctype=ctype,
                                          pool=self.pool)
        except BaseException:
            sock.close()
            raise

    # --- passive: lnet_accept / ksocknal_accept / ksocknal_create_conn ------------------
    async def accept(self, ip: str, sock: socket.socket, *, limit: float, cpp: int) -> None:
        """Handshake, decide and reply on an accepted ``sock`` (our listener on ``ip``),
        within ``limit`` seconds; ``cpp`` is the address's largest conns_per_peer."""
        loop = asyncio.get_running_loop()
        try:
            peer_ip = sock.getpeername()[0]
        except OSError:
            sock.close()
            return
        if not self._table.begin_handshake(peer_ip, MAX_CONNS_FACTOR * cpp):
            self._refuse("too many handshakes", f"refusing connection from {peer_ip} on "
                         f"{ip}: {MAX_CONNS_FACTOR * cpp} handshakes already in progress")
            sock.close()
            return
        ni: NID | None = None
        try:
            try:
                async with asyncio.timeout(limit):
                    hs = await handshake.passive_hello(
                        sock, peer_ip, lambda n: self._ni_ip(n) is not None, self.pool)
            finally:
                self._table.end_handshake(peer_ip)
            ni = hs.ni
            if self._ni_ip(ni) is None:
                raise ConnectionAbortedError(E.ECONNABORTED, f"{ni} shut down meanwhile")
            p = self._table.peer(ni, hs.hello.src_nid)
            self._close_stale(p, hs.hello.src_incarnation)
            ctype = wire.invert_ctype(hs.hello.ctype)
            verdict = self._table.passive_verdict(p, ctype)
            reply = wire.KsockHello(ni, hs.hello.src_nid, self._pid, hs.hello.src_pid,
                                    self._incarnation, hs.hello.src_incarnation,
                                    ctype if verdict is Verdict.ACCEPT
                                    else wire.SOCKLND_CONN_NONE, (), hs.hello.version)
            await loop.sock_sendall(sock, hs.framer.send_hello(reply))
        except PermissionError as exc:  # lnet_accept's LCONSOLE_ERROR
            self._refuse("no matching NI", f"{exc.strerror}")
            sock.close()
            return
        except (OSError, WireProtocolError) as exc:
            kind, why = _reason(exc)
            self._refuse(kind, f"refusing connection from {peer_ip} on {ni or ip}: {why}")
            sock.close()
            return
        except BaseException:
            sock.close()
            raise
        if verdict is not Verdict.ACCEPT or self._ni_ip(ni) is None:
            level = logging.WARNING if verdict is Verdict.TOO_MANY else logging.DEBUG
            self.refusals.log(loop.time(), level, verdict.value,
                              f"socklnd: {ni} <- {p.nid} ({peer_ip}): {verdict.value}")
            sock.close()
            return
        self._establish(p, hs, False)

    def _refuse(self, kind: str, msg: str) -> None:
        self.refusals.log(asyncio.get_running_loop().time(), logging.ERROR, kind,
                          f"socklnd: {msg}")


__all__ = ["BACKOFF_MAX", "BACKOFF_MIN", "Connector"]
