"""The sim backend's fabric: ``testbed.sim.fabric.Fabric`` plus what the node daemon's drivers add.

Theory of operation: the daemon writes each engine's health notices to the event log
(hlth-lnt-udev, ``nodes/daemon/eventlog.py``) and its socklnd can be told that an NI's link
went down without the interface changing (hlth-dbg-sim-ni-down/up, ``lctl net_ni_down``).
``SimFabric`` does both on the virtual clock: after every batch of a node's actions it drains
that engine's notices into ``event_log`` (same kinds and fields as on Mininet, virtual ``t``),
and NIDs in ``lnd_down`` fail their own transmissions at once with -ENETDOWN /
REMOTE_DROPPED, as the socklnd does after a link-down event, while peers still reach them
(the interface itself is up).
"""

from __future__ import annotations

from nodes.lnet import notify
from nodes.lnet.actions import Action
from nodes.lnet.errors import ENETDOWN
from nodes.lnet.nid import NID
from testbed.sim.fabric import Fabric


class SimFabric(Fabric):
    """A ``Fabric`` with the daemon's notice log and simulated LND link-down NIs."""

    tracked = True  # SimRuntime/verbs change engines only via apply, flush or refresh

    def __init__(self, latency: float = 0.001, *, seed: int = 0, jitter: float = 0.0) -> None:
        super().__init__(latency, seed=seed, jitter=jitter)
        self.lnd_down: set[NID] = set()  # NIs whose LND reported a simulated link down

    def path_error(self, a: NID, b: NID) -> int:
        if a in self.lnd_down:
            return -ENETDOWN
        return super().path_error(a, b)

    def apply(self, name: str, actions: list[Action]) -> None:
        super().apply(name, actions)
        self.flush(name)

    def flush(self, name: str) -> None:
        """Move node ``name``'s health notices into the event log (notify.py); the node's
        deadline is re-asked (``flush`` follows every verb's direct engine calls)."""
        engine = self.engines.get(name)
        if engine is None:
            return
        self.touch(name)
        for kind, fields in notify.drain(engine):
            self.record(kind, name, **fields)
