"""The client of a long-lived sim testbed (``testbed up --backend sim``, ``testbed.attach``).

Theory of operation: ``SimClient.up`` spawns ``python -m testbed.sim.server`` (its progress
followed as the Mininet supervisor's, ``testbed.spawn``); after that every operation is one
request on the server's ``ctl.sock`` (``testbed.ctlclient``): node verbs carry the node's name,
``now``/``advance`` are the server's ``clock``. The event log and console lines are files in
the run directory, read as on Mininet. What needs a namespace is refused (``exec`` runs one
lnetctl/lctl command line, ``testbed.sim.node.exec_words``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodes.echo import shown
from nodes.recorder import DEFAULT_PERIOD
from testbed.base import Completed, NodeVerbs, TestbedError
from testbed.ctlclient import CtlTestbed
from testbed.sim.node import exec_words
from testbed.spawn import Progress, observe_args, start_testbed

#: Bound on bring-up: the simulator configures ~1,000 nodes a second on this box.
UP_TIMEOUT = 60.0
UP_TIMEOUT_PER_NODE = 0.05
#: Bound on a node verb (a paced ping waits its own timeout on the wall clock).
VERB_TIMEOUT = 600.0


class SimClientNode(NodeVerbs):
    """A node of a sim testbed served by another process."""

    def __init__(self, testbed: SimClient, name: str, info: dict[str, Any]) -> None:
        self.testbed = testbed
        self.name = name
        self.nids: list[str] = list(info.get("nids", []))

    def __repr__(self) -> str:
        return f"<SimClientNode {self.testbed.name}/{self.name}>"

    def _request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One request on the server's socket (``NodeVerbs`` builds the verbs and bursts on
        it); ``timeout`` is at least ``VERB_TIMEOUT``: a paced verb waits on the wall clock."""
        reply = self.testbed._ctl({**msg, "node": self.name},
                                  timeout=max(timeout, VERB_TIMEOUT))
        if not reply.get("ok", True) and "rc" not in reply and msg["cmd"] not in ("put", "get"):
            raise TestbedError(str(reply.get("error", f"node {self.name}: failed")))
        return reply

    def exec(self, argv: Sequence[str], *, input: str | None = None,
             timeout: float = 60.0) -> Completed:
        """One ``lnetctl``/``lctl`` command line; anything else is refused (one line)."""
        cmd, words = exec_words(argv)
        return self.verb(cmd, words, timeout)

    def log(self) -> str:
        return str(self._request({"cmd": "log"}, 60.0).get("text", ""))


class SimClient(CtlTestbed):
    """A sim testbed served by its own process (``testbed.sim.server``)."""

    backend = "sim"
    server = "sim server"

    @classmethod
    def up(cls, topology_path: str | os.PathLike[str] | None = None, name: str | None = None,
           progress: Progress | None = None, *, root: str | Path | None = None,
           seed: int = 0, speed: str | float = 1, record_period: float = DEFAULT_PERIOD,
           trace_messages: bool = False) -> SimClient:
        """Start the server and return once its testbed is up (its routes too); every node
        records every ``record_period`` virtual seconds into ``RUNDIR/nodes/NODE.rec`` (0:
        no recorder), ``trace_messages`` puts the message trace in the event log.

        Raises:
            TopologyError: the topology is invalid (nothing was started).
            TestbedError: bring-up failed (the server removed what it made).
        """
        name, rdir, base, ready = start_testbed(
            "testbed.sim.server", topology_path, name, root,
            ["--seed", str(int(seed)), "--speed", str(speed),
             *observe_args(record_period, trace_messages)], UP_TIMEOUT, UP_TIMEOUT_PER_NODE,
            progress, backend="sim")
        tb = cls(name, rdir, base)
        tb.warnings = [str(w) for w in ready.get("warnings", [])]
        return tb

    def node(self, name: str) -> SimClientNode:
        status = self._status or self.status()
        if name not in status["nodes"]:
            raise TestbedError(f"testbed {self.name} has no node {shown(name)} "
                               f"(nodes: {', '.join(status['nodes'])})")
        return SimClientNode(self, name, status["nodes"][name])

    def clock(self, advance: float | None = None) -> dict[str, Any]:
        """The server's clock (``now``, ``speed``); ``advance`` virtual seconds first."""
        msg: dict[str, Any] = {"cmd": "clock", "op": "show"}
        if advance is not None:
            msg = {"cmd": "clock", "op": "advance", "seconds": advance}
        return self._ok(msg, timeout=VERB_TIMEOUT)

    @property
    def now(self) -> float:
        """Virtual seconds (the clock of the event log's ``t``)."""
        return float(self.clock()["now"])

    def advance(self, seconds: float) -> None:
        """``seconds`` of virtual time at once (at any speed; the pacing goes on from there)."""
        self.clock(advance=seconds)
