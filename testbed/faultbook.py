"""What every backend's fault manager shares (issue 29 item 3): a fault's record (id, spec,
seed, timeline of activations, counters, error), the book of a testbed's faults with the one
fault-manager tick, and the guard that turns an unexpected error in a request into a reply
instead of taking the process down.

Theory of operation: :class:`FaultBook` keeps the faults of one testbed (ids ``f1``,
``f2``..., names unique, a seed given or drawn) and runs their schedule: :meth:`FaultBook.tick`
walks every fault's due transitions (``faults.sched.Timeline.due``) in order and hands each
to the backend's part, which only applies an activation's resources (``apply(f, k)``) or
undoes them (``revert(f, k)``); a transition that raises marks the fault failed and calls the
backend's ``fail(f)``, which undoes what the fault left. The backends' managers: Mininet's
``testbed/mininet/faultctl.py`` (resources in the node's namespace), vagrant/hosts'
``testbed/vagrant/faults.py`` (through each host's agent), and the simulator's
``testbed/sim/netfaults.py`` (the fabric's rules and links, on the virtual clock: it runs
one fault's transitions at a time, :meth:`FaultBook.advance`, each at that fault's own
deadline on the fabric's queue, so applies and undoes keep their order among the fabric's
other events; a fault without a seed gets one derived from the testbed's seed and its id,
``draw``, so a replay is exact)."""

from __future__ import annotations

import functools
import random
import traceback
from collections.abc import Callable
from typing import Any

from faults.sched import Timeline
from faults.spec import FaultSpec
from nodes.echo import shown


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


#: what a backend does with one transition of one fault: apply or revert activation ``k``
Transition = Callable[[FaultRecord, int], None]


class FaultBook:
    """The faults of one testbed and their schedule (module docstring); the backend's part is
    ``apply``, ``revert`` and ``fail``."""

    def __init__(self, apply: Transition, revert: Transition,
                 fail: Callable[[FaultRecord], None],
                 draw: Callable[[str], int] | None = None, quiet: bool = False) -> None:
        self.faults: dict[str, FaultRecord] = {}
        self.next_id = 1
        self.apply, self.revert, self.fail = apply, revert, fail
        #: a failed transition's traceback not printed (the simulator: a fault that fails
        #: is an event of its log, ``fault_failed``; explore's swarms fail some on purpose)
        self.quiet = quiet
        #: the seed of a fault (by id) that has none: drawn at random unless given
        self.draw = draw if draw is not None else \
            (lambda _fid: random.SystemRandom().randrange(2**31))

    def create(self, spec: FaultSpec, now: float,
               seed: int | None = None) -> FaultRecord | str:
        """A new fault, filed (not yet applied: :meth:`tick`), or why not in one line. Its seed:
        ``seed``, else the spec's, else drawn (and recorded in the fault's events)."""
        if spec.name and any(f.spec.name == spec.name for f in self.faults.values()):
            return f"a fault named {spec.name} exists"
        fid = f"f{self.next_id}"
        self.next_id += 1
        if seed is None:
            seed = spec.seed if spec.seed is not None else self.draw(fid)
        fault = self.faults[fid] = FaultRecord(fid, spec, seed, now)
        return fault

    def find(self, key: str) -> FaultRecord | None:
        """The fault with id or name ``key``."""
        if key in self.faults:
            return self.faults[key]
        return next((f for f in self.faults.values() if f.spec.name == key), None)

    def withdraw(self, key: str) -> FaultRecord | str:
        """``fault del``: the fault with id or name ``key`` taken off the book, its active
        window undone first by the backend's ``revert``; or why not, in one line."""
        f = self.find(key)
        if f is None:
            return f"no fault {shown(key)} (have: {', '.join(self.faults) or 'none'})"
        if f.timeline.active:
            self.revert(f, f.timeline.index)
        del self.faults[f.fid]
        return f

    def next_deadline(self) -> float | None:
        times = [t for f in self.faults.values() if not f.error
                 for t in [f.timeline.next_deadline()] if t is not None]
        return min(times, default=None)

    def tick(self, now: float) -> None:
        """Every fault's due transitions up to ``now``, in order (:meth:`advance`)."""
        for f in list(self.faults.values()):
            self.advance(f, now)

    def advance(self, f: FaultRecord, now: float) -> None:
        """The one fault-manager tick of one fault: its due transitions up to ``now``, in
        order, each handed to the backend's part; one that raises fails the fault (the
        process goes on: a fault's failure must not stop the testbed)."""
        if f.error:
            return
        try:
            for what, k in f.timeline.due(now):
                (self.apply if what == "apply" else self.revert)(f, k)
                if f.state == "failed":  # (the backend's part set ``error``)
                    break
        except Exception as exc:
            if not self.quiet:
                traceback.print_exc()
            f.error = f"{type(exc).__name__}: {exc}"
            self.fail(f)
