"""In-memory fabric: N engines, a virtual clock, links that fail (STYLE rule 13).

Theory of operation: each engine's ``Transmit`` becomes a delivery to the engine owning the
destination NID after the link latency (virtual seconds), followed by the sender's
``TxCompleted``; ``step``/``run_until`` jump virtual time to the earliest pending delivery or
engine deadline, so tests are exact and instant. Link state is per NID (``set_link``) and
NIDs may be given an L2 segment (``segment``): a transmission from or to a NID that is down,
or between two segments, fails the way the socklnd reports an unreachable
peer (REMOTE_DROPPED, -ENETUNREACH, spec §3.7). Latency is per NID (the larger of both ends)
plus an optional jitter drawn from the fabric's own seeded RNG. Every message and MD event is
appended to ``event_log`` with its virtual timestamp: the same seed and the same inputs give
the same log, byte for byte. This is the core of the ``sim`` backend (``testbed/sim.py``).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodes.lnet.actions import Action, Log, MDEvent, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import ENETUNREACH
from nodes.lnet.events import MessageReceived, TxCompleted
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

#: virtual time never runs past this (a guard against a waiter that cannot complete)
VIRTUAL_TIME_LIMIT = 1e7


@dataclass(order=True)
class _Pending:
    t: float
    seq: int
    fn: Callable[[], None] = field(compare=False)


class Fabric:
    """Engines wired by NID. ``events[name]`` collects each node's MD events in order."""

    def __init__(self, latency: float = 0.001, *, seed: int = 0, jitter: float = 0.0) -> None:
        self.now = 0.0
        self.latency = latency
        self.jitter = jitter
        self.rng = random.Random(seed)
        self.engines: dict[str, LNetEngine] = {}
        self.owner: dict[NID, str] = {}
        self.down: set[NID] = set()
        self.nid_latency: dict[NID, float] = {}
        self.segment: dict[NID, str] = {}  # L2 segment per NID; unknown NIDs reach everyone
        self.events: dict[str, list[MDEvent]] = {}
        self.log: list[tuple[float, str, str]] = []
        self.transmits: list[tuple[float, str, Transmit]] = []
        self.event_log: list[dict[str, Any]] = []
        self._q: list[_Pending] = []
        self._seq = itertools.count()
        self.hold = False  # when true, transmissions are queued but never delivered

    # ------------------------------------------------------------------ wiring
    def add(self, name: str, engine: LNetEngine) -> LNetEngine:
        self.engines[name] = engine
        self.events[name] = []
        for ni in engine.local_nis():
            self.owner[ni.nid] = name
        return engine

    def refresh(self) -> None:
        """Re-read every engine's NIs (after net add/del)."""
        self.owner = {ni.nid: name for name, eng in self.engines.items()
                      for ni in eng.local_nis()}

    def set_link(self, nid: NID, up: bool) -> None:
        """Link state of the interface carrying ``nid`` (logged as a ``link`` event)."""
        (self.down.discard if up else self.down.add)(nid)
        self.record("link", self.owner.get(nid, "?"), nid=str(nid), state="up" if up else "down")

    def set_latency(self, nid: NID, latency: float) -> None:
        self.nid_latency[nid] = latency

    def record(self, event: str, node: str, /, **fields: Any) -> None:
        """Append one entry to ``event_log`` at the current virtual time."""
        self.event_log.append({"t": round(self.now, 9), "node": node, "event": event, **fields})

    def _link_latency(self, a: NID, b: NID) -> float:
        lat = max(self.nid_latency.get(a, self.latency), self.nid_latency.get(b, self.latency))
        return lat + (self.rng.uniform(0, self.jitter) if self.jitter else 0.0)

    def reachable(self, a: NID, b: NID) -> bool:
        """Both links up, ``b`` owned by an engine, and both on one segment (if known)."""
        if a in self.down or b in self.down or b not in self.owner:
            return False
        sa, sb = self.segment.get(a), self.segment.get(b)
        return sa is None or sb is None or sa == sb

    def _at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._q, _Pending(t, next(self._seq), fn))

    # ------------------------------------------------------------------ actions
    def apply(self, name: str, actions: list[Action]) -> None:
        for act in actions:
            if isinstance(act, Transmit):
                self.transmits.append((self.now, name, act))
                self.record("send", name, tx=act.tx_id, type=act.hdr.type.name, ni=str(act.ni),
                            lpni=str(act.lpni), src=str(act.hdr.src_nid),
                            dst=str(act.hdr.dest_nid), nob=len(act.payload))
                self._transmit(name, act)
            elif isinstance(act, MDEvent):
                self.events[name].append(act)
                self.record("md", name, handle=act.handle, kind=act.kind, status=act.status,
                            unlinked=act.unlinked)
            elif isinstance(act, Log):
                self.log.append((self.now, name, act.text))

    def _complete(self, name: str, tx_id: int, rc: int, hstatus: HStatus) -> None:
        self.record("tx_done", name, tx=tx_id, rc=rc, hstatus=hstatus.name)
        self.apply(name, self.engines[name].handle(
            TxCompleted(tx_id=tx_id, rc=rc, hstatus=hstatus), self.now))

    def _transmit(self, name: str, act: Transmit) -> None:
        delay = self._link_latency(act.ni, act.lpni)
        if not self.reachable(act.ni, act.lpni):
            self._at(self.now + delay, lambda: self._complete(
                name, act.tx_id, -ENETUNREACH, HStatus.REMOTE_DROPPED))
            return
        if self.hold:
            return
        dst = self.owner[act.lpni]

        def deliver() -> None:
            if not self.reachable(act.ni, act.lpni):  # the link went down in flight
                self._complete(name, act.tx_id, -ENETUNREACH, HStatus.REMOTE_DROPPED)
                return
            self.record("recv", dst, type=act.hdr.type.name, ni=str(act.lpni),
                        peer=str(act.ni), src=str(act.hdr.src_nid), dst=str(act.hdr.dest_nid))
            ev = MessageReceived(ni=act.lpni, peer_nid=act.ni, hdr=act.hdr, payload=act.payload)
            self.apply(dst, self.engines[dst].handle(ev, self.now))
            self._complete(name, act.tx_id, 0, HStatus.OK)

        self._at(self.now + delay, deliver)

    def call(self, name: str, fn: Callable[..., object], *args: object, **kw: object) -> object:
        """Run an engine API call on node ``name`` now; returns the call's value if any."""
        result = fn(*args, **kw)
        if isinstance(result, tuple):
            value, actions = result
        else:
            value, actions = None, result
        self.apply(name, actions or [])  # type: ignore[arg-type]
        return value

    # ------------------------------------------------------------------ time
    def next_time(self) -> float | None:
        """The earliest pending delivery or engine deadline."""
        times = [d for e in self.engines.values() if (d := e.next_deadline()) is not None]
        if self._q:
            times.append(self._q[0].t)
        return min(times, default=None)

    def step(self, t_end: float = VIRTUAL_TIME_LIMIT) -> bool:
        """Advance to the next pending thing (if not after ``t_end``) and run it."""
        t_next = self.next_time()
        if t_next is None or t_next > t_end:
            return False
        self.now = max(self.now, t_next)
        if self._q and self._q[0].t <= self.now:
            heapq.heappop(self._q).fn()
            return True
        for name, eng in self.engines.items():
            d = eng.next_deadline()
            if d is not None and d <= self.now:
                self.apply(name, eng.handle_timer(self.now))
        return True

    def run_until(self, t_end: float) -> None:
        while self.step(t_end):
            pass
        self.now = max(self.now, t_end)
