"""The engine's one timer structure: every deadline of every component (STYLE rule 1).

Theory of operation: components never keep heaps of their own clock entries; they *arm* a
deadline under a key they own (``arm(key, at)``), re-arm it (a new time replaces the old one)
or ``cancel`` it. ``next_deadline()`` is the earliest live deadline: one heap peek, stale
entries (re-armed or cancelled keys) dropped lazily. ``due(now)`` pops the keys whose time
has come, in deadline order; a component whose deadline is derived from state it shares with
others (the router checker) is asked through ``poll`` instead (see ``LNetEngine``).

The driver learns cheaply whether it must re-arm its own timer: ``changed`` is true when the
earliest deadline may differ from the one ``next_deadline()`` last returned (an entry armed
earlier than it, or the entry it returned cancelled or popped). When it is false the driver's
armed timer is still right and it need not ask again (issue 13: re-arming after every action
batch cost a large part of a small PUT's CPU).

Keys are tuples ``(kind, ident)``; ``order`` breaks ties between equal deadlines the way the
engine's handlers expect (an MD's response deadline before its caller deadline, lower MD
handles first), so the order of expiries never depends on arming order.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Final

#: timer kinds (the first element of a key)
MD_RESPONSE: Final = "md_rsp"   # response tracker of an MD (spec §3.4)
MD_USER: Final = "md_user"      # caller-imposed timeout of an MD (lnetctl ping --timeout)
FAULT_RELEASE: Final = "fault"  # delayed messages of LNet delay rules (spec §8.3)
MONITOR: Final = "monitor"      # the monitor thread: recovery queues (spec §3.5)
DISCOVERY: Final = "discovery"  # deferred discovery work (spec §5.2)
NI_LOG: Final = "ni_log"        # a local NI state change waits to be logged (dbg-110)

Key = tuple[str, Hashable]
_Entry = tuple[float, int, int, int, Key]


class Timers:
    """Deadlines by key; one heap. ``arm``/``cancel``/``due``/``next_deadline``."""

    __slots__ = ("_at", "_gen", "_heap", "_reported", "changed")

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._at: dict[Key, tuple[float, int]] = {}  # key -> (time, generation) live now
        self._gen = 0
        self._reported: float | None = None  # what next_deadline() returned last
        self.changed = True  # the earliest deadline may differ from ``_reported``

    def arm(self, key: Key, at: float, order: tuple[int, int] = (0, 0)) -> None:
        """Set ``key``'s deadline to ``at`` (replacing any earlier one)."""
        old = self._at.get(key)
        if old is not None and old[0] == at:
            return
        self._gen += 1
        self._at[key] = (at, self._gen)
        heapq.heappush(self._heap, (at, order[0], order[1], self._gen, key))
        if (self._reported is None or at < self._reported
                or (old is not None and old[0] == self._reported)):
            self.changed = True

    def cancel(self, key: Key) -> None:
        old = self._at.pop(key, None)
        if old is not None and old[0] == self._reported:
            self.changed = True

    def deadline(self, key: Key) -> float | None:
        """``key``'s deadline, None when not armed."""
        entry = self._at.get(key)
        return None if entry is None else entry[0]

    def _clean(self) -> None:
        heap, live = self._heap, self._at
        while heap:
            at, _o1, _o2, gen, key = heap[0]
            if live.get(key) == (at, gen):
                return
            heapq.heappop(heap)

    def next_deadline(self) -> float | None:
        """The earliest armed deadline, None when nothing is armed."""
        if not self.changed:  # nothing armed earlier, nothing reported cancelled or popped
            return self._reported
        self._clean()
        first = self._heap[0][0] if self._heap else None
        self._reported = first
        self.changed = False
        return first

    def due(self, now: float, kinds: frozenset[str]) -> list[Key]:
        """Pop, in deadline order, every key of ``kinds`` due at ``now`` (others stay)."""
        out: list[Key] = []
        keep: list[_Entry] = []
        heap, live = self._heap, self._at
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            at, _o1, _o2, gen, key = entry
            if live.get(key) != (at, gen):
                continue
            if key[0] in kinds:
                del live[key]
                out.append(key)
                if at == self._reported:
                    self.changed = True
            else:
                keep.append(entry)
        for entry in keep:
            heapq.heappush(heap, entry)
        return out

    def clear(self, kind: str) -> None:
        """Cancel every key of ``kind`` (unconfigure)."""
        for key in [k for k in self._at if k[0] == kind]:
            self.cancel(key)
