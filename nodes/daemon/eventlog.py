"""The node daemon's writer of the testbed event log: LNet's health notices for user space.

Theory of operation (hlth-lnt-udev): real LNet was to raise udev events for errors seen on a
local or peer NI; an emulated node has no udev, so the daemon appends the engine's health
notices (``nodes/lnet/notify.py``) to its testbed's event log, ``$LNET_TESTBED_RUNDIR/
events.jsonl``, one JSON object per line with the schema the supervisor uses
(``{"t": unix time, "kind": ..., "node": ..., ...}``, ``testbed/runstate.py``), where
``testbed events --follow`` and ``Testbed.events()`` read them. Each line is one
``O_APPEND`` write, so lines of the supervisor and of every daemon never interleave.
A daemon started outside a testbed (no ``LNET_TESTBED_RUNDIR``) writes nothing.

With ``LNET_TESTBED_TRACE_MESSAGES=1`` in its environment the daemon also writes the engine's
message trace (``kind: "msg"``, TRACE-SCHEMA.md) to ``$LNET_TESTBED_RUNDIR/nodes/NODE.trace
.jsonl`` (``trace_from_env``), which ``testbed check`` merges with events.jsonl by time; the
trace's ``deadline`` is moved from the engine's loop clock to the log's unix time.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodes.driver import trace_fields

log = logging.getLogger("lnet.events")

#: testbed/runstate.py ENV_RUNDIR and EVENTS_FILE (nodes/ does not import the orchestrator)
ENV_RUNDIR = "LNET_TESTBED_RUNDIR"
EVENTS_FILE = "events.jsonl"
#: "1": write the message trace too (testbed explore turns it on, issue 17)
ENV_TRACE = "LNET_TESTBED_TRACE_MESSAGES"


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


def trace_from_env(node: str, loop_now: Callable[[], float]) -> Callable[[Any], None] | None:
    """A ``NodeDriver.trace_sink`` appending ``msg`` events to ``nodes/NODE.trace.jsonl`` when
    ``ENV_TRACE`` is "1" in a testbed (None otherwise); ``loop_now`` is the engine's clock."""
    rundir = os.environ.get(ENV_RUNDIR)
    if not rundir or os.environ.get(ENV_TRACE) != "1":
        return None
    out = EventLog(Path(rundir) / "nodes" / f"{node}.trace.jsonl", node)

    def sink(act: Any) -> None:
        fields = trace_fields(act)
        if isinstance(fields.get("deadline"), int | float):
            fields["deadline"] += time.time() - loop_now()
        out.write("msg", fields)

    return sink
