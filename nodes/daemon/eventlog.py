"""The node daemon's writer of the testbed event log: LNet's health notices for user space.

Theory of operation (hlth-lnt-udev): real LNet was to raise udev events for errors seen on a
local or peer NI; an emulated node has no udev, so the daemon appends the engine's health
notices (``nodes/lnet/notify.py``) to its testbed's event log, ``$LNET_TESTBED_RUNDIR/
events.jsonl``, one JSON object per line with the schema the supervisor uses
(``{"t": unix time, "kind": ..., "node": ..., ...}``, ``testbed/runstate.py``), where
``testbed events --follow`` and ``Testbed.events()`` read them. Each line is one
``O_APPEND`` write, so lines of the supervisor and of every daemon never interleave.
A daemon started outside a testbed (no ``LNET_TESTBED_RUNDIR``) writes nothing.
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
