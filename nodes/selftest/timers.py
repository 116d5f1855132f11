"""Selftest's timers (lnet/selftest/timer.c ``stt_add_timer``/``stt_del_timer``), sans-I/O.

Theory of operation: one heap of (deadline, sequence, key) with the live deadline of each key
in a dict; re-arming or cancelling a key leaves its old heap entry behind, skipped when popped
(lazy deletion). ``due(now)`` pops every key whose deadline has come, in deadline order (ties
in arming order), and ``next_deadline`` is a peek. Keys are whatever the owner uses to find
what to do (an RPC's expiry, a session's, the console pinger).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable


class TimerHeap:
    """Keyed one-shot timers."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._live: dict[Hashable, tuple[float, int]] = {}
        self._seq = itertools.count()

    def arm(self, key: Hashable, at: float) -> None:
        """(Re-)arm ``key`` to fire at ``at``."""
        entry = (at, next(self._seq))
        self._live[key] = entry
        heapq.heappush(self._heap, (*entry, key))

    def cancel(self, key: Hashable) -> bool:
        """Disarm ``key``; True if it was armed (``stt_del_timer``)."""
        return self._live.pop(key, None) is not None

    def armed(self, key: Hashable) -> bool:
        return key in self._live

    def _clean(self) -> None:
        heap, live = self._heap, self._live
        while heap and live.get(heap[0][2]) != heap[0][:2]:
            heapq.heappop(heap)

    def next_deadline(self) -> float | None:
        self._clean()
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[Hashable]:
        """The keys whose deadline is ``now`` or earlier (disarmed as they are returned)."""
        out: list[Hashable] = []
        while True:
            self._clean()
            if not self._heap or self._heap[0][0] > now:
                return out
            _at, _seq, key = heapq.heappop(self._heap)
            del self._live[key]
            out.append(key)
