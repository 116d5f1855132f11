"""Reading event logs: events.jsonl (+ per-node message traces), time origin, filters.

Theory of operation (docs/events.md §1): a log is JSON lines ``{"t", "kind", ...}``. Readers
here never raise on a bad line: they skip it and count it, because a log written by a process
that was killed may end in half a line. A run directory's log is ``events.jsonl`` plus any
``nodes/NODE.trace.jsonl`` message traces, merged by ``t`` (each file is in time order, so a
k-way merge keeps the whole read linear in the number of events). Writers of a live testbed
buffer (a node daemon's trace for at most 0.25 s, recorders about a second): ``flush_writers``
asks them to write what they hold before a reader looks.
"""

from __future__ import annotations

import heapq
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.echo import shown_path
from testbed import runstate

Event = dict[str, Any]
TRACE_GLOB = "*.trace.jsonl"
#: every kind an event log may hold (docs/events.md §1, tests/unit/test_help.py keeps the two
#: equal); ``msg.send`` etc. are ``kind_name``'s names of message trace events
KNOWN_KINDS = frozenset({
    "node_started", "up", "down", "node_died", "node_restarted", "link_down", "link_up",
    "route_not_up", "fault_added", "fault_applied", "fault_reverted", "fault_failed",
    "fault_deleted", "fault_revert_problem", "ni_error", "lpni_error", "ni_link", "ni_status",
    "lpni_status", "ni_health", "lpni_health", "route_state", "routing", "tunable", "ni_add",
    "ni_del", "peer_notify", "send", "recv", "tx_done", "md", "notify_peer_down", "msg",
    "msg.send", "msg.resend", "msg.complete", "traffic_start", "traffic_end"})
#: a ``t`` below this is virtual seconds (sim: testbed/sim/fabric.py VIRTUAL_TIME_LIMIT)
VIRTUAL_CLOCK_LIMIT = 1e8


class LogError(Exception):
    """The log cannot be read at all (missing file, not a directory); one line for the user."""


@dataclass
class Loaded:
    """Events read from a log, with what was skipped."""

    events: list[Event] = field(default_factory=list)
    skipped: int = 0
    sources: list[str] = field(default_factory=list)


def _lines(path: Path) -> Iterator[Event | None]:
    """Each line of ``path`` as an event, None for a line that is not a JSON object with t."""
    try:
        fh = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise LogError(f"cannot read {shown_path(path)}: {exc.strerror or exc}") from None
    with fh:
        for line in fh:
            try:
                ev = json.loads(line)
            except ValueError:
                yield None
                continue
            if isinstance(ev, dict) and isinstance(ev.get("t"), int | float) \
                    and isinstance(ev.get("kind"), str):
                yield ev
            else:
                yield None


def read_file(path: str | Path) -> Loaded:
    """Every event of one JSON-lines file, in file order."""
    out = Loaded(sources=[str(path)])
    for ev in _lines(Path(path)):
        if ev is None:
            out.skipped += 1
        else:
            out.events.append(ev)
    return out


class RundirStream:
    """The events of a run directory, ``events.jsonl`` merged by time with its nodes'
    message traces, as an iterator: one line of each file held at a time (``heapq.merge``
    over the files, each in time order), so a reader's memory does not grow with the log.
    ``skipped`` counts the unreadable lines met so far; ``sources`` the files read."""

    def __init__(self, rdir: str | Path) -> None:
        rdir = Path(rdir)
        if not rdir.is_dir():
            raise LogError(f"no run directory {rdir}")
        files = [rdir / runstate.EVENTS_FILE,
                 *sorted((rdir / runstate.NODES_DIR).glob(TRACE_GLOB))]
        files = [f for f in files if f.exists()]
        if not files:
            raise LogError(f"{rdir} has no event log ({runstate.EVENTS_FILE})")
        self.sources = [str(f) for f in files]
        self.skipped = 0
        streams = [self._counted(f, rank) for rank, f in enumerate(files)]
        # equal times: events.jsonl first, then the traces in file order (merge is stable)
        self._merged = heapq.merge(*streams, key=lambda x: (x[0], x[1]))

    def _counted(self, path: Path, rank: int) -> Iterator[tuple[float, int, Event]]:
        for ev in _lines(path):
            if ev is None:
                self.skipped += 1
            else:
                yield float(ev["t"]), rank, ev

    def __iter__(self) -> Iterator[Event]:
        for _t, _r, ev in self._merged:
            yield ev


