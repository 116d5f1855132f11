"""The steps of an exploration schedule, played on a testbed of either backend.

Theory of operation (issue 17 item 2): the runner and the pytest files the shrinker writes use
the same ``Replay`` calls in the same order, so a test replays on ``--lnet-backend=sim``
exactly what ``explore`` ran (same seed, same calls: the same event log), and runs on Mininet
with wall-clock waits. Times are seconds since the replay started (``origin``).

* ``at(t)``: let time pass until ``t``. On the sim the fabric is stepped here with a
  livelock guard: virtual time that stops moving while events keep firing
  (``LIVELOCK_STEPS`` at one instant) raises ``Livelock`` naming the nodes whose timers are
  due, instead of hanging. On Mininet: a sleep.
* ``fault(kind, **spec)``: the testbed's fault API (reverts itself after ``duration``).
* ``lctl(node, *argv)``: an LNet drop/delay rule command on a node.
* ``stream(...)``: one PUT/GET every ``every`` seconds, ``count`` times, without waiting for
  the previous one: on the sim each op is started on the fabric's own clock (deterministic);
  on Mininet a thread starts, at each op's time, a thread that issues a ``put``/``get`` verb
  of that one op (an op that waits for its retries or its LND timeout must not hold up the
  next one, or the ops would drift away from the faults they were found with).
* ``probe(node, nid)``: one fresh PUT, waited for (the liveness phase).

A step on a node that is down (killed) is skipped on both backends and counted in
``skipped``; a fault the testbed refuses is skipped the same way. Everything here is
deterministic on the sim: no wall clock, no threads, no unordered iteration.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodes.daemon.runtime import SRPC_RDMA_PORTAL
from nodes.lnet.actions import MDEvent
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID
from testbed.base import TestbedError
from testbed.observe.check import check_events
from testbed.observe.checktypes import Result
from testbed.observe.pytest_check import events_of

#: steps run at one virtual instant before time is declared stuck
LIVELOCK_STEPS = 50_000


class Livelock(Exception):
    """Virtual time stopped: events keep firing at one instant."""

    def __init__(self, t: float, nodes: list[str]) -> None:
        super().__init__(f"virtual time stuck at t={t:.6f}: {LIVELOCK_STEPS} steps at that "
                         f"instant; timers due on {', '.join(nodes) or 'no node (fabric)'}")
        self.t = t
        self.nodes = nodes


@dataclass
class StreamRun:
    """What one stream did: ops started, finished and failed (with their kinds)."""

    node: str
    op: str
    dst: str
    started: int = 0
    done: int = 0
    failed: int = 0
    skipped: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def finished(self, kind: str, status: int) -> None:
        self.done += 1
        want = "ACK" if self.op == "put" else "REPLY"
        if kind != want or status != 0:
            self.failed += 1
            key = f"{kind}:{status}"
            self.errors[key] = self.errors.get(key, 0) + 1


class Replay:
    """Schedule steps on ``tb`` (a ``SimTestbed`` or a Mininet testbed); see the module doc."""

    def __init__(self, tb: Any) -> None:
        self.tb = tb
        self.sim = hasattr(tb, "fabric") and hasattr(tb, "runtimes")
        self.origin = float(tb.now)
        self.streams: list[StreamRun] = []
        self.skipped: list[str] = []
        self._payloads: dict[int, bytes] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ time
    @property
    def elapsed(self) -> float:
        return float(self.tb.now) - self.origin

    def at(self, t: float) -> None:
        """Let time pass until ``t`` seconds after the origin (never backwards)."""
        self.advance(t - self.elapsed)

    def advance(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if not self.sim:
            self.tb.advance(seconds)
            return
        self._run_until(float(self.tb.now) + seconds, None)

    def _run_until(self, t_end: float, done: Callable[[], bool] | None) -> None:
        """Step the sim's fabric until ``t_end`` or ``done()`` (None: never), guarding against
        livelock (``Scheduler.run_guarded``: the loop runs compiled)."""
        fab = self.tb.fabric
        with self.tb.lock:
            if not fab.run_guarded(t_end, done, LIVELOCK_STEPS):
                due = [n for n, e in fab.engines.items()
                       if (d := e.next_deadline()) is not None and d <= fab.now]
                raise Livelock(fab.now, due)

    # ------------------------------------------------------------------ steps
    def alive(self, node: str) -> bool:
        if self.sim:
            return node not in self.tb.dead
        return True

    def fault(self, kind: str, **spec: Any) -> None:
        """Add a fault through the testbed's fault API (skipped if refused)."""
        try:
            self.tb.fault.add(kind, **spec)
        except TestbedError as exc:
            self.skipped.append(f"t={self.elapsed:g} fault {kind}: {exc}")

    def lctl(self, node: str, *argv: str) -> None:
        """``lctl ARGV`` on ``node`` (skipped if the node is down)."""
        if not self.alive(node):
            self.skipped.append(f"t={self.elapsed:g} {node}: lctl {argv[0]}: node down")
            return
        try:
            res = self.tb.node(node).lctl(*argv)
        except TestbedError as exc:
            self.skipped.append(f"t={self.elapsed:g} {node}: lctl {argv[0]}: {exc}")
            return
        if res.rc != 0:
            self.skipped.append(f"t={self.elapsed:g} {node}: lctl {' '.join(argv)}: rc "
                                f"{res.rc} {(res.out + res.err).strip()}")

    def stream(self, node: str, op: str, dst: str, *, every: float, count: int,
               size: int) -> StreamRun:
        """Start a stream of ``count`` ops, one every ``every`` seconds (module doc)."""
        run = StreamRun(node, op, dst)
        self.streams.append(run)
        if self.sim:
            with self.tb.lock:
                self._sim_op(run, NID.parse(dst), every, count, size, 0)
        else:
            th = threading.Thread(target=self._wall_stream, args=(run, every, count, size),
                                  daemon=True, name=f"explore-{node}")
            self._threads.append(th)
            th.start()
        return run

    def _payload(self, size: int) -> bytes:
        data = self._payloads.get(size)
        if data is None:
            data = self._payloads[size] = bytes(size)
        return data

    def _start(self, run: StreamRun, dst: NID, size: int,
               on_final: Callable[[MDEvent], None] | None = None) -> bool:
        """Start one op of ``run`` on the sim now; False if it could not start."""
        tb = self.tb
        if run.node in tb.dead:
            run.skipped += 1
            return False
        rt = tb.runtimes[run.node]
        now = tb.fabric.now
        try:
            if run.op == "put":
                handle, actions = rt.engine.put(now, dst, payload=self._payload(size),
                                                portal=SRPC_RDMA_PORTAL)
            else:
                handle, actions = rt.engine.get(now, dst, length=size, portal=SRPC_RDMA_PORTAL)
        except LNetConfigError as exc:
            run.started += 1
            run.finished(f"ERR({exc.errno})", exc.errno)
            return False
        run.started += 1

        def on_event(ev: MDEvent) -> None:
            if ev.unlinked:
                run.finished(ev.kind, ev.status)
                if on_final is not None:
                    on_final(ev)

        rt.driver.watch(handle, on_event)
        rt.execute(actions)
        return True

    def _sim_op(self, run: StreamRun, dst: NID, every: float, count: int, size: int,
                k: int) -> None:
        self._start(run, dst, size)
        if k + 1 < count:
            fab = self.tb.fabric
            fab.at(fab.now + every,  # the fabric's own queue: deterministic order
                    lambda: self._sim_op(run, dst, every, count, size, k + 1))

    def _wall_stream(self, run: StreamRun, every: float, count: int, size: int) -> None:
        start = time.monotonic()
        ops: list[threading.Thread] = []
        for k in range(count):
            delay = start + k * every - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            th = threading.Thread(target=self._wall_op, args=(run, size), daemon=True,
                                  name=f"explore-{run.node}-{k}")
            ops.append(th)
            th.start()
        for th in ops:
            th.join(330.0)

    def _wall_op(self, run: StreamRun, size: int) -> None:
        """One op of a Mininet stream, counted under the replay's lock."""
        with self._lock:
            run.started += 1
        try:
            reply = getattr(self.tb.node(run.node), run.op)(run.dst, count=1, size=size,
                                                            timeout=300.0)
        except TestbedError:
            reply = {}
        with self._lock:
            if not reply.get("ok"):
                run.skipped += 1
                return
            run.done += 1
            if reply.get("failed"):
                run.failed += 1
                for key, n in (reply.get("errors") or {}).items():
                    run.errors[key] = run.errors.get(key, 0) + int(n)

    def join(self, timeout: float = 600.0) -> None:
        """Mininet: wait for the stream threads (the sim's streams live on its clock)."""
        for th in self._threads:
            th.join(timeout)

    def probe(self, node: str, nid: str, limit: float) -> tuple[bool, str]:
        """One fresh PUT from ``node`` to ``nid``, waited for at most ``limit`` seconds:
        (completed OK, what happened)."""
        if not self.sim:
            try:
                reply = self.tb.node(node).put(nid, count=1, size=0, timeout=limit + 30.0)
            except TestbedError as exc:
                return False, str(exc)
            ok = bool(reply.get("ok")) and reply.get("completed") == 1
            return ok, "completed" if ok else f"{reply.get('errors') or reply.get('error')}"
        run = StreamRun(node, "put", nid)
        finals: list[MDEvent] = []
        with self.tb.lock:
            if not self._start(run, NID.parse(nid), 0, finals.append) and not finals:
                return False, f"not started ({run.errors or 'node down'})"
        self._run_until(float(self.tb.now) + limit, lambda: bool(finals))
        if not finals:
            return False, f"no completion within {limit:g} s"
        ev = finals[-1]
        ok = ev.kind == "ACK" and ev.status == 0
        return ok, "completed" if ok else f"{ev.kind} status {ev.status}"

    # ------------------------------------------------------------------ phases
    def heal(self) -> None:
        """End every fault: the testbed's (``fault clear``: links up, killed nodes
        restarted) and every node's LNet drop/delay rules."""
        self.tb.fault.clear()
        for node in self.tb.nodes:
            if self.alive(node):
                self.lctl(node, "net_drop_reset")
                self.lctl(node, "net_delay_reset")

    def check(self) -> Result:
        """``testbed check`` over the whole log so far (events and message traces)."""
        if self.sim:  # the log as kept: the checker reads its compact records as they are
            return check_events(self.tb.fabric.compact_log())
        return check_events(events_of(self.tb))
