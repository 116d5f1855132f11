"""The node daemon's writers of the testbed event log (health notices, workload events) and of
its message trace.

Theory of operation (hlth-lnt-udev): real LNet was to raise udev events for errors seen on a
local or peer NI; an emulated node has no udev, so the daemon appends the engine's health
notices (``nodes/lnet/notify.py``) to its testbed's event log, ``$LNET_TESTBED_RUNDIR/
events.jsonl``, one JSON object per line with the schema the supervisor uses
(``{"t": unix time, "kind": ..., "node": ..., ...}``, ``testbed/runstate.py``), where
``testbed events --follow`` and ``Testbed.events()`` read them. Each line is one
``O_APPEND`` write, so lines of the supervisor and of every daemon never interleave.
A daemon started outside a testbed (no ``LNET_TESTBED_RUNDIR``) writes nothing.

``TraceLog`` writes the engine's message trace (``kind: "msg"``, docs/events.md §1.5) to the
node's own ``RUNDIR/nodes/NODE.trace.jsonl``, which ``testbed check``/``report`` merge with
events.jsonl by time: one file per node, so its lines need no lock and can be buffered (at
most ``MAX_LINES`` lines, or ``FLUSH_AFTER`` seconds, then one ``O_APPEND`` write): the cost
per message is one ``MsgTrace.json_line`` (compiled). Times are the event log's unix seconds (the
loop clock plus the offset the daemon took at start), deadlines too.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("lnet.events")

#: testbed/runstate.py ENV_RUNDIR and EVENTS_FILE (nodes/ does not import the orchestrator)
ENV_RUNDIR = "LNET_TESTBED_RUNDIR"
EVENTS_FILE = "events.jsonl"


class EventLog:
    """Appends ``{"t", "kind", "node", **fields}`` lines to one events.jsonl."""

    def __init__(self, path: Path, node: str) -> None:
        self.path = path
        self.node = node

    @classmethod
    def from_env(cls, node: str) -> EventLog | None:
        rundir = os.environ.get(ENV_RUNDIR)
        return cls(Path(rundir) / EVENTS_FILE, node) if rundir else None

    def write(self, kind: str, fields: dict[str, Any]) -> None:
        event = {"t": time.time(), "kind": kind, "node": self.node, **fields}
        line = (json.dumps(event, sort_keys=True) + "\n").encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError as e:  # the log is best effort; the node keeps running
            log.warning("cannot append to %s: %s", self.path, e)


class TraceLog:
    """Buffered writer of one node's message trace (``kind: "msg"`` lines)."""

    #: lines held before a write; seconds a line may wait (the runtime's flush timer)
    MAX_LINES = 512
    FLUSH_AFTER = 0.25

    def __init__(self, path: Path, node: str, clock_offset: float) -> None:
        self.path = path
        self.node = node
        self.offset = clock_offset
        self.lines: list[str] = []
        self.written = 0
        self._fd: int | None = None

    @property
    def pending(self) -> int:
        return len(self.lines)

    def write(self, now: float, act: Any) -> None:
        """One ``MsgTrace`` at loop time ``now``: its ``json_line`` (compiled; the sorted-key
        JSON of its ``record``, as events.jsonl, with ``t`` and ``deadline`` in unix seconds)."""
        self.lines.append(act.json_line(now, self.node, self.offset))
        if len(self.lines) >= self.MAX_LINES:
            self.flush()

    def flush(self) -> None:
        if not self.lines:
            return
        data = ("\n".join(self.lines) + "\n").encode()
        self.written += len(self.lines)
        self.lines = []
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.write(self._fd, data)
        except OSError as e:  # best effort, as the event log
            log.warning("cannot append to %s: %s", self.path, e)

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
