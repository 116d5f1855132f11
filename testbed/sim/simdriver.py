"""A node's driver on the in-memory fabric: ``nodes/driver.py``'s, calling the fabric directly.

Theory of operation: ``NodeDriver`` carries out an engine's actions through the callbacks its
runtime gives it (the daemon's loop clock and socklnd, or the fabric's). On the fabric four of
them run per message or per batch: the clock, the wire (``Fabric.send``), the MD event log
(``Fabric.md_event``) and the deferred re-arm (``Scheduler.dirty``). Compiled (nodes/native.py),
a call through a callable object (a ``functools.partial``, a lambda) goes through Python's
calling convention and argument parsing, a call to an overriding method does not: so the
fabric's driver overrides those four to call the fabric itself; the callbacks, the same
fabric's, are still given (and ``defer_rearm=None`` still means "re-arm after each batch").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodes.driver import NodeDriver
from nodes.lnet.actions import MDEvent, MsgTrace, Transmit
from nodes.lnet.engine import LNetEngine

if TYPE_CHECKING:
    from testbed.sim.fabric import Fabric


class FabricDriver(NodeDriver):
    """Node ``name``'s driver on fabric ``fab``: the fabric's clock, wire, timer heap and logs.
    The callbacks are the fabric's; the per-message ones are also overridden, to call the
    fabric directly (compiled code to compiled code, no callable object in between); the clock and
timer heap are the fabric's scheduler (``Fabric.sched``), held here."""

    def __init__(self, fab: Fabric, name: str, engine: LNetEngine) -> None:
        sched = fab.sched
        super().__init__(
            engine, now=lambda: sched.now, transmit=functools.partial(fab.send, name),
            arm_timer=functools.partial(sched.arm, name),
            defer_rearm=functools.partial(sched.dirty, name),  # (asked in ``_step``)
            notify_peer_down=functools.partial(fab.peer_down, name),
            log=lambda act: fab.log.append((sched.now, name, act.text)),
            md_sink=functools.partial(fab.md_event, name))
        self.fab, self.sched, self.name = fab, sched, name
        #: the trace sink is the fabric's event log (``SimFabric``): records appended here
        self.trace_to_log = False

    def set_trace_sink(self, sink: Callable[[Any], None] | None) -> None:
        self.trace_to_log = False  # (a sink of someone else's: called)
        super().set_trace_sink(sink)

    def sink_trace(self, rec: MsgTrace) -> None:
        if self.trace_to_log:  # ``SimFabric``'s sink, without the call through a lambda
            fab = self.fab
            fab.records.append(rec.record(self.sched.stamp(), self.name))
        elif self.trace_sink is not None:
            self.trace_sink(rec)

    def now(self) -> float:
        return self.sched.now

    def transmit(self, act: Transmit) -> None:
        self.fab.send(self.name, act)

    def sink_md(self, ev: MDEvent) -> None:
        if self.md_sink is not None:
            self.fab.md_event(self.name, ev)

    def batch_done(self) -> None:
        if self._defer_rearm is not None:
            self.sched.dirty(self.name)
        else:
            self.rearm()


def close_recorders(drivers: dict[str, NodeDriver]) -> None:
    """Write what every driver's recorder holds (the testbed goes down)."""
    for drv in drivers.values():
        if drv.recorder is not None:
            drv.on_sample_timer()
            drv.recorder.close()


def flush_recorders(drivers: dict[str, NodeDriver]) -> None:
    """Write the rows every driver's recorder has queued (a reader is about to look)."""
    for drv in drivers.values():
        if drv.recorder is not None:
            drv.recorder.flush()
