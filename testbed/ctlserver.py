"""The one control-server loop of a testbed's ``ipc://RUNDIR/ctl.sock`` (issue 29 item 3).

Theory of operation: every process-backed backend serves its testbed's control requests the
same way: the Mininet supervisor (``testbed/mininet/supervisor.py``), the vagrant/hosts
supervisor (``testbed/vagrant/supervisor.py``) and the sim server (``testbed/sim/server.py``).
Each used to write this loop itself; now each gives :class:`CtlServer` a handler table
(command -> function of the checked request, returning the reply) and what it does between
requests, and this module does the rest:

* one ZeroMQ ROUTER bound on ``ctl.sock`` (mode 0600), frames past
  ``ctlproto.MAX_FRAME_BYTES`` dropped unread by ZeroMQ (``ZMQ_MAXMSGSIZE``);
* each body checked field by field (``ctlproto.parse``: bounded size and depth); a bad one,
  an unknown command, a refusal a handler raises (``refusals``) or a handler's bug is
  answered with one line (``{"ok": false, "error": ...}``) and serving goes on (issue 11
  item 3: a request must never end the server);
* ``concurrent=False`` (the supervisors): one request at a time, the ``tick`` between them
  (fault schedule, dead daemons, events), a request whose client went away before its turn
  not served (``ClosedClients``); ``concurrent=True`` (the sim server): each request in its
  own task, cancelled when its client goes away (``ClientWatch``), so a paced ``ping`` does
  not hold ``net show`` back;
* ``after`` runs once a request is answered, before its reply leaves (the sim server moves
  its new events to files there);
* :meth:`CtlServer.stop` (a ``down`` handler, a signal) ends the loop once the reply that
  asked for it has left; ``should_stop`` is polled at each tick (a flag a signal handler set).

Handlers may be plain functions or coroutine functions (the sim server's node verbs).
The loop itself (sockets read, a task per request or one at a time, the tick, the stop) is
``nodes/daemon/ctlloop.py`` ``ServeLoop``, the node daemon's too; this module is what a
testbed's ``ctl.sock`` adds: its path and mode, ``ctlproto``'s checks, the handler table.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import traceback
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import zmq.asyncio

from nodes.daemon.ctlloop import ServeLoop, router
from nodes.echo import shown
from testbed import ctlproto, runstate

Reply = dict[str, Any]
Handler = Callable[[dict[str, Any]], Reply | Awaitable[Reply]]
#: Longest wait (seconds) between two ticks while no request arrives.
IDLE_WAIT = 0.5


def one_line(text: str) -> str:
    """An error reply's text on one line (a handler's message may hold newlines)."""
    return " ".join(text.splitlines()) if "\n" in text or "\r" in text else text


class CtlServer:
    """One testbed's control socket: a handler table served by the one loop (module doc)."""

    def __init__(self, rdir: Path, handlers: Mapping[str, Handler], *,
                 concurrent: bool = False,
                 tick: Callable[[], float] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 after: Callable[[], None] | None = None,
                 refusals: tuple[type[BaseException], ...] = ()) -> None:
        self.rdir = rdir
        self.handlers = dict(handlers)
        self.concurrent = concurrent
        self.tick = tick
        self.should_stop = should_stop
        self.after = after
        self.refusals: tuple[type[BaseException], ...] = (ctlproto.RequestError, *refusals)
        self._stop: asyncio.Event | None = None
        self._stop_early = False
        self.loop: ServeLoop | None = None  # (while serving)

    @property
    def skipped(self) -> int:
        """Requests not served: their client went away before their turn (serial)."""
        return self.loop.skipped if self.loop is not None else 0

    def stop(self) -> None:
        """End the loop once the current reply has left (a ``down`` handler, a signal)."""
        self._stop_early = True
        if self._stop is not None:
            self._stop.set()

    def stopping(self) -> bool:
        return self._stop_early or (self.should_stop is not None and self.should_stop())

    async def dispatch(self, msg: dict[str, Any]) -> Reply:
        """One checked request -> its handler's reply (an unknown command: refused)."""
        handler = self.handlers.get(msg["cmd"])
        if handler is None:
            return {"ok": False, "error": f"unknown request {shown(msg['cmd'])}"}
        reply = handler(msg)
        if inspect.isawaitable(reply):
            reply = await reply
        return reply

    async def answer(self, body: bytes) -> Reply:
        """One request body -> its reply. Never raises but for cancellation: what does not
        fit is refused in one line, a handler's bug is reported in one line and logged."""
        try:
            reply = await self.dispatch(ctlproto.parse(body))
        except self.refusals as exc:
            reply = {"ok": False, "error": one_line(str(exc))}
        except Exception as exc:  # a bug shows in the log and the reply; the testbed stays
            traceback.print_exc()
            reply = {"ok": False, "error": one_line(f"internal error: {type(exc).__name__}: "
                                                    f"{exc}")}
        if self.after is not None:
            self.after()
        return reply

    async def _reply(self, frames: list[Any]) -> list[bytes]:
        reply = await self.answer(frames[-1].bytes)
        return [*(f.bytes for f in frames[:-1]), json.dumps(reply).encode()]

    def _wait(self) -> float:
        """Run the tick; how long to wait for a request before the next one."""
        if self.tick is None:
            return IDLE_WAIT
        return max(0.0, min(IDLE_WAIT, self.tick()))

    async def serve(self) -> None:
        """Serve until :meth:`stop` or ``should_stop`` (``ServeLoop``)."""
        self._stop = asyncio.Event()
        if self._stop_early:
            self._stop.set()
        ctx = zmq.asyncio.Context()
        sock = router(ctx, linger=1000, max_frame=ctlproto.MAX_FRAME_BYTES)
        ctl = runstate.ctl_sock(self.rdir)
        # serial: gone before its turn, not served; concurrent: a client that goes away
        # cancels its request
        self.loop = ServeLoop([sock], self._reply, stop=self._stop, stopping=self.stopping,
                              tick=self._wait, serial=not self.concurrent)
        sock.bind(f"ipc://{ctl}")
        os.chmod(ctl, 0o600)
        try:
            await self.loop.serve()
        finally:
            sock.close(linger=1000)
            ctx.term()

    def run(self) -> None:
        """:meth:`serve` on a new event loop (the supervisors: no loop of their own)."""
        asyncio.run(self.serve())
