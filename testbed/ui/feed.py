"""The live feed behind ``testbed ui``: one testbed's run directory followed into a
``LiveModel``.

Theory of operation: every backend leaves the same files in its run directory (docs/events.md):
``events.jsonl`` and ``nodes/NODE.rec``. At start the feed reads the whole log (history: the
routes added at bring-up, faults already applied), takes the time origin from it
(``eventlog.origin``) and builds the model on the testbed's ``status`` reply. Each ``poll``
then reads what the files gained (``tail.py``; a recorder file only when its size changed, so
a poll of 1,000 idle nodes is 1,000 ``stat`` calls) and moves the model's clock to the
testbed's ``now`` (the sim server's virtual clock; the wall clock elsewhere); the server takes
the event log's changes first (``poll_events``), the files that need a flush after. Writers that
buffer are asked to write first: the sim server holds recorder rows until a ``flush``
request, which is one request on its one socket, sent every poll; a Mininet daemon writes its
rows about every second by itself; a vagrant/hosts supervisor copies its hosts' files only
when asked, so it is asked every ``REMOTE_FLUSH`` seconds. A lock keeps the page's snapshot
and the poll apart (the poll runs in a worker thread).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from testbed import backends, runstate
from testbed.base import TestbedError
from testbed.observe import eventlog
from testbed.ui.model import LiveModel
from testbed.ui.tail import JsonlTail, RecTail

#: seconds between asks to a vagrant/hosts supervisor to gather its hosts' files
REMOTE_FLUSH = 5.0


class Feed:
    """One testbed followed; ``tb`` is what ``testbed.attach`` returned."""

    def __init__(self, tb: Any, rdir: Path) -> None:
        self.tb = tb
        self.rdir = rdir
        self.lock = threading.Lock()
        status = dict(tb.status())
        backend = backends.of(status.get("backend"))
        self.virtual = backend.virtual_time  # the sim server: rows held until a flush
        self.remote = backend.remote  # vagrant/hosts: files copied from the hosts when asked
        self._flushed = 0.0
        self._flush()
        self.log = JsonlTail(rdir / runstate.EVENTS_FILE)
        history: list[dict[str, Any]] = []
        while batch := self.log.read():
            history += batch
        self.model = LiveModel(status, eventlog.origin(history))
        for ev in history:
            self.model.apply_event(ev)
        self.recs: dict[str, tuple[RecTail, int]] = {}  # node -> tail, size last read
        self.poll()

    def poll(self) -> dict[str, Any] | None:
        """Read what the files gained; the model's delta (None: nothing changed)."""
        self._apply_events()
        self._apply_records()
        with self.lock:
            return self.model.delta()

    def poll_events(self) -> dict[str, Any] | None:
        """Only the event log: what a link, fault or health change says at once (the
        server sends it before asking the writers to flush, which may wait on a busy sim)."""
        self._apply_events()
        with self.lock:
            return self.model.delta()

    def poll_records(self) -> dict[str, Any] | None:
        """The recorder files (flushed first), then the clock: rates, credits, a plot point."""
        self._apply_records()
        with self.lock:
            return self.model.delta()

    def _apply_events(self) -> None:
        events = self.log.read()
        with self.lock:
            for ev in events:
                self.model.apply_event(ev)

    def _apply_records(self) -> None:
        self._flush()
        rows = self._rec_rows()
        now = self._now()
        with self.lock:
            for node, row in rows:
                self.model.apply_row(node, row)
            self.model.tick(now)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            snap = self.model.snapshot()
        snap["virtual"] = self.virtual
        return snap

    def detail(self, node: str) -> dict[str, Any]:
        """One node's peer NIs and routes, from the model (no request to the node)."""
        with self.lock:
            if node not in self.model.nodes:
                raise TestbedError(f"testbed {self.model.name} has no node {node!r}")
            return {"node": node, "peer_nis": self.model.peers_of(node),
                    "routes": [r for r in self.model.routes.values() if r["node"] == node]}

    def node_yaml(self, node: str) -> dict[str, str]:
        """``lnetctl net show -v`` and ``peer show`` of one node, as the node prints them."""
        if node not in self.model.nodes:
            raise TestbedError(f"testbed {self.model.name} has no node {node!r}")
        handle = self.tb.node(node)
        out = {}
        for key, argv in (("net", ("net", "show", "-v")), ("peer", ("peer", "show"))):
            res = handle.lnetctl(*argv, timeout=10.0)
            out[key] = res.out if res.rc == 0 else f"# lnetctl {' '.join(argv)}: rc {res.rc}\n" \
                + (res.err or res.out)
        return out

    def clock(self, op: str, seconds: float = 0.0) -> dict[str, Any]:
        """The sim server's clock: ``show`` or ``advance`` virtual ``seconds``."""
        if not self.virtual:
            raise TestbedError(f"testbed {self.model.name}: its clock is the wall clock")
        reply = self.tb.clock(advance=seconds) if op == "advance" else self.tb.clock()
        return {"now": float(reply["now"]) - self.model.t0, "speed": reply.get("speed")}

    def _flush(self) -> None:
        if not (self.virtual or self.remote):
            return  # local daemons (Mininet) write their rows by themselves
        if self.remote and time.monotonic() - self._flushed < REMOTE_FLUSH:
            return
        self._flushed = time.monotonic()
        eventlog.flush_writers(self.rdir)

    def _rec_rows(self) -> list[tuple[str, dict[str, object]]]:
        rows: list[tuple[str, dict[str, object]]] = []
        try:
            entries = list(os.scandir(self.rdir / runstate.NODES_DIR))
        except FileNotFoundError:
            return rows
        for entry in entries:
            if not entry.name.endswith(".rec"):
                continue
            node = entry.name[:-4]
            try:
                size = entry.stat().st_size
            except FileNotFoundError:
                continue
            tail, seen = self.recs.get(node) or (RecTail(Path(entry.path)), -1)
            if size != seen:
                rows += [(node, r) for r in tail.read()]
            self.recs[node] = (tail, size)
        return rows

    def _now(self) -> float | None:
        try:
            return float(self.tb.now)
        except (TestbedError, OSError, ValueError):
            return None
