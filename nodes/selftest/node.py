"""One node's lnet_selftest: srpc, the framework, the tests and the console, sans-I/O.

Theory of operation (STYLE rule 1, as the engine): ``Selftest`` is fed the events of its own
MDs (``on_md_event``; ``handles`` says which are its) and the time (``handle_timer``,
``next_deadline``), and returns engine actions; it calls the engine (put, get, attach_me,
unlink) but owns no socket and no clock. ``attach`` makes one the upper layer of a node
driver (``nodes/driver.py``), which routes those MD events here, carries the returned
actions out and keeps the timer: the node daemon and the simulator serve selftest alike, as
if ``lnet_selftest`` were loaded on every node.

The lst console's ioctls (``ioctl``) and ``sleep`` are long operations: each gets a handle
(negative, never an MD's) whose completion is an ``MDEvent`` of kind ``LST`` with
``unlinked`` set, so a caller waits for it exactly as for an MD (the runtimes'
``wait_final``: a future on the daemon, virtual time on the sim); ``result(handle)`` is the
answer. The node also keeps the testbed's ``put``/``get`` bursts answered: a sink on
``SRPC_RDMA_PORTAL`` for match bits 0, which srpc never uses (its ids start at seconds<<48).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Generator
from typing import Any

from nodes.lnet.actions import Action, MDEvent
from nodes.lnet.engine import LNetEngine
from nodes.lnet.nid import LO_NID, NID
from nodes.selftest.console import Console
from nodes.selftest.contypes import Trans
from nodes.selftest.framework import RPC_TIMEOUT, Framework
from nodes.selftest.rpc import Srpc
from nodes.selftest.rpcclient import SrpcClient
from nodes.selftest.rpcserver import SrpcServer
from nodes.selftest.sfwtest import Tests
from nodes.selftest.timers import TimerHeap
from nodes.selftest.wire import SRPC_RDMA_PORTAL

log = logging.getLogger("lnet.selftest")


class Selftest:
    """lnet_selftest on one node (console and test node at once)."""

    def __init__(self, engine: LNetEngine, now: float = 0.0,
                 burst_data: bytes | None = None) -> None:
        self.engine = engine
        self.timers = TimerHeap()
        self.srpc = Srpc(engine, self.timers, (int(now) & 0xFFFF) << 48)
        self.srpc.now = now
        self.client = SrpcClient(self.srpc)
        self.server = SrpcServer(self.srpc)
        self.tests = Tests(self.srpc, self.client, RPC_TIMEOUT)
        self.framework = Framework(engine, self.srpc, self.server, self.timers, self.tests)
        self.console = Console(self.srpc, self.client, RPC_TIMEOUT, self._local_nid)
        #: MD handle -> its callback: the driver routes these handles' events here
        self.handles = self.srpc.handles
        self._op_ids = itertools.count(1)
        self._results: dict[int, dict[str, Any]] = {}
        #: operation handle -> the transaction its generator waits for now
        self._waits: dict[int, Trans] = {}
        if burst_data is not None:  # the testbed's put/get bursts (match bits 0 only)
            engine.attach_me(SRPC_RDMA_PORTAL, 0, 0, data=burst_data, sink=True)

    def _local_nid(self) -> NID:
        """``LNetGetId(1, ...)``: the first NI after the loopback one."""
        nis = self.engine.local_nis()
        return nis[0].nid if nis else LO_NID

    def _take(self) -> list[Action]:
        out, self.srpc.out = self.srpc.out, []
        return out

    # ------------------------------------------------------------------ upper layer
    def on_md_event(self, ev: MDEvent, now: float) -> list[Action]:
        srpc = self.srpc
        srpc.now = now
        srpc.on_md_event(ev)
        out, srpc.out = srpc.out, []
        return out

    def next_deadline(self) -> float | None:
        return self.timers.next_deadline()

    def handle_timer(self, now: float) -> list[Action]:
        self.srpc.now = now
        for key in self.timers.due(now):
            kind = key[0]  # type: ignore[index]
            if kind == "rpc":
                self.client.expire()
            elif kind == "trans":
                self.console.conrpc.timed_out(key[1])  # type: ignore[index]
            elif kind == "session":
                self.framework.expired()
            elif kind == "pinger":
                self.console.pinger()
            elif kind == "work":
                self.tests.run_ready()
            elif kind == "sleep":
                self._complete(key[1], {"rc": 0})  # type: ignore[index]
        return self._take()

    # ------------------------------------------------------------------ console
    def ioctl(self, now: float, opc: str, key: int, args: dict[str, Any]
              ) -> tuple[int, list[Action]]:
        """Start console ioctl ``opc``: (handle, actions); its ``LST`` event says done."""
        self.srpc.now = now
        h = -next(self._op_ids)
        self._step(h, self.console.ioctl(opc, key, args))
        return h, self._take()

    def sleep(self, now: float, seconds: float) -> tuple[int, list[Action]]:
        """An operation that completes ``seconds`` from now (lst's ``sleep`` on any clock)."""
        self.srpc.now = now
        h = -next(self._op_ids)
        self.timers.arm(("sleep", h), now + max(0.0, seconds))
        return h, []

    def interrupt(self, now: float, handle: int) -> list[Action]:
        """The lst waiting for operation ``handle`` went away (its client closed the control
        connection): the wait ends as a signal ends ``lstcon_rpc_trans_postwait``'s
        ``wait_event_interruptible``: posting stops, RPCs still out are aborted with -EINTR
        and the operation finishes from there (issue 27 item 1)."""
        self.srpc.now = now
        trans = self._waits.get(handle)
        if trans is not None and trans.on_done is not None:
            trans.interrupted = True
            done, trans.on_done = trans.on_done, None
            done()
        return self._take()

    def result(self, handle: int) -> dict[str, Any]:
        """The answer of a completed operation (once)."""
        return self._results.pop(handle, {"rc": 0})

    def _step(self, h: int, gen: Generator[Trans, None, dict[str, Any]]) -> None:
        """Run the ioctl's generator until it waits for a transaction, or ends."""
        try:
            trans = next(gen)
        except StopIteration as stop:
            self._waits.pop(h, None)
            self._complete(h, stop.value)
            return
        except Exception as exc:  # a bug here must not take the node down
            self._waits.pop(h, None)
            log.exception("lst ioctl failed")
            self._complete(h, {"rc": -14, "error": f"internal error: {exc!r}"})  # -EFAULT
            return
        self._waits[h] = trans
        trans.on_done = lambda: self._step(h, gen)

    def _complete(self, h: int, result: dict[str, Any]) -> None:
        self._results[h] = result
        self.srpc.out.append(MDEvent(handle=h, kind="LST", status=int(result.get("rc", 0)),
                                     unlinked=True))


def attach(driver: Any, burst_data: bytes | None = None) -> Selftest:
    """Serve selftest on ``driver``'s node (``modprobe lnet_selftest``)."""
    st = Selftest(driver.engine, driver.now(), burst_data)
    driver.upper = st
    return st
