"""Shrinking a failing schedule: delta debugging, checked by re-running (issue 17 item 2).

Theory of operation: a failure is kept while a re-run of a smaller schedule still violates
the *same* invariant (so shrinking never slides into a different bug). In order:

1. cut: everything that starts after the violation was proved cannot have caused it (a safety
   violation: the check reads the log in order); the safety phase ends one message deadline
   after it;
2. ``ddmin`` (Zeller and Hildebrandt, "Simplifying and Isolating Failure-Inducing Input",
   2002) over the faults and streams together: try halves, then complements, then finer
   partitions, until no single unit can go;
3. tunables: each one the schedule sets goes back to the topology's value if the failure
   stays; a remaining one is tried at the other values the swarm could draw, closest to the
   topology's first;
4. tightening: each stream's count halved, each fault's duration halved (while the failure
   stays), everything shifted to start at 1 s, the safety phase ended (and, for a liveness
   failure, the faults healed) as early as it fails;
   a liveness failure also gets the shortest bound it still fails within: the smallest
   ``max_recovery_ping_interval`` the swarm draws that keeps it (the bound waits the whole
   recovery backoff cap, 900 s by default, when LNet never becomes whole -- on Mininet, in
   wall-clock time).

``Shrinker.runs`` counts re-runs; results are cached by schedule. A safety violation is
re-checked on the safety phase alone (``runner.run(phases="safety")``).

Robustness (``robust`` > 0, what ``testbed explore --out`` uses): a schedule only "still
fails" if it also fails in ``robust`` perturbed runs, each with every step moved by up to
``SHIFT`` seconds either way (``perturbed``), the fabric's per-message ``JITTER``, and the
schedule started at a drawn ``phase_of`` its engines' periodic timers. A written test runs
on Mininet on wall-clock time, where a step lands a CLI round trip under load (a process start,
an RPC) away from its time and messages take their own time, so a failure that needs one
exact interleaving (a 1 ms window, the Nth message a drop rule counts) would replay there
only by chance; the perturbed runs keep the shrinker to schedules whose failure survives such
slack. The phase matters as much: the daemons' monitor ticks, router checks and recovery
pings run from their own start, and a Mininet bring-up lasts what it lasts, so where their
ticks fall against the test's steps differs from run to run (the fatal-ni-by-health test of
seed 5, shrunk without it, failed with the bug 9 times in 10 on Mininet, through whichever
node's recovery ping met a flap; the sim's run had c1's).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from testbed.explore import runner
from testbed.explore.bound import liveness_bound
from testbed.explore.model import Fault, Schedule, Stream
from testbed.explore.swarm import TUNABLES
from testbed.explore.topo import Topo

T = TypeVar("T")
Unit = Fault | Stream

#: a perturbed run moves each step by up to this many seconds either way (module doc)
SHIFT = 0.6
#: and delays each message by up to this much more than the fabric's latency (seconds)
JITTER = 0.005
#: and starts the schedule up to this far into the longest timer period (``phase_of``)
MIN_PERIOD = 1.0  # the monitor thread's tick (recovery pings, deadlines)


def ddmin(items: Sequence[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal sublist of ``items`` for which ``fails`` holds (``fails(items)`` must)."""
    cur = list(items)
    if fails([]):
        return []
    n = 2
    while len(cur) >= 2:
        size = len(cur) / n
        parts = [cur[int(i * size):int((i + 1) * size)] for i in range(n)]
        parts = [p for p in parts if p]
        for part in parts:
            if fails(part):
                cur, n = part, 2
                break
        else:
            for part in parts:
                rest = [x for x in cur if not any(x is y for y in part)]
                if fails(rest):
                    cur, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(cur):
                    break
                n = min(len(cur), n * 2)
    if len(cur) == 1 and fails([]):
        return []
    return cur


