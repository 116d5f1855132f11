"""Connection set-up on real sockets: ``lnet_connect``, the acceptor, and both handshakes.

Theory of operation: asyncio coroutines around the sans-I/O ``KsockConnection`` that own a
socket only until the handshake is over; what is decided (which NI, race, duplicate, stale
incarnation) is the caller's (``socklnd.py`` with ``conntable.py``).

* ``open_socket`` is ``lnet_connect``: bound to the NI's address and to a reserved source
  port 1023..512 (the next one on EADDRINUSE/EADDRNOTAVAIL), falling back to an ephemeral
  port without CAP_NET_BIND_SERVICE.
* ``active`` sends the acceptor connreq and our hello together and reads the peer's hello
  (``ksocknal_create_conn`` → ``ksocknal_send_hello`` / ``ksocknal_recv_hello``); a reply of
  ctype SOCKLND_CONN_NONE means the peer refused (lost race or duplicate: EALREADY, None).
  The reply must come from the NID we connected to, for our NI, with our type inverted
  (otherwise -EPROTO, as ``ksocknal_recv_hello`` says "Mismatched types").
* ``Acceptor`` is ``lnet_acceptor``: one listening socket per local address and port (the
  control port, and ``accept_port_bulk`` when it differs) shared by every NI on it
  (refcounted), accepting in a loop. Handshakes in progress from one address are
  bounded (the caller says how many) and each is bounded in time by the caller.
* ``passive_hello`` is ``lnet_accept`` + ``ksocknal_accept``: the connreq's NID picks the NI
  (an unknown one: "No matching NI", -EPERM, closed without a reply), then the peer's hello
  names its NID, process and connection type.
"""

from __future__ import annotations

import asyncio
import errno as E
import logging
import socket
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from nodes.lnd import wire
from nodes.lnd.bufpool import BufferPool
from nodes.lnd.framing import ConnreqReceived, Event, HelloReceived, KsockConnection
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.nid import NID

_log = logging.getLogger("lnet.socklnd")
_RECV_CHUNK = 1 << 16


@dataclass(slots=True)
class Handshake:
    """A connection whose handshake is done: its socket, machine and the peer's hello."""

    sock: socket.socket
    framer: KsockConnection
    hello: wire.KsockHello
    ni: NID
    peer_ip: str
    early: list[Event] = field(default_factory=list)  # frames that came with the hello


