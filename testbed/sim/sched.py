"""The fabric's clock: pending deliveries and engine timers on one virtual timeline.

Theory of operation: two heaps. ``_q`` holds scheduled fabric work as ``(t, seq, fn)`` and
deliveries as ``(t, seq, name, act[, link])`` (handed to the ``deliver`` callable the
fabric gave, ``deliver(name, act, link)``; no closure per message; ``link``: the pair's path
decision made at send time, or None; ``seq`` is unique, so entries never compare past
it); ``_timers`` holds engine timers as ``(deadline, engine order, name)``, pushed by each
node's driver when its engine's earliest deadline moved (``arm``); an entry is stale
unless ``_deadline[name]`` still says that deadline, and stale entries are dropped lazily.
``step`` jumps virtual time to the earliest of both and runs it: a delivery first, else the
timers of every engine then due, in ``add`` order (as a scan of every engine would run them,
so the event log does not depend on the heap). Engines changed behind a driver's back are
re-asked (``touch``: marked dirty, their drivers re-arm if the deadline moved), and so is
every engine a driver ran (its ``defer_rearm``): not after each batch but once no delivery
is due at the current instant, since one due now runs before any timer, whatever the
deadlines say (a server that takes 64 PUTs in one instant is asked its deadline once).

The event log's store is here too (``stamp`` gives its ``t``): records as appended, the
fabric's per-message ``send``/``recv``/``tx_done``/``md`` ones as tuples (a dict display per
record was an eighth of explore's run), turned into their dicts by ``event_log`` when read;
``compact_log`` is the store itself, which ``testbed check`` reads as it is.

The scheduler is one of the fabric's parts, not its base (issue 29): it owns the timeline and
the log store, and sees the fabric only through what it is given (the ``engines`` and
``drivers`` maps, read, never written, and the ``deliver`` callable).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodes.driver import NodeDriver
    from nodes.lnet.actions import Transmit
    from nodes.lnet.engine import LNetEngine

#: virtual time never runs past this (a guard against a waiter that cannot complete)
VIRTUAL_TIME_LIMIT = 1e7
_UNQUEUED = float("nan")  # the cached deadline of an engine with none in the heap (!= any t)


def as_event(rec: tuple[Any, ...]) -> dict[str, Any]:
    """The dict of a compact record (``Scheduler.compact_log``): its fields in the order the
    fabric wrote them as dicts before (the JSON of the log is the same, byte for byte)."""
    kind = rec[0]
    if kind == "send":
        return {"t": rec[1], "kind": kind, "node": rec[2], "tx": rec[3], "type": rec[4],
                "ni": rec[5], "lpni": rec[6], "src": rec[7], "dst": rec[8], "nob": rec[9]}
    if kind == "recv":
        return {"t": rec[1], "kind": kind, "node": rec[2], "type": rec[3], "ni": rec[4],
                "peer": rec[5], "src": rec[6], "dst": rec[7]}
    if kind == "tx_done":
        return {"t": rec[1], "kind": kind, "node": rec[2], "tx": rec[3], "rc": rec[4],
                "hstatus": rec[5]}
    return {"t": rec[1], "kind": kind, "node": rec[2], "handle": rec[3], "type": rec[4],
            "status": rec[5], "unlinked": rec[6]}  # md


Deliver = Callable[[str, "Transmit", Any], None]


class Scheduler:
    """Virtual time, deliveries and engine timers: the fabric's clock (``Fabric.sched``)."""

    def __init__(self, engines: dict[str, LNetEngine], drivers: dict[str, NodeDriver],
                 deliver: Deliver, *, tracked: bool = False) -> None:
        self.engines, self.drivers, self._deliver = engines, drivers, deliver
        #: every engine change reaches a driver or ``touch``: ``step`` need not re-ask all
        self.tracked = tracked
        self.now = 0.0
        self._q: list[tuple[Any, ...]] = []  # (t, seq, fn) / (t, seq, name, act[, link]) heap
        #: the one sequence of the timeline (heap ties; the fabric numbers connections by it)
        self.seq = itertools.count()
        self._order: dict[str, int] = {}  # engine -> add order (ties between due engines)
        self._deadline: dict[str, float | None] = {}  # engine -> deadline it has in _timers
        self._dirty: set[str] = set()  # engines whose next_deadline() must be asked again
        self._timers: list[tuple[float, int, str]] = []  # heap; entries may be stale
        self._stamp_at = _UNQUEUED  # the ``now`` whose event-log stamp is ``_stamp_t``
        self._stamp_t = 0.0
        #: the event log as appended: dicts, and the fabric's per-message records as tuples
        #: (``compact``); ``event_log`` turns those into dicts when asked
        self._records: list[Any] = []

    @property
    def event_log(self) -> list[dict[str, Any]]:
        """The event log (events.jsonl schema), every record a dict: a compact one becomes
        its dict here, in place (the list itself is returned: ``clear()`` clears the log)."""
        log = self._records
        for i in range(len(log)):
            rec = log[i]
            if type(rec) is tuple:
                log[i] = as_event(rec)
        return log

    def compact_log(self) -> list[Any]:
        """The event log as kept: dicts, and the send/recv/tx_done/md records of messages
        as tuples (``kind, t, node, ...``, ``as_event``'s order), which no invariant of
        ``testbed check`` reads (``check_events`` takes both; not copied: the fabric appends
        to it, never rebound)."""
        return self._records

    def stamp(self) -> float:
        """``round(now, 9)``, the ``t`` of an event-log record: cached per instant (each
        message logs five or six records at one instant, and ``round`` to 9 digits formats
        the float: ~1 µs a call)."""
        now = self.now
        if now != self._stamp_at:
            self._stamp_at, self._stamp_t = now, round(now, 9)
        return self._stamp_t

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Run ``fn()`` at virtual time ``t``."""
        heapq.heappush(self._q, (t, next(self.seq), fn))

    def at_deliver(self, t: float, name: str, act: Transmit, link: Any = None) -> None:
        """``deliver(name, act, link)`` at ``t`` (a heap entry of its own: one per message;
        ``link``: the pair's path decision made at send time, if any)."""
        if link is None:
            heapq.heappush(self._q, (t, next(self.seq), name, act))
        else:
            heapq.heappush(self._q, (t, next(self.seq), name, act, link))

    def pending(self) -> int:
        """How many deliveries and fabric calls are queued (stale timers aside)."""
        return len(self._q)

    def dirty(self, name: str) -> None:
        """Node ``name`` ran: ask its deadline once no delivery is due now (``defer_rearm``)."""
        self._dirty.add(name)

    def added(self, name: str) -> None:
        """Node ``name`` (re)joined: its timers order by its first ``add``; ask its deadline."""
        self._order.setdefault(name, len(self._order))
        self._deadline.pop(name, None)
        self._dirty.add(name)

    def removed(self, name: str) -> None:
        """Node ``name`` left: its pending timers are forgotten."""
        self._deadline.pop(name, None)
        self._dirty.discard(name)

    def touch(self, name: str | None = None) -> None:
        """Re-ask node ``name``'s (default: every node's) ``next_deadline()`` before the next
        step: for engine changes made without ``apply``/``call``."""
        self._dirty.update(self.engines if name is None else (name,))

    def arm(self, name: str, deadline: float | None) -> None:
        """A driver's timer: ``name`` is due at ``deadline`` (None: no timer)."""
        if name not in self.engines:
            return
        self._deadline[name] = deadline
        if deadline is not None:
            heapq.heappush(self._timers, (deadline, self._order[name], name))

    def _refresh_deadlines(self) -> None:
        """Re-ask the dirty engines' deadlines (their drivers re-arm if they moved)."""
        for name in self._dirty:
            drv = self.drivers.get(name)
            if drv is not None:
                drv.rearm()
        self._dirty.clear()
        if len(self._timers) > 4 * len(self._deadline) + 64:  # compact the stale entries
            self._timers = [(d, self._order[n], n) for n, d in self._deadline.items()
                            if d is not None]
            heapq.heapify(self._timers)
    def _next_deadline(self) -> float | None:
        """The earliest engine deadline (stale heap entries dropped)."""
        self._refresh_deadlines()
        timers = self._timers
        while timers and self._deadline.get(timers[0][2], _UNQUEUED) != timers[0][0]:
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    def next_time(self) -> float | None:
        """The earliest pending delivery or engine deadline."""
        d = self._next_deadline()
        if self._q and (d is None or self._q[0][0] < d):
            t: float = self._q[0][0]
            return t
        return d

    def step(self, t_end: float = VIRTUAL_TIME_LIMIT) -> bool:
        """Advance to the next pending thing (if not after ``t_end``) and run it: a delivery
        first, else the timers of every engine then due, in ``add`` order."""
        if not self.tracked:
            self.touch()  # the caller may have changed an engine behind the fabric's back
        return self._step(t_end)

    def _step(self, t_end: float) -> bool:
        q = self._q
        if not (q and q[0][0] <= self.now <= t_end):
            # nothing due now: ``next_time()`` written out (one frame less per step); a
            # delivery due now runs before any timer, whatever the deadlines, so the dirty
            # engines' deadlines are asked only here, once per instant, not per delivery
            if self._dirty or len(self._timers) > 4 * len(self._deadline) + 64:
                self._refresh_deadlines()
            timers, deadline = self._timers, self._deadline
            while timers and deadline.get(timers[0][2], _UNQUEUED) != timers[0][0]:
                heapq.heappop(timers)
            t_next = timers[0][0] if timers else None
            if q and (t_next is None or q[0][0] < t_next):
                t_next = q[0][0]
            if t_next is None or t_next > t_end:
                return False
            if t_next > self.now:
                self.now = t_next
            if not (q and q[0][0] <= self.now):
                self._run_timers()
                return True
        entry = heapq.heappop(q)
        n = len(entry)
        if n == 3:
            entry[2]()
        else:  # (its path decision, if the fabric's ``transmit`` gave one)
            self._deliver(entry[2], entry[3], entry[4] if n == 5 else None)
        return True

    def _run_timers(self) -> None:
        """The timers of every engine due now, in ``add`` order."""
        timers, now = self._timers, self.now
        due: set[str] = set()
        while timers and timers[0][0] <= now:
            d, _, name = heapq.heappop(timers)
            if self._deadline.get(name, _UNQUEUED) == d:
                due.add(name)
        for name in sorted(due, key=self._order.__getitem__):
            drv = self.drivers.get(name)
            if drv is not None:
                self._deadline[name] = _UNQUEUED  # popped: pushed again once re-armed
                drv.on_timer()

    def run_until(self, t_end: float) -> None:
        self.touch()
        while self._step(t_end):
            pass
        self.now = max(self.now, t_end)

    def run_guarded(self, t_end: float, done: Callable[[], bool] | None,
                    same_limit: int) -> bool:
        """Step until ``t_end`` or ``done()`` (explore's replay loop, here to run compiled),
        unless ``same_limit`` steps in a row leave virtual time where it was: then False
        (a livelock; the caller says which engines are due)."""
        self.touch()
        last, same = self.now, 0
        while (done is None or not done()) and self.step(t_end):
            if self.now != last:
                last, same = self.now, 0
                continue
            same += 1
            if same >= same_limit:
                return False
        if done is None or not done():
            self.now = max(self.now, t_end)
        return True
