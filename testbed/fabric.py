"""In-memory fabric: N engines, a virtual clock, links that can fail (STYLE rule 13).

Theory of operation: each engine's ``Transmit`` becomes a delivery to the engine owning the
destination NID after ``latency`` virtual seconds, followed by the sender's ``TxCompleted``;
``run_until`` jumps virtual time to the earliest pending delivery or engine deadline, so tests
are exact and instant. A NID marked down makes transmissions from or to it fail the way the
socklnd reports an unreachable peer. This is the core the ``sim`` backend grows from; the
Mininet backend stays the real thing.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from nodes.lnet.actions import Action, Log, MDEvent, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import ENETUNREACH
from nodes.lnet.events import MessageReceived, TxCompleted
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID


@dataclass(order=True)
class _Pending:
    t: float
    seq: int
    fn: Callable[[], None] = field(compare=False)


class Fabric:
    """Engines wired by NID. ``events[name]`` collects each node's MD events in order."""

    def __init__(self, latency: float = 0.001) -> None:
        self.now = 0.0
        self.latency = latency
        self.engines: dict[str, LNetEngine] = {}
        self.owner: dict[NID, str] = {}
        self.down: set[NID] = set()
        self.events: dict[str, list[MDEvent]] = {}
        self.log: list[tuple[float, str, str]] = []
        self.transmits: list[tuple[float, str, Transmit]] = []
        self._q: list[_Pending] = []
        self._seq = itertools.count()
        self.hold = False  # when true, transmissions are queued but never delivered

    def add(self, name: str, engine: LNetEngine) -> LNetEngine:
        self.engines[name] = engine
        self.events[name] = []
        for ni in engine.local_nis():
            self.owner[ni.nid] = name
        return engine

    def refresh(self) -> None:
        for name, eng in self.engines.items():
            for ni in eng.local_nis():
                self.owner[ni.nid] = name

    def _at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._q, _Pending(t, next(self._seq), fn))

    def apply(self, name: str, actions: list[Action]) -> None:
        for act in actions:
            if isinstance(act, Transmit):
                self.transmits.append((self.now, name, act))
                self._transmit(name, act)
            elif isinstance(act, MDEvent):
                self.events[name].append(act)
            elif isinstance(act, Log):
                self.log.append((self.now, name, act.text))

    def _transmit(self, name: str, act: Transmit) -> None:
        src_eng = self.engines[name]
        if act.ni in self.down or act.lpni in self.down or act.lpni not in self.owner:
            self._at(self.now + self.latency, lambda: self.apply(name, src_eng.handle(
                TxCompleted(tx_id=act.tx_id, rc=-ENETUNREACH, hstatus=HStatus.REMOTE_DROPPED),
                self.now)))
            return
        if self.hold:
            return
        dst = self.owner[act.lpni]

        def deliver() -> None:
            ev = MessageReceived(ni=act.lpni, peer_nid=act.ni, hdr=act.hdr, payload=act.payload)
            self.apply(dst, self.engines[dst].handle(ev, self.now))
            self.apply(name, src_eng.handle(
                TxCompleted(tx_id=act.tx_id, rc=0, hstatus=HStatus.OK), self.now))

        self._at(self.now + self.latency, deliver)

    def call(self, name: str, fn: Callable[..., object], *args: object, **kw: object) -> object:
        """Run an engine API call on node ``name`` now; returns the call's value if any."""
        result = fn(*args, **kw)
        if isinstance(result, tuple):
            value, actions = result
        else:
            value, actions = None, result
        self.apply(name, actions or [])  # type: ignore[arg-type]
        return value

    def run_until(self, t_end: float) -> None:
        while True:
            deadlines = [(d, n) for n, e in self.engines.items()
                         if (d := e.next_deadline()) is not None]
            t_q = self._q[0].t if self._q else None
            t_d = min(deadlines)[0] if deadlines else None
            t_next = min(x for x in (t_q, t_d) if x is not None) if (t_q or t_d) else None
            if t_next is None or t_next > t_end:
                self.now = max(self.now, t_end)
                return
            self.now = max(self.now, t_next)
            if t_q is not None and t_q <= self.now:
                heapq.heappop(self._q).fn()
                continue
            for name, eng in self.engines.items():
                d = eng.next_deadline()
                if d is not None and d <= self.now:
                    self.apply(name, eng.handle_timer(self.now))
