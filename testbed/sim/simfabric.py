"""The sim backend's fabric: ``testbed.sim.fabric.Fabric`` with what the node daemon's drivers add.

Theory of operation: the daemon writes each engine's health notices to the event log
(hlth-lnt-udev, ``nodes/daemon/eventlog.py``) and its socklnd can be told that an NI's link
went down without the interface changing (hlth-dbg-sim-ni-down/up, ``lctl net_ni_down``).
The sim backend's fabric (``sim_fabric``) does both on the virtual clock: after every batch of
a node's actions its ``Observers`` drain that engine's notices into ``event_log`` (same kinds
and fields as on Mininet, virtual ``t``), and NIDs in ``lnd_down`` (``Paths.lnd_down``) fail
their own transmissions at once with -ENETDOWN / REMOTE_DROPPED, as the socklnd does after a
link-down event, while peers still reach them (the interface itself is up).

Observation, as a node daemon does it (issue 16): with ``trace_messages`` the engines' message
trace goes to the event log as ``msg`` events; with a ``record_dir`` every node's driver gets a
recorder (``nodes/recorder.py``) writing ``DIR/nodes/NODE.rec`` on virtual time, sampled after
every batch of its actions and at the end of a period on a virtual timer (a fabric entry that
never touches an engine, so recording changes nothing the engines do).

``Observers`` is a part of the fabric (``Fabric.observers``), not a subclass of it (issue 29):
the fabric hands it each node's driver as it is made (``attach``).
"""

from __future__ import annotations

from pathlib import Path

from nodes.driver import NodeDriver
from nodes.recorder import DEFAULT_PERIOD, Recorder, rec_path
from testbed.sim.fabric import Fabric
from testbed.sim.simdriver import FabricDriver


class Observers:
    """The node daemon's observation on the fabric: notices, message trace, recorders."""

    def __init__(self, trace_messages: bool = False, record_dir: Path | None = None,
                 record_period: float = DEFAULT_PERIOD) -> None:
        self.trace_messages = trace_messages
        self.record_dir = record_dir
        self.record_period = record_period

    def attach(self, fab: Fabric, name: str, drv: NodeDriver) -> None:
        """Node ``name``'s new driver logs its notices (and trace, and records) as a daemon's."""
        drv.notice_sink = lambda kind, fields: fab.record(kind, name, **fields)
        if self.trace_messages:  # the engine's message trace as "msg" events (TRACE-SCHEMA)
            records, stamp = fab.compact_log(), fab.stamp
            drv.set_trace_sink(lambda act: records.append(  # ``record``, one dict
                act.record(stamp(), name)))
            if isinstance(drv, FabricDriver):
                drv.trace_to_log = True  # (what the sink does, done without calling it)
        if self.record_dir is not None:
            self._attach_recorder(fab, name, drv, self.record_dir)

    def _attach_recorder(self, fab: Fabric, name: str, drv: NodeDriver, rdir: Path) -> None:
        drv.recorder = Recorder(drv.engine, rec_path(rdir, name), node=name,
                                period=self.record_period, clock="virtual")
        drv.arm_sample = lambda at: fab.at(at, lambda: self._sample_due(fab, name, drv))

    def start_recording(self, fab: Fabric, rdir: Path, period: float = DEFAULT_PERIOD) -> None:
        """Record every node of ``fab``, present and future, into ``rdir/nodes/NODE.rec``."""
        self.record_dir, self.record_period = Path(rdir), period
        for name, drv in fab.drivers.items():
            if drv.recorder is None:
                self._attach_recorder(fab, name, drv, self.record_dir)

    @staticmethod
    def _sample_due(fab: Fabric, name: str, drv: NodeDriver) -> None:
        if fab.drivers.get(name) is drv:  # (a killed node's recorder is closed)
            drv.on_sample_timer()


def sim_fabric(latency: float = 0.001, *, seed: int = 0, jitter: float = 0.0,
               trace_messages: bool = False, record_dir: Path | None = None,
               record_period: float = DEFAULT_PERIOD) -> Fabric:
    """The sim backend's fabric: ``tracked`` (SimRuntime and the verbs change engines only
    through drivers, flush or refresh), no ``transmits`` kept, the daemon's observation."""
    return Fabric(latency, seed=seed, jitter=jitter, tracked=True,
                  observers=Observers(trace_messages, record_dir, record_period))
