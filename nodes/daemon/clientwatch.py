"""A control socket's requests by the connection they came on: a client that goes away
cancels its work (issue 27 item 1).

Theory of operation: a ROUTER socket (the node daemon's, the sim server's) hands each request
to its own task. ZeroMQ does not tell a ROUTER that a REQ peer closed (``ZMQ_ROUTER_NOTIFY``
is draft API, absent from the libzmq we ship with), but its socket monitor reports
``EVENT_DISCONNECTED`` with the closed connection's file descriptor, and every received
frame carries the descriptor it came in on (``ZMQ_SRCFD``). ``ClientWatch.track`` files a
request's task under that descriptor; when the monitor says the descriptor closed, its tasks
are cancelled, and whatever they wait on is told (the lst console's wait ends as a signal
ends it in the kernel: ``nodes/daemon/lst_verb.py``). A killed ``lst`` or a ``testbed``
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
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger("control")
#: How often closes are looked for while no request arrives (seconds).
POLL = 0.2


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
        while True:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError:
                return
            try:
                event = parse_monitor_message(frames)
            except (ValueError, IndexError, TypeError):
                continue
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self.closed(int(event["value"]))

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
