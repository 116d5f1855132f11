"""A fault's record, shared by every backend's fault manager (Mininet: faultctl, sim:
netfaults): id, spec, seed, timeline of activations, counters, error; and the guard that
turns an unexpected error in a request into a reply instead of taking the process down."""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from typing import Any

from faults.sched import Timeline
from faults.spec import FaultSpec


def never_raise(method: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A request must not take the supervisor down: an unexpected error becomes a reply."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kw: Any) -> dict[str, Any]:
        try:
            return method(*args, **kw)
        except Exception as exc:
            traceback.print_exc()
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    return wrapper


class FaultRecord:
    """One fault of a testbed and what it did so far."""

    def __init__(self, fid: str, spec: FaultSpec, seed: int, added: float) -> None:
        self.fid = fid
        self.spec = spec
        self.seed = seed
        self.added = added
        self.timeline = Timeline(spec, added, seed)
        self.resources: list[dict[str, Any]] = []
        self.activations = 0
        self.totals: dict[str, int] = {}
        self.error: str | None = None

    @property
    def instant(self) -> bool:
        """A process fault that is an event, not a state: ``restart``, and ``kill`` with no
        duration (nothing will revert it). Its one window never ends (faults.sched), so
        without this it stayed "active" in ``fault list`` forever (issue 11 item 10)."""
        return self.spec.duration is None and self.spec.kind in ("kill", "restart")

    @property
    def state(self) -> str:
        if self.error:
            return "failed"
        if self.timeline.active:
            return "done" if self.instant else "active"
        return "done" if self.timeline.done else "pending"
