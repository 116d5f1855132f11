"""The sim server's clock: virtual time paced to the wall clock, faster, or only when asked.

Theory of operation: at ``--speed X`` (X > 0) virtual time tracks ``v0 + X * (wall - w0)``
from an anchor ``(w0, v0)``: the pacing task runs the fabric up to that target, then sleeps
until the wall time of the next pending event (or until ``kick``: a request put new work on
the fabric), never more than ``MAX_SLEEP``. A slice of work is bounded by ``SLICE`` seconds of
wall time, then the loop serves requests again, so a busy fabric lags instead of starving the
control socket, and catches up after. Every request first brings the fabric to the target
(``catch_up``), so it sees the time a user's ``sleep 5`` saw pass. ``clock advance S`` jumps
S virtual seconds and re-anchors. ``--speed max`` (``math.inf``) runs ahead as fast as it can
between requests, up to ``VIRTUAL_TIME_LIMIT``. At ``--speed 0`` there is no pacing task: only
``clock advance`` and blocking verbs (which step the fabric themselves) move time.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from testbed.sim.sched import VIRTUAL_TIME_LIMIT

if TYPE_CHECKING:
    from testbed.sim.inproc import SimTestbed

#: Longest wall-clock slice of fabric work before requests are served again.
SLICE = 0.02
#: Longest sleep of the pacing task (it re-checks the target at least this often).
MAX_SLEEP = 0.5


def parse_speed(text: str) -> float:
    """``--speed``: a number >= 0, or ``max``.

    Raises:
        ValueError: with a one-line reason.
    """
    if text == "max":
        return math.inf
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"speed must be a number >= 0 or 'max', not {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"speed must be a number >= 0 or 'max', not {text!r}")
    return value


class Pacer:
    """Drives one testbed's virtual clock (see the module docstring)."""

    def __init__(self, tb: SimTestbed, speed: float, after: Callable[[], None]) -> None:
        self.tb = tb
        self.speed = speed
        self.after = after  # called after each slice of work (the server flushes its logs)
        self._kick = asyncio.Event()
        self.anchor()
        tb.paced = speed > 0
        tb.kick = self._kick.set

    def anchor(self) -> None:
        self.w0, self.v0 = time.monotonic(), self.tb.fabric.now

    def target(self) -> float:
        if self.speed == 0:
            return self.tb.fabric.now
        if math.isinf(self.speed):
            return VIRTUAL_TIME_LIMIT
        return min(self.v0 + (time.monotonic() - self.w0) * self.speed, VIRTUAL_TIME_LIMIT)

    def catch_up(self, budget: float | None = None) -> bool:
        """Run the fabric up to the target (for at most ``budget`` wall seconds); True when
        it got there."""
        if self.speed == 0:
            return True
        fab, target = self.tb.fabric, self.target()
        end = None if budget is None else time.monotonic() + budget
        with self.tb.lock:
            while fab.step(target):
                if end is not None and time.monotonic() >= end:
                    return False
            if not math.isinf(self.speed):
                fab.now = max(fab.now, target)
        return True

    def advance(self, seconds: float) -> None:
        """``clock advance``: ``seconds`` of virtual time now, then pace from there."""
        self.catch_up()
        self.tb.run(seconds)
        self.anchor()

    async def run(self) -> None:
        """The pacing task (speed > 0)."""
        while True:
            done = self.catch_up(budget=SLICE)
            self.after()
            self._kick.clear()
            if not done:
                await asyncio.sleep(0)  # serve requests, then carry on
                continue
            nxt = self.tb.fabric.next_time()
            if math.isinf(self.speed):
                if nxt is None or self.tb.fabric.now >= VIRTUAL_TIME_LIMIT:
                    await self._wait(MAX_SLEEP)
                else:
                    await asyncio.sleep(0)
                continue
            wait = MAX_SLEEP if nxt is None else \
                (nxt - self.v0) / self.speed - (time.monotonic() - self.w0)
            await self._wait(min(max(wait, 0.0), MAX_SLEEP))

    async def _wait(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._kick.wait(), timeout=seconds)
