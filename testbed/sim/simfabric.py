"""The sim backend's fabric: ``testbed.sim.fabric.Fabric`` plus what the node daemon's drivers add.

Theory of operation: the daemon writes each engine's health notices to the event log
(hlth-lnt-udev, ``nodes/daemon/eventlog.py``) and its socklnd can be told that an NI's link
went down without the interface changing (hlth-dbg-sim-ni-down/up, ``lctl net_ni_down``).
``SimFabric`` does both on the virtual clock: after every batch of a node's actions it drains
that engine's notices into ``event_log`` (same kinds and fields as on Mininet, virtual ``t``),
and NIDs in ``lnd_down`` fail their own transmissions at once with -ENETDOWN /
REMOTE_DROPPED, as the socklnd does after a link-down event, while peers still reach them
(the interface itself is up).

Observation, as a node daemon does it (issue 16): with ``trace_messages`` the engines' message
trace goes to the event log as ``msg`` events; with a ``record_dir`` every node's driver gets a
recorder (``nodes/recorder.py``) writing ``DIR/nodes/NODE.rec`` on virtual time, sampled after
every batch of its actions and at the end of a period on a virtual timer (a fabric entry that
never touches an engine, so recording changes nothing the engines do).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodes.driver import NodeDriver
from nodes.lnd import errmap
from nodes.lnet.actions import Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import ENETDOWN
from nodes.lnet.nid import NID
from nodes.recorder import DEFAULT_PERIOD, Recorder, rec_path
from testbed.sim.fabric import Fabric
from testbed.sim.netfaults import Rule, vanish_failure
from testbed.sim.simdriver import FabricDriver
from testbed.sim.watched import _Watched


class SimFabric(Fabric):
    """A ``Fabric`` with the daemon's notice log and simulated LND link-down NIs."""

    def __init__(self, latency: float = 0.001, *, seed: int = 0, jitter: float = 0.0,
                 trace_messages: bool = False, record_dir: Path | None = None,
                 record_period: float = DEFAULT_PERIOD) -> None:
        super().__init__(latency, seed=seed, jitter=jitter)
        #: SimRuntime and the verbs change engines only through drivers, flush or refresh
        self.tracked = True
        self.keep_transmits = False  # (nothing reads them: ``Fabric.keep_transmits``)
        self.record_dir = record_dir
        self.record_period = record_period
        #: NIs whose LND reported a simulated link down
        self.lnd_down = _Watched(self.changed)
        self.trace_messages = trace_messages
        #: active fault activations (testbed/sim/netfaults.py ``Rule``), set by ``SimFaults``
        self.rules: list[Rule] = []

    def _driver(self, name: str, engine: LNetEngine) -> NodeDriver:
        drv = super()._driver(name, engine)
        drv.notice_sink = lambda kind, fields: self.record(kind, name, **fields)
        if self.trace_messages:  # the engine's message trace as "msg" events (TRACE-SCHEMA)
            drv.set_trace_sink(lambda act: self._records.append(  # ``record``, one dict
                act.record(self.stamp(), name)))
            if isinstance(drv, FabricDriver):
                drv.trace_to_log = True  # (what the sink does, done without calling it)
        if self.record_dir is not None:
            self._attach_recorder(name, drv, self.record_dir)
        return drv

    def _attach_recorder(self, name: str, drv: NodeDriver, rdir: Path) -> None:
        drv.recorder = Recorder(drv.engine, rec_path(rdir, name), node=name,
                                period=self.record_period, clock="virtual")
        drv.arm_sample = lambda at: self._at(at, lambda: self._sample_due(name, drv))

    def start_recording(self, rdir: Path, period: float = DEFAULT_PERIOD) -> None:
        """Record every node, present and future, into ``rdir/nodes/NODE.rec`` from now."""
        self.record_dir, self.record_period = Path(rdir), period
        for name, drv in self.drivers.items():
            if drv.recorder is None:
                self._attach_recorder(name, drv, self.record_dir)

    def _sample_due(self, name: str, drv: NodeDriver) -> None:
        if self.drivers.get(name) is drv:  # (a killed node's recorder is closed)
            drv.on_sample_timer()

    def remove(self, name: str) -> None:
        drv = self.drivers.get(name)
        super().remove(name)
        if drv is not None and drv.recorder is not None:
            drv.on_sample_timer()
            drv.recorder.close()

    def close_recorders(self) -> None:
        """Write what every recorder holds (the testbed goes down)."""
        for drv in self.drivers.values():
            if drv.recorder is not None:
                drv.on_sample_timer()
                drv.recorder.close()

    def flush_recorders(self) -> None:
        """Write the rows every recorder has queued (a reader is about to look)."""
        for drv in self.drivers.values():
            if drv.recorder is not None:
                drv.recorder.flush()

    def path_error(self, a: NID, b: NID) -> int:
        if self.lnd_down and a in self.lnd_down:
            return -ENETDOWN
        return super().path_error(a, b)

    def record_global(self, kind: str, /, **fields: Any) -> None:
        """An event of the testbed, not of one node (faults): ``{"t", "kind", ...}``."""
        self._records.append({"t": self.stamp(), "kind": kind, **fields})

    def _transmit(self, name: str, act: Transmit) -> None:
        """With faults active: a message may vanish (its tx fails at the sending NI's LND
        timeout, as the socklnd's would) or be held up (TCP retransmissions, delay)."""
        if not self.rules:
            super()._transmit(name, act)
        else:
            self._transmit_ruled(name, act)

    def _transmit_ruled(self, name: str, act: Transmit) -> None:
        """``_transmit`` with faults active (its lambdas here: compiled, their environment is
        allocated on every call of the function holding them, so not per message)."""
        link = self.link(act.ni, act.lpni)
        if link.rc or self.hold or link.dst is None:
            super()._transmit(name, act)
            return
        ni = self.engines[name].ni_by_nid(act.ni)
        timeout = float(ni.lnd_timeout) if ni is not None else 50.0
        if any(rule.vanishes(act, self.connected, link.dst) for rule in self.rules):
            if self.established(name, act):  # the write is taken, then lost (paths.py)
                self._at(self.now + link.latency, lambda: self._lost(name, act))
                return
            rc, hstatus = vanish_failure(False)
            self._fail_at(self.now + timeout, name, act, rc, hstatus)
            return
        for rule in self.rules:  # the packet kinds' models (netmodels.py)
            model = rule.model
            if model is not None:
                matched = rule.matches(act)
                if matched:
                    model.count("matched")
                if model.take(self, name, act, link, timeout, matched):
                    return
        extra = sum(rule.delay(act) for rule in self.rules)
        if extra >= timeout:  # the socklnd gave up on the connection first
            rc, hstatus = errmap.FAILURES["posted_timeout"]
            self._fail_at(self.now + timeout, name, act, rc, hstatus)
            return
        delay = link.latency + extra + (self.rng.uniform(0, self.jitter) if self.jitter else 0.0)
        self._at_deliver(self.now + delay, name, act)

    def flush(self, name: str) -> None:
        """After direct engine calls (a verb's DLC call): node ``name``'s health notices go
        to the event log (notify.py) and its timer is re-armed if its deadline moved."""
        drv = self.drivers.get(name)
        if drv is not None:
            drv.flush_notices()
            drv.rearm()
            drv.sample()

