"""The one control-server loop (issue 29 item 3: "one control-server loop"): ZeroMQ ROUTER
sockets whose JSON requests each get exactly one reply, for the node daemon
(``nodes/daemon/control.py``: its ``ipc://`` socket and, off the box, its CURVE ``tcp://``
one) and for a testbed's ``ctl.sock`` (``testbed/ctlserver.py``: the Mininet and
vagrant/hosts supervisors, the sim server). ``nodes`` imports nothing of ``testbed``: the
loop lives here and the testbed's control server builds on it.

Theory of operation: the owner makes each socket with :func:`router` (a ROUTER, its linger,
and a frame bound past which ZeroMQ drops a frame unread, ``ZMQ_MAXMSGSIZE``: a request is
never buffered whole before it is refused), makes the :class:`ServeLoop` (which puts its
monitors on the sockets: before the owner binds them, so that no connection is missed),
binds, and awaits :meth:`ServeLoop.serve`. What a request means is the owner's ``reply``: a
request's frames -> the reply's frames (or None: nothing to answer to); it bounds and
checks the body and answers what does not fit in one line (``ctlproto.parse`` on
``ctl.sock``, the daemon's own check on its sockets), and never raises but for
cancellation. The loop:

* reads every socket (``zmq.asyncio.Poller``): one request per ready socket per turn;
* concurrent (the daemon, the sim server): each request in its own task, filed under the
  connection it came on (``ClientWatch``): a client that goes away cancels its request, so a
  long ``lnetctl ping`` does not hold ``net show`` back and a killed ``lst`` stops its work;
* ``serial`` (the supervisors): one request at a time, one whose client went away before its
  turn not served (``ClosedClients``, counted in ``skipped``);
* ``tick`` (the supervisors' fault schedule, dead daemons, host events) runs before each
  wait and says how long at most to wait for a request (None: until one comes);
* ``stop`` (an event: a ``shutdown``/``down`` request, a signal) or ``stopping()`` ends it; the
  last reply gets ``LINGER_AFTER_STOP`` to leave, then the requests still running are
  cancelled and the monitors closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import zmq
import zmq.asyncio

from nodes.daemon.clientwatch import ClientWatch, ClosedClients, source_fd

#: a request's frames (``recv_multipart(copy=False)``) -> the reply's frames, or None
Reply = Callable[[list[Any]], Awaitable[list[bytes] | None]]
#: What a reply gets after the stop before the requests still running are cancelled (s).
LINGER_AFTER_STOP = 0.05


def router(ctx: zmq.asyncio.Context, *, linger: int,
           max_frame: int | None = None) -> zmq.asyncio.Socket:
    """A ROUTER socket of the loop: ``linger`` ms; a frame over ``max_frame`` bytes dropped
    by ZeroMQ unread (the connection closed), never handed over."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, linger)
    if max_frame is not None:
        sock.setsockopt(zmq.MAXMSGSIZE, max_frame)
    return sock


def _plain(sock: zmq.asyncio.Socket) -> zmq.Socket[bytes]:
    """A blocking socket over ``sock``'s (``ClosedClients`` drains its monitor without
    waiting, which an asyncio socket cannot do), with a context to make that monitor in."""
    plain: zmq.Socket[bytes] = zmq.Socket.shadow(sock.underlying)
    plain.context = zmq.Context.shadow(sock.context.underlying)
    return plain


class ServeLoop:
    """Requests of ``socks`` answered by ``reply`` (module doc)."""

    def __init__(self, socks: Sequence[zmq.asyncio.Socket], reply: Reply, *,
                 stop: asyncio.Event, stopping: Callable[[], bool] | None = None,
                 tick: Callable[[], float | None] | None = None,
                 serial: bool = False) -> None:
        self.socks = list(socks)
        self.reply = reply
        self.stop = stop
        self.stopping = stopping if stopping is not None else stop.is_set
        self.tick = tick
        self.tasks: set[asyncio.Task[None]] = set()
        # the monitors, before the owner binds: a serial loop must see every accept
        self.closed = {s: ClosedClients(_plain(s)) for s in self.socks} if serial else {}
        self.watches = {} if serial else {s: ClientWatch(s) for s in self.socks}
        self.skipped = 0  # requests not served: their client went away before their turn

    async def _answer(self, sock: zmq.asyncio.Socket, frames: list[Any]) -> None:
        out = await self.reply(frames)
        if out is not None:
            await sock.send_multipart(out)

    async def _wait(self, poller: zmq.asyncio.Poller) -> list[zmq.asyncio.Socket] | None:
        """The sockets with a request, once one has one or the tick's wait is over; None once
        stopped."""
        wait = self.tick() if self.tick is not None else None
        if self.stopping():
            return None
        polled = asyncio.ensure_future(poller.poll(None if wait is None
                                                   else int(max(0.0, wait) * 1000)))
        stop = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait({polled, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not polled.done():
            polled.cancel()
            return None
        return [s for s, _ in polled.result()]

    async def serve(self) -> None:
        """Serve until ``stop`` is set or ``stopping()`` says so."""
        poller = zmq.asyncio.Poller()
        for sock in self.socks:
            poller.register(sock, zmq.POLLIN)
        for watch in self.watches.values():
            watch.start()
        try:
            while not self.stopping():
                ready = await self._wait(poller)
                if ready is None:
                    break
                for sock in ready:
                    frames = await sock.recv_multipart(copy=False)
                    closed = self.closed.get(sock)
                    if closed is not None:
                        if closed.gone(source_fd(frames)):
                            self.skipped += 1
                        else:
                            await self._answer(sock, frames)
                        continue
                    task = asyncio.ensure_future(self._answer(sock, frames))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
                    self.watches[sock].track(source_fd(frames), task)
            await asyncio.sleep(LINGER_AFTER_STOP)  # let the last reply leave
        finally:
            for task in list(self.tasks):
                task.cancel()
            for watch in self.watches.values():
                watch.close()
            for closed in self.closed.values():
                closed.close()
