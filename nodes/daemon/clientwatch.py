"""A control socket's requests by the connection they came on: a client that goes away
cancels its work (issue 27 item 1; ``ClosedClients``: the same for a one-at-a-time loop).

Theory of operation: a ROUTER socket (the node daemon's, the sim server's) hands each request
to its own task. ZeroMQ does not tell a ROUTER that a REQ peer closed (``ZMQ_ROUTER_NOTIFY``
is draft API, absent from the libzmq we ship with), but its socket monitor reports
``EVENT_DISCONNECTED`` with the closed connection's file descriptor, and every received
frame carries the descriptor it came in on (``ZMQ_SRCFD``). ``ClientWatch.track`` files a
request's task under that descriptor; when the monitor says the descriptor closed, its tasks
are cancelled, and whatever they wait on is told (the lst console's wait ends as a signal
ends it in the kernel: ``nodes/dlc/verbs/lst_verb.py``). A killed ``lst`` or a ``testbed``
command stopped with ^C thus stops its work instead of leaving a 65,536-node transaction
running for nobody. A descriptor is reused by the kernel only after it closed, and the
monitor reports the close first, so a request is never cancelled for another's departure
unless the new connection's request is read before the old one's close is (both within the
same loop iteration): that task is then cancelled and its client, which sees no answer,
gets its deadline's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger("control")
#: How often closes are looked for while no request arrives (seconds).
POLL = 0.2


def monitor_events(monitor: zmq.Socket[bytes]) -> Iterator[tuple[int, int]]:
    """(event, descriptor) of every event a socket monitor reported so far, without waiting."""
    while True:
        try:
            frames = monitor.recv_multipart(zmq.NOBLOCK)
        except zmq.ZMQError:  # (zmq.Again: nothing more)
            return
        try:
            event = parse_monitor_message(frames)
        except (ValueError, IndexError, TypeError):
            continue
        yield int(event["event"]), int(event["value"])


def source_fd(frames: list[Any]) -> int | None:
    """The descriptor a message (``recv_multipart(copy=False)``) came in on, if known."""
    try:
        fd = frames[-1].get(zmq.SRCFD)
    except (AttributeError, zmq.ZMQError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


class ClientWatch:
    """Cancels the tasks of requests whose connection closed."""

    def __init__(self, sock: zmq.asyncio.Socket) -> None:
        addr = f"inproc://clientwatch-{id(self):x}"
        sock.monitor(addr, zmq.EVENT_DISCONNECTED)
        # a plain socket on the same context: drained without waiting, between requests
        self.monitor: zmq.Socket[bytes] = zmq.Context.shadow(sock.context.underlying) \
            .socket(zmq.PAIR)
        self.monitor.connect(addr)
        self.sock = sock
        self.by_fd: dict[int, set[asyncio.Task[Any]]] = {}
        self.cancelled = 0  # tasks cancelled because their client went away (tests read it)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def track(self, fd: int | None, task: asyncio.Task[Any]) -> None:
        """File ``task`` under connection ``fd`` until it ends. Closes already reported are
        taken first: the descriptor of a connection that closed may be this one's now."""
        self.drain()
        if fd is None:
            return
        tasks = self.by_fd.setdefault(fd, set())
        tasks.add(task)

        def forget(t: asyncio.Task[Any]) -> None:
            tasks.discard(t)
            if not tasks and self.by_fd.get(fd) is tasks:
                del self.by_fd[fd]

        task.add_done_callback(forget)

    def closed(self, fd: int) -> None:
        """Connection ``fd`` closed: its requests' tasks are cancelled."""
        for task in list(self.by_fd.pop(fd, ())):
            if not task.done():
                task.cancel()
                self.cancelled += 1

    def drain(self) -> None:
        """Every close the monitor reported so far."""
        for event, fd in monitor_events(self.monitor):
            if event == zmq.EVENT_DISCONNECTED:
                self.closed(fd)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(POLL)
            self.drain()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        with contextlib.suppress(zmq.ZMQError):
            self.sock.disable_monitor()
        self.monitor.close(0)


class ClosedClients:
    """For a loop that serves one request at a time (the Mininet supervisor): was the
    connection a request came on closed while the request waited its turn? Such a request is
    not served: its client went away, its work is cancelled before it starts (issue 27).

    The monitor reports a connection's ``EVENT_ACCEPTED`` before any of its messages can be
    read (the I/O thread reports the accept, then reads), and its ``EVENT_DISCONNECTED`` once
    it closed; so, once every event reported so far is taken, a descriptor whose last event
    is a close belongs to no open connection, and a request that came on it has no client.
    A request under way is not interrupted (the supervisor's requests are each bounded).
    """

    def __init__(self, sock: zmq.Socket[bytes]) -> None:
        addr = f"inproc://closedclients-{id(self):x}"
        sock.monitor(addr, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self.monitor: zmq.Socket[bytes] = sock.context.socket(zmq.PAIR)
        self.monitor.connect(addr)
        self.sock = sock
        self.closed: set[int] = set()
        self.skipped = 0  # requests not served because their client went away (tests read it)

    def gone(self, fd: int | None) -> bool:
        """True (and counted) when the connection ``fd`` names has closed."""
        for event, efd in monitor_events(self.monitor):
            if event == zmq.EVENT_DISCONNECTED:
                self.closed.add(efd)
            else:
                self.closed.discard(efd)
        if fd is None or fd not in self.closed:
            return False
        self.skipped += 1
        return True

    def close(self) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self.sock.disable_monitor()
        self.monitor.close(0)
