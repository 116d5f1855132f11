"""When a fault is active: a pure timeline of activation windows (no clock, no I/O).

Theory of operation (STYLE rule 13, orchestrator logic tested against a fake clock): a
:class:`Timeline` is built from a spec's schedule (``start``/``at``, ``duration``, ``repeat``,
``every``; for ``flap`` its ``down``/``up``/``count``/``jitter``) and the time the fault was
added. ``due(now)`` returns the transitions (``"apply"``/``"revert"``, with the activation
index) that are due by ``now``, in order; ``next_deadline()`` says when to call again. The
supervisor's loop (``testbed.mininet.faultctl``) drives it with the real time; unit tests with
numbers. Flap jitter comes from ``random.Random(seed)``, so a recorded seed replays the same
down/up times.

Windows: activation k (k = 0 .. repeat-1, or forever when repeat is 0) starts at
``first + k * every`` and ends ``duration`` later (never, when there is no duration: the fault
stays until deleted). A flap's windows are its "down" phases: down for ``down`` +/- jitter, up
for ``up`` +/- jitter, ``count`` times (0: until deleted, or until ``duration`` is over).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from faults.spec import FaultSpec

#: Shortest phase a jittered flap may get, in seconds.
MIN_PHASE = 0.01


def first_start(spec: FaultSpec, added_at: float) -> float:
    return spec.at if spec.at is not None else added_at + spec.start


def windows(spec: FaultSpec, added_at: float, seed: int) -> Iterator[tuple[float, float | None]]:
    """Activation windows ``(start, end or None)`` of ``spec``, in time order."""
    t0 = first_start(spec, added_at)
    if spec.kind == "flap":
        yield from _flap_windows(spec.params, t0, spec.duration, seed)
        return
    k = 0
    while spec.repeat == 0 or k < spec.repeat:
        start = t0 + k * (spec.every or 0.0)
        yield start, (start + spec.duration) if spec.duration is not None else None
        k += 1


def _flap_windows(p: dict[str, Any], t0: float, duration: float | None,
                  seed: int) -> Iterator[tuple[float, float | None]]:
    rng = random.Random(seed)
    stop = t0 + duration if duration is not None else None
    t = t0
    n = 0
    while p["count"] == 0 or n < p["count"]:
        if stop is not None and t >= stop:
            return
        down = max(MIN_PHASE, p["down"] + rng.uniform(-p["jitter"], p["jitter"]))
        up = max(MIN_PHASE, p["up"] + rng.uniform(-p["jitter"], p["jitter"]))
        end = t + down if stop is None else min(t + down, stop)
        yield t, end
        t = t + down + up
        n += 1


class Timeline:
    """Transitions of one fault, consumed in order."""

    def __init__(self, spec: FaultSpec, added_at: float, seed: int) -> None:
        self._windows = windows(spec, added_at, seed)
        self._next: tuple[float, float | None] | None = next(self._windows, None)
        self.active = False
        self.index = -1  # activation number
        self.done = self._next is None

    def next_deadline(self) -> float | None:
        """Time of the next transition (None: nothing more will happen by itself)."""
        if self.active:
            end = self._cur_end
            return end
        return None if self._next is None else self._next[0]

    def due(self, now: float) -> list[tuple[str, int]]:
        """Transitions due by ``now``: ``[("apply", k), ("revert", k), ...]``."""
        out: list[tuple[str, int]] = []
        while True:
            if self.active:
                if self._cur_end is None or self._cur_end > now:
                    return out
                self.active = False
                out.append(("revert", self.index))
                if self._next is None:
                    self.done = True
                continue
            if self._next is None or self._next[0] > now:
                return out
            _start, end = self._next
            self._next = next(self._windows, None)
            self.index += 1
            self.active = True
            self._cur_end = end
            out.append(("apply", self.index))

    _cur_end: float | None = None