def family(ip: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 address (a large NID's), else AF_INET."""
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def protocol(peer_ip: str) -> int:
    """``ksocknal_create_conn`` (active): KSOCK_PROTO_V4 to an AF_INET6 peer address, V3 to
    an AF_INET one -- whether LNet runs ``--large`` or not."""
    return wire.KSOCK_PROTO_V4 if family(peer_ip) == socket.AF_INET6 else wire.KSOCK_PROTO_V3


async def open_socket(local_ip: str, peer_ip: str, port: int) -> socket.socket:
    """``lnet_connect``: source ports 1023..512, then an ephemeral one; AF_INET6 between
    IPv6 addresses (``lnet_sock_connect`` on the NI's ``sockaddr_storage``)."""
    loop = asyncio.get_running_loop()
    ports = deque([*range(wire.LNET_ACCEPTOR_MAX_RESERVED_PORT,
                          wire.LNET_ACCEPTOR_MIN_RESERVED_PORT - 1, -1), 0])
    while True:
        sport = ports.popleft()
        s = socket.socket(family(peer_ip), socket.SOCK_STREAM)
        try:
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((local_ip, sport))
            await loop.sock_connect(s, (peer_ip, port))
            return s
        except OSError as exc:
            s.close()
            if sport and exc.errno in (E.EACCES, E.EPERM):
                ports = deque([0])
            elif not (sport and exc.errno in (E.EADDRINUSE, E.EADDRNOTAVAIL)):
                raise
        except BaseException:
            s.close()
            raise


async def active(sock: socket.socket, *, ni: NID, peer_nid: NID, pid: int, dst_pid: int,
                 incarnation: int, ctype: int, pool: BufferPool | None = None
                 ) -> Handshake | None:
    """Our side of ``ksocknal_create_conn`` (active) on a connected ``sock``; None when the
    peer refused with ctype NONE (the socket is then closed).

    Raises:
        WireProtocolError: a bad or mismatched hello (the caller closes ``sock``).
        OSError: the socket failed or the peer closed it.
    """
    loop = asyncio.get_running_loop()
    framer = KsockConnection(active=True, pool=pool)
    ours = wire.KsockHello(ni, peer_nid, pid, dst_pid, incarnation, 0, ctype, (),
                           protocol(peer_nid.ip))
    await loop.sock_sendall(sock, framer.send_handshake(peer_nid, ours))
    events: list[Event] = []
    while not events:
        data = await loop.sock_recv(sock, _RECV_CHUNK)
        if not data:
            raise ConnectionAbortedError(E.ECONNABORTED, "EOF while reading hello")
        events = framer.receive_data(data)
    # a framer.error after the hello is the reader's to report, on an established conn
    first = events[0]
    assert isinstance(first, HelloReceived)
    hello = first.hello
    if hello.ctype == wire.SOCKLND_CONN_NONE:
        sock.close()
        return None
    if hello.version != ours.version:  # ksocknal_recv_hello: the peer's protocol differs
        raise WireProtocolError(f"{peer_nid} replied with protocol V{hello.version}, "
                                f"V{ours.version} sent")
    if hello.src_nid != peer_nid or hello.dst_nid != ni:
        raise WireProtocolError(f"connected to {peer_nid} but it claimed to be "
                                f"{hello.src_nid} (for {hello.dst_nid})")
    if wire.invert_ctype(hello.ctype) != ctype:
        raise WireProtocolError(f"mismatched conn type: me {ctype}, peer {hello.ctype}")
    return Handshake(sock, framer, hello, ni, peer_nid.ip, events[1:])


async def passive_hello(sock: socket.socket, peer_ip: str, has_ni: Callable[[NID], bool],
                        pool: BufferPool | None = None) -> Handshake:
    """``lnet_accept`` + ``ksocknal_recv_hello`` (passive): read the connreq and the hello.

    Raises:
        PermissionError: the connreq names a NID no NI has ("No matching NI", -EPERM).
        WireProtocolError: a bad connreq or hello.
        OSError: the socket failed or the peer closed it.
    """
    loop = asyncio.get_running_loop()
    framer = KsockConnection(active=False, pool=pool)
    ni: NID | None = None
    while True:
        data = await loop.sock_recv(sock, _RECV_CHUNK)
        if not data:
            raise ConnectionAbortedError(E.ECONNABORTED, "EOF during handshake")
        for ev in framer.receive_data(data):
            if isinstance(ev, ConnreqReceived):
                if not has_ni(ev.nid):  # lnet_accept: -EPERM, no reply
                    raise PermissionError(E.EPERM, f"Refusing connection from {peer_ip} for "
                                          f"{ev.nid}: No matching NI")
                ni = ev.nid
            elif isinstance(ev, HelloReceived):
                assert ni is not None  # the framer yields the connreq before the hello
                hello = ev.hello
                if hello.dst_nid != ni:
                    raise WireProtocolError(f"hello for {hello.dst_nid} on a connreq for {ni}")
                if wire.invert_ctype(hello.ctype) == wire.SOCKLND_CONN_NONE:
                    raise WireProtocolError(f"unexpected conn type {hello.ctype}")
                return Handshake(sock, framer, hello, ni, peer_ip)
        if framer.error is not None:
            raise framer.error


@dataclass(eq=False, slots=True)
class _Listener:
    ip: str
    lsocks: list[socket.socket]
    nis: set[NID] = field(default_factory=set)
    # fd -> the timer that re-arms it after an accept error (EMFILE...)
    paused: dict[int, asyncio.TimerHandle] = field(default_factory=dict)


class Acceptor:
    """``lnet_acceptor``: listening sockets per local address, shared by its NIs -- one on
    ``accept_port``, and one on ``accept_port_bulk`` when that differs
    (``lnet_acceptor_add_sockets``); each accepted socket goes to ``on_accept(ip, sock)`` (a
    coroutine run as its own task).

    A listener is a reader callback on the loop, not a task awaiting ``sock_accept``:
    cancelling such a task while its fd's readiness is already queued for this turn makes
    asyncio's ``_sock_accept`` run on a closed socket (EBADF) and then set a result on the
    cancelled future (InvalidStateError, logged with a traceback). ``remove_reader`` cancels
    a callback already due, so a listener closes in one synchronous step."""

    # connections taken per readiness callback: one busy listener cannot starve the loop
    ACCEPT_BATCH = 16
    # seconds a listener rests after an accept error other than "nothing queued"
    ACCEPT_RETRY = 0.1

    def __init__(self, port: int,
                 on_accept: Callable[[str, socket.socket], Coroutine[Any, Any, None]],
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]) -> None:
        self.port = port
        self.bulk_port = port  # accept_port_bulk: the same port unless the module says so
        self._on_accept = on_accept
        self._spawn = spawn
        self._listeners: dict[str, _Listener] = {}

    def nis(self, ip: str) -> set[NID]:
        lis = self._listeners.get(ip)
        return set(lis.nis) if lis else set()

    @staticmethod
    def _listen(ip: str, port: int) -> socket.socket:
        lsock = socket.socket(family(ip), socket.SOCK_STREAM)
        try:
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            lsock.bind((ip, port))
            lsock.listen(64)
            lsock.setblocking(False)
        except OSError:
            lsock.close()
            raise
        return lsock

    def add(self, ni: NID, ip: str) -> None:
        """Serve ``ni`` on ``ip``, opening the listeners unless another NI did. Raises
        OSError if it cannot bind (the control port's listener is then closed too)."""
        lis = self._listeners.get(ip)
        if lis is None:
            lsocks = [self._listen(ip, self.port)]
            if self.bulk_port != self.port:
                try:
                    lsocks.append(self._listen(ip, self.bulk_port))
                except OSError:
                    lsocks[0].close()
                    raise
            lis = self._listeners[ip] = _Listener(ip, lsocks)
            loop = asyncio.get_running_loop()
            for lsock in lsocks:
                loop.add_reader(lsock.fileno(), self._readable, lis, lsock)
        lis.nis.add(ni)

    def remove(self, ni: NID, ip: str) -> None:
        """Stop serving ``ni``; closes the listeners with its last NI, at once: no accept
        callback runs on them afterwards."""
        lis = self._listeners.get(ip)
        if lis is None:
            return
        lis.nis.discard(ni)
        if lis.nis:
            return
        del self._listeners[ip]
        loop = asyncio.get_running_loop()
        for lsock in lis.lsocks:
            fd = lsock.fileno()
            timer = lis.paused.pop(fd, None)
            if timer is not None:
                timer.cancel()
            else:
                loop.remove_reader(fd)
            lsock.close()

    def _readable(self, lis: _Listener, lsock: socket.socket) -> None:
        """Take what the listener has queued (up to ``ACCEPT_BATCH``)."""
        for _ in range(self.ACCEPT_BATCH):
            try:
                sock, _addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                _log.warning("socklnd: accept on %s failed: %s", lis.ip, exc)
                loop = asyncio.get_running_loop()
                fd = lsock.fileno()
                loop.remove_reader(fd)
                lis.paused[fd] = loop.call_later(self.ACCEPT_RETRY, self._rearm, lis, lsock)
                return
            sock.setblocking(False)
            self._spawn(self._on_accept(lis.ip, sock))

    def _rearm(self, lis: _Listener, lsock: socket.socket) -> None:
        fd = lsock.fileno()
        lis.paused.pop(fd, None)
        if self._listeners.get(lis.ip) is lis:
            asyncio.get_running_loop().add_reader(fd, self._readable, lis, lsock)


__all__ = ["Acceptor", "Handshake", "active", "open_socket", "passive_hello"]
