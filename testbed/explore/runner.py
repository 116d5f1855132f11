"""One schedule on the in-process simulator: safety phase, heal, liveness phase, verdict.

Theory of operation (issue 17 item 1): ``run`` brings the topology up on a ``SimTestbed``
(with the schedule's tunables in its ``global:`` block, every engine's message trace on, and
a planted bug if asked: ``LNET_TESTBED_PLANTED_BUG``, the variable the emitted tests read
too), plays the schedule's steps through ``Replay``
(``play``), then:

1. safety: ``testbed check`` over the log with the faults active (every invariant of
   docs/events.md §2 must hold);
2. heal (``Replay.heal``), then ``liveness.wait_whole``: within ``liveness_bound`` seconds
   (the largest bound over the nodes' tunables) every node must be whole and the probes must
   complete; then ``testbed check`` over the whole log again.

The verdict is the first violation: the earliest-proved invariant violation of ``check`` (its
events), else the first liveness problem (with the bound). A livelocked clock
(``replay.Livelock``) is a violation too. ``Outcome.digest`` hashes the event log (with
per-chunk hashes, to find the first differing event of two runs) when asked: the determinism
check compares them across processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from nodes.planted import PLANTED_ENV
from testbed.base import TestbedError
from testbed.explore import liveness
from testbed.explore.bound import Bound, liveness_bound
from testbed.explore.model import Schedule
from testbed.explore.replay import Livelock, Replay
from testbed.explore.topo import Topo, with_tunables
from testbed.observe.checktypes import Item, Result
from testbed.plan.model import TopologyError
from testbed.sim import SimTestbed

#: events per chunk hash (the determinism check's resolution before it re-runs)
CHUNK = 2048


@dataclass
class Violation:
    phase: str                 # safety | liveness | setup
    invariant: str             # a check invariant, a liveness problem kind, or livelock
    text: str
    proof: list[Item] = field(default_factory=list)
    bound: str = ""
    t: float | None = None     # when it was proved (safety: its last proof event's time)

    def render(self, max_proof: int = 8) -> list[str]:
        lines = [f"first violated invariant: {self.invariant} ({self.phase} phase): "
                 f"{self.text}"]
        if self.bound:
            lines.append(f"  liveness {self.bound}")
        lines += [f"    #{i} {json.dumps(ev, sort_keys=True)}" for i, ev in
                  self.proof[:max_proof]]
        return lines


@dataclass
class Outcome:
    seed: int
    violation: Violation | None
    events: int = 0
    sends: int = 0
    virtual: float = 0.0
    wall: float = 0.0
    digest: str = ""
    chunks: list[str] = field(default_factory=list)
    chunk_events: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)  # the event log, when kept

    @property
    def ok(self) -> bool:
        return self.violation is None


@contextmanager
def environment(planted: str | None) -> Iterator[None]:
    """The variables every engine of the run is built under (restored afterwards)."""
    want = {PLANTED_ENV: planted or ""}
    old = {k: os.environ.get(k) for k in want}
    os.environ.update(want)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def play(replay: Replay, schedule: Schedule) -> None:
    """The schedule's steps in time order, then the rest of the safety phase."""
    for t, what, item in schedule.actions():
        replay.at(t)
        if what == "fault":
            replay.fault(item.kind, **{k: v for k, v in item.spec.items() if k != "kind"})
        elif what == "rule_add":
            replay.lctl(item.node, *item.add)
        elif what == "rule_del":
            replay.lctl(item.node, *item.delete)
        else:
            replay.stream(item.node, item.op, item.dst, every=item.every, count=item.count,
                          size=item.size)
    replay.at(schedule.time)


def bound_of(topo: Topo, schedule: Schedule) -> tuple[Bound, dict[str, dict[str, int]]]:
    """The largest liveness bound over the nodes, and every node's tunables in effect."""
    eff = topo.effective(schedule.tunables)
    bounds = [liveness_bound(v) for v in eff.values()]
    return max(bounds, key=lambda b: b.total), eff