def stream_rundir(rdir: str | Path) -> RundirStream:
    """A run directory's merged events as a stream (``RundirStream``).

    Raises:
        LogError: not a directory, or no event log in it.
    """
    return RundirStream(rdir)


def read_rundir(rdir: str | Path) -> Loaded:
    """``events.jsonl`` of a run directory merged by time with its nodes' message traces,
    every event in memory (readers that go back and forth: report, summary)."""
    stream = stream_rundir(rdir)
    out = Loaded(sources=stream.sources)
    out.events = list(stream)
    out.skipped = stream.skipped
    return out


#: bound on each writer's answer to ``flush`` (a daemon busy with a burst still answers)
FLUSH_TIMEOUT = 5.0
#: the same for a vagrant/hosts supervisor, which also copies every host's files over SSH
GATHER_TIMEOUT = 120.0


def flush_writers(rdir: str | Path) -> list[str]:
    """Ask the writers of a live run directory to write what they buffer: every node daemon
    (``nodes/NODE.sock``) on Mininet, the server (``ctl.sock``) of a sim testbed, the
    supervisor of a vagrant/hosts testbed (it gathers its hosts' files here). Best effort
    and bounded; returns the writers that did not answer (a dead daemon wrote what it could)."""
    from nodes.daemon.client import DaemonUnreachable, request

    rdir = Path(rdir)
    if not rdir.is_dir():
        return []
    state = runstate.read_state(rdir)
    remote = state.get("backend") in ("vagrant", "hosts")
    if state.get("backend") == "sim" or remote:
        socks = [runstate.ctl_sock(rdir)] if _alive(state.get("supervisor_pid")) else []
    else:
        nodes = state.get("nodes") if isinstance(state.get("nodes"), dict) else {}
        socks = [runstate.node_sock(rdir, name) for name, info in sorted(nodes.items())
                 if isinstance(info, dict) and _alive(info.get("daemon_pid"))]
    silent = []
    for sock in socks:
        try:
            request(str(sock), {"cmd": "flush"},
                    timeout=GATHER_TIMEOUT if remote else FLUSH_TIMEOUT)
        except (DaemonUnreachable, OSError, ValueError):
            silent.append(sock.stem)
    return silent


def _alive(pid: Any) -> bool:
    """A process ``pid`` exists (a killed daemon's socket file may outlive it)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def origin(events: Iterable[Event]) -> float:
    """Start of bring-up: the ``up`` event's ``t - seconds``; else the first event's ``t``; 0
    for an empty log (the sim's virtual time starts at bring-up, so its origin is 0)."""
    first: float | None = None
    for ev in events:
        if first is None:
            first = float(ev["t"])
        if ev.get("kind") == "up":
            secs = ev.get("seconds")
            return float(ev["t"]) - (float(secs) if isinstance(secs, int | float) else 0.0)
    if first is None or first < VIRTUAL_CLOCK_LIMIT:
        return 0.0  # a virtual clock (sim) starts at bring-up
    return first


def node_of(ev: Event) -> str | None:
    """The node an event is about (``node`` field), or None (testbed-wide events)."""
    node = ev.get("node")
    return node if isinstance(node, str) else None


def select(events: Iterable[Event], *, nodes: set[str] | None = None,
           kinds: set[str] | None = None, since: float | None = None,
           t0: float = 0.0) -> Iterator[Event]:
    """Events matching every filter: node in ``nodes`` (testbed-wide events never match a
    node filter), kind in ``kinds`` (``msg`` also matches ``msg.send`` etc.: see
    ``kind_name``), relative time ``t - t0 >= since``."""
    for ev in events:
        if nodes is not None and node_of(ev) not in nodes:
            continue
        if kinds is not None and ev["kind"] not in kinds and kind_name(ev) not in kinds:
            continue
        if since is not None and float(ev["t"]) - t0 < since:
            continue
        yield ev


def kind_name(ev: Event) -> str:
    """``msg.send`` / ``msg.resend`` / ``msg.complete`` for message trace events, else kind."""
    if ev["kind"] == "msg" and isinstance(ev.get("event"), str):
        return f"msg.{ev['event']}"
    return str(ev["kind"])