class Shrinker:
    """Shrinks one failing schedule of ``topo`` (see the module doc)."""

    def __init__(self, topo: Topo, invariant: str, phase: str, *,
                 planted: str | None = None, log: Callable[[str], None] = lambda s: None,
                 robust: int = 0) -> None:
        self.topo, self.invariant, self.phase = topo, invariant, phase
        self.planted = planted
        self.robust = robust
        self.log = log
        self.runs = 0
        self.last: runner.Outcome | None = None
        self._cache: dict[str, bool] = {}

    def fails(self, sch: Schedule) -> bool:
        """Does ``sch`` still violate the invariant (re-run, cached)?"""
        key = json.dumps(sch.as_dict(), sort_keys=True)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        ok = self._fails_once(sch)
        for k in range(1, self.robust + 1):
            if not ok:
                break
            ok = self._fails_once(perturbed(sch, k), sim_seed=k, jitter=JITTER,
                                  phase=phase_of(sch, k, self._period(sch)))
        self._cache[key] = ok
        return ok

    def _period(self, sch: Schedule) -> float:
        """The longest periodic timer of the schedule's engines: the router checker's."""
        eff = self.topo.effective(sch.tunables)
        return max([MIN_PERIOD, *(float(v.get("alive_router_check_interval", 0))
                                  for v in eff.values())])

    def _fails_once(self, sch: Schedule, sim_seed: int = 0, jitter: float = 0.0,
                    phase: float = 0.0) -> bool:
        self.runs += 1
        out = runner.run(self.topo, sch, planted=self.planted, sim_seed=sim_seed,
                         jitter=jitter, phase=phase,
                         phases="safety" if self.phase == "safety" else "all")
        ok = out.violation is not None and out.violation.invariant == self.invariant
        if ok and sim_seed == 0:
            self.last = out
        return ok

    def shrink(self, sch: Schedule, violation_t: float | None = None) -> Schedule:
        sch = self.cut(sch, violation_t)
        units: list[Unit] = [*sch.faults, *sch.streams]
        self.log(f"shrinking {len(sch.faults)} faults + {len(sch.streams)} streams "
                 f"(invariant {self.invariant})")
        kept = ddmin(units, lambda us: self.fails(_with_units(sch, us)))
        sch = _with_units(sch, kept)
        self.log(f"  ddmin: {len(sch.faults)} faults + {len(sch.streams)} streams after "
                 f"{self.runs} runs")
        sch = self._tunables(sch)
        sch = self._tighten(sch)
        self.log(f"  done after {self.runs} runs: {len(sch.faults)} faults, "
                 f"{len(sch.streams)} streams, tunables {sch.tunables or '(topology)'}")
        return sch

    def cut(self, sch: Schedule, t: float | None) -> Schedule:
        """Step 1 of the module doc (``sch`` itself if the cut one no longer fails)."""
        if t is None or self.phase != "safety":
            return sch
        settle = liveness_bound(self._tunables_of(sch)).settle
        end = min(sch.time, t + settle)
        cand = sch.with_(time=round(end, 3),
                         faults=tuple(f for f in sch.faults if f.at <= t),
                         streams=tuple(s for s in sch.streams if s.at <= t))
        return cand if self.fails(cand) else sch

    def _tunables_of(self, sch: Schedule) -> dict[str, int]:
        eff = self.topo.effective(sch.tunables)
        return max(eff.values(), key=lambda v: liveness_bound(v).total)

    def _tunables(self, sch: Schedule) -> Schedule:
        for name in sorted(sch.tunables):
            rest = {k: v for k, v in sch.tunables.items() if k != name}
            if self.fails(sch.with_(tunables=rest)):
                sch = sch.with_(tunables=rest)
        base = self.topo.effective({})
        for name in sorted(sch.tunables):
            here = min(v[name] for v in base.values())
            tries = sorted({v for v in TUNABLES.get(name, ()) if v != sch.tunables[name]},
                           key=lambda v: (abs(v - here), v))
            for value in tries:
                if abs(value - here) >= abs(sch.tunables[name] - here):
                    break
                cand = sch.with_(tunables={**sch.tunables, name: value})
                if self.fails(cand):
                    sch = cand
                    break
        kept = {k: v for k, v in sch.tunables.items()
                if any(b.get(k) != v for b in base.values())}  # (what the topology sets)
        if kept != sch.tunables and self.fails(sch.with_(tunables=kept)):
            sch = sch.with_(tunables=kept)
        return sch

    def _tighten(self, sch: Schedule) -> Schedule:
        for i in range(len(sch.streams)):
            while sch.streams[i].count > 1:
                s = sch.streams[i]
                cand = _replace_at(sch, "streams", i, replace(s, count=max(1, s.count // 2)))
                if not self.fails(cand):
                    break
                sch = cand
        for i in range(len(sch.faults)):
            f = sch.faults[i]
            if f.kind == "flap" or f.duration < 1.0:
                continue
            shorter = _with_duration(f, round(f.duration / 2, 1))
            cand = _replace_at(sch, "faults", i, shorter)
            if self.fails(cand):
                sch = cand
        first = min([f.at for f in sch.faults] + [s.at for s in sch.streams], default=1.0)
        if first > 1.0:
            cand = _shift(sch, 1.0 - first)
            if self.fails(cand):
                sch = cand
        if self.phase == "liveness":
            sch = self._short_bound(sch)
        if self.phase in ("safety", "liveness"):  # (liveness: heal as early as it fails)
            end = round(sch.end() + 1.0, 1)
            while end < sch.time:
                cand = sch.with_(time=end)
                if self.fails(cand):
                    sch = cand
                    break
                end = round(end + max(1.0, (sch.time - end) / 2), 1)
        return sch


    def _short_bound(self, sch: Schedule) -> Schedule:
        """The smallest recovery backoff cap the failure stays with (step 4)."""
        name = "max_recovery_ping_interval"
        now = max(v[name] for v in self.topo.effective(sch.tunables).values())
        for value in sorted(v for v in set(TUNABLES[name]) if v < now):
            cand = sch.with_(tunables={**sch.tunables, name: value})
            if self.fails(cand):
                return cand
        return sch


def _with_units(sch: Schedule, units: list[Unit]) -> Schedule:
    return sch.with_(faults=tuple(u for u in units if isinstance(u, Fault)),
                     streams=tuple(u for u in units if isinstance(u, Stream)))


def _replace_at(sch: Schedule, what: str, i: int, item: Any) -> Schedule:
    items = list(getattr(sch, what))
    items[i] = item
    return sch.with_(**{what: tuple(items)})


def _with_duration(f: Fault, dur: float) -> Fault:
    spec = dict(f.spec)
    if "duration" in spec:
        spec["duration"] = dur
    return replace(f, duration=dur, spec=spec)


def _shift(sch: Schedule, dt: float) -> Schedule:
    return sch.with_(time=round(sch.time + dt, 3),
                     faults=tuple(replace(f, at=round(f.at + dt, 3)) for f in sch.faults),
                     streams=tuple(replace(s, at=round(s.at + dt, 3)) for s in sch.streams))


def phase_of(sch: Schedule, k: int, period: float) -> float:
    """The k-th perturbed run's phase: seconds in [0, ``period``) the testbed idles before
    the schedule starts, drawn from (seed, k) (module doc)."""
    return round(random.Random(f"{sch.seed}:{k}:phase").uniform(0.0, period), 3)


def perturbed(sch: Schedule, k: int) -> Schedule:
    """``sch`` with every fault and stream moved by up to ``SHIFT`` s either way (never before
    0.1 s), drawn from (seed, k): the k-th timing perturbation (module doc)."""
    rng = random.Random(f"{sch.seed}:{k}")

    def at(t: float) -> float:
        return round(max(0.1, t + rng.uniform(-SHIFT, SHIFT)), 3)

    return sch.with_(faults=tuple(replace(f, at=at(f.at)) for f in sch.faults),
                     streams=tuple(replace(s, at=at(s.at)) for s in sch.streams))