def first_violation(result: Result, phase: str) -> Violation | None:
    """The violation proved earliest in the log (its last proof event comes first)."""
    best: tuple[int, Violation] | None = None
    for inv in result.invariants.values():
        for v in inv.violations[:1]:
            at = max((i for i, _ in v.proof), default=1 << 62)
            if best is None or at < best[0]:
                last = max(v.proof, key=lambda item: item[0])[1] if v.proof else {}
                t = float(last["t"]) if isinstance(last.get("t"), int | float) else None
                best = (at, Violation(phase, inv.name, v.text, list(v.proof), t=t))
    return None if best is None else best[1]


def run(topo: Topo, schedule: Schedule, *, planted: str | None = None, sim_seed: int = 0,
        digest: bool = False, chunk_events: int | None = None, phases: str = "all",
        jitter: float = 0.0, phase: float = 0.0, keep_log: bool = False) -> Outcome:
    """Play ``schedule`` on ``topo`` in this process (module doc); ``digest``: hash the log;
    ``chunk_events``: keep the events of that chunk (a determinism mismatch's evidence);
    ``phases``: ``all``, or ``safety`` to stop after the safety check (shrinking);
    ``jitter``: the fabric's random extra latency per message (``sim_seed`` draws it), for
    the shrinker's timing perturbations; ``phase``: seconds the testbed idles after bring-up
    before the schedule's origin, which moves every engine's periodic timers (monitor tick,
    router checker, recovery pings) against the schedule's steps, as a Mininet bring-up of
    its own length does; ``keep_log``: the event log in ``Outcome.log`` (a failure's, written
    beside its test)."""
    t0 = time.perf_counter()
    path = with_tunables(topo, schedule.tunables)
    out = Outcome(schedule.seed, None)
    with environment(planted):
        try:
            tb = SimTestbed.up(path, name=f"x{schedule.seed % 10**8}", seed=sim_seed,
                               jitter=jitter, trace_messages=True)
        except (TestbedError, TopologyError) as exc:  # (a tunable mix LNet refuses: the
            # shrinker tries other values of one tunable with the rest as they are)
            out.violation = Violation("setup", "bringup", str(exc).splitlines()[0])
            return out
        try:
            if phase > 0:
                Replay(tb).advance(phase)
            replay = Replay(tb)  # (its origin, the schedule's t=0, is after the idle)
            out.violation = _phases(topo, schedule, replay, phases == "all")
            out.skipped = replay.skipped
        finally:
            log = tb.fabric.compact_log()  # (records as dicts only if the hash needs them)
            tb.down()
    out.events = len(log)
    out.sends = sum(1 for e in log if (e[0] if type(e) is tuple else e["kind"]) == "send")
    out.virtual = float(tb.now)
    if digest or chunk_events is not None or keep_log:
        events = tb.events()
        if keep_log:
            out.log = events
        if digest:
            out.digest, out.chunks = hash_events(events)
        if chunk_events is not None:
            out.chunk_events = events[chunk_events * CHUNK:(chunk_events + 1) * CHUNK]
    out.wall = time.perf_counter() - t0
    return out


def _phases(topo: Topo, schedule: Schedule, replay: Replay, live: bool) -> Violation | None:
    bound, eff = bound_of(topo, schedule)
    problems: list[liveness.Problem] = []
    try:
        play(replay, schedule)
        found = first_violation(replay.check(), "safety")
        if found is not None or not live:
            return found
        replay.heal()
        problems = liveness.wait_whole(replay, bound, eff, topo.probes())
        found = first_violation(replay.check(), "liveness")
        if found is not None:
            found.bound = bound.render()
            return found
    except Livelock as exc:
        return Violation("liveness" if replay.elapsed > schedule.time else "safety",
                         "livelock", str(exc), bound=bound.render(), t=exc.t)
    if problems:
        p = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Violation("liveness", p.what, p.text + more, p.proof, bound.render(),
                         float(replay.tb.now))
    return None


def hash_events(events: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """SHA-256 of the log (canonical JSON lines), and one hash per ``CHUNK`` events."""
    whole = hashlib.sha256()
    chunks: list[str] = []
    for start in range(0, len(events), CHUNK):
        part = hashlib.sha256()
        for ev in events[start:start + CHUNK]:
            line = json.dumps(ev, sort_keys=True, default=str).encode() + b"\n"
            part.update(line)
            whole.update(line)
        chunks.append(part.hexdigest()[:16])
    return whole.hexdigest(), chunks
