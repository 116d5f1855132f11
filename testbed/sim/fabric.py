"""In-memory fabric: N engines, a virtual clock, links that fail (STYLE rule 13).

Theory of operation: each engine's ``Transmit`` becomes a delivery to the engine owning the
destination NID after the link latency (virtual seconds), followed by the sender's
``TxCompleted``; ``step``/``run_until`` jump virtual time to the earliest pending delivery or
engine deadline, so tests are exact and instant. Latency is per NID (the larger of both ends)
plus an optional jitter drawn from the fabric's own seeded RNG.

Reachability mimics what the socklnd sees on a Mininet host (spec §3.7, snd-080/085):

* link state is per NID (``set_link``); a send *from* a NI whose link is down fails at once
  with -ENETDOWN / REMOTE_DROPPED, as ksocklnd fails txs on an interface that lost its carrier;
* NIDs may be given an L2 segment (``segment``) and a host (``host``, the node owning the
  interface even when no NI is configured on it). Two NIDs on one segment reach each other.
  Across segments the *host* routes: a NI on lan0 sending to a peer NID on lan1 of the same
  LNet net goes out of the host's interface on lan1 (Linux connected route, weak host model),
  so it is deliverable if any up interface of the sending host is on the destination's
  segment; otherwise it fails with -ENETUNREACH / REMOTE_DROPPED (no route);
* a destination that is down or owned by no engine fails with -ENETUNREACH / REMOTE_DROPPED.

The check is made at send time and again at arrival (a link that went down in flight fails
the tx as ``ksocknal_del_peer`` fails the txs of a closed connection).

Like the socklnd, the fabric tells the sending engine about peer NI aliveness
(``PeerNotify``, ``lnet_notify``, seed 002 rtr-mr-lnd-notify): alive on the first delivery
over a (NI, peer NI) pair (a "connection"), dead when a tx over the pair fails (before its
completion, so a resend sees it); ``NotifyPeerDown`` "closes" the sender's pairs to that NID
(logged as a ``notify_peer_down`` event).

Every message, MD event and link change is appended to ``event_log`` with the schema of the
Mininet backend's events.jsonl, ``{"t": <virtual seconds>, "kind": ..., "node": ..., ...}``
(kinds: ``send``, ``recv``, ``tx_done``, ``md`` (``type``: the LNet event type),
``link_down``/``link_up``): the same seed and the same inputs give the same log, byte for
byte. This is the core of the ``sim`` backend (``testbed/sim/``).

Scheduling costs O(log n) per event, not O(n) in the number of engines: each engine's
``next_deadline()`` is cached in a heap of ``(deadline, engine order, name)`` and re-asked only
for engines marked dirty, which ``apply`` (so every ``call``, delivery and timer), ``add``,
``refresh`` and ``touch`` do; stale heap entries are dropped lazily. Unit tests change engines
directly (``eng.set_tunable(...)`` with no ``apply``), so each ``run_until`` and, unless the
fabric is ``tracked``, each ``step`` called from outside first re-asks every engine; a
``tracked`` fabric (``SimFabric``: the sim runtimes route every engine change through
``apply``/``flush``/``refresh``) re-asks only the dirty ones. Engines due at the same instant
run in ``add`` order, as a scan of every engine would run them, so the event log is the same
as an unindexed fabric's.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodes.lnet.actions import Action, Log, MDEvent, NotifyPeerDown, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import ENETDOWN, ENETUNREACH
from nodes.lnet.events import MessageReceived, PeerNotify, TxCompleted
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

#: virtual time never runs past this (a guard against a waiter that cannot complete)
VIRTUAL_TIME_LIMIT = 1e7
_UNQUEUED = float("nan")  # the cached deadline of an engine with none in the heap (!= any t)


@dataclass(order=True)
class _Pending:
    t: float
    seq: int
    fn: Callable[[], None] = field(compare=False)


class Fabric:
    """Engines wired by NID. ``events[name]`` collects each node's MD events in order."""

    #: every engine change reaches ``apply``/``refresh``/``touch``: ``step`` need not re-ask all
    tracked = False

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
        self.host: dict[NID, str] = {}  # host of each interface NID (default: its owner)
        self.events: dict[str, list[MDEvent]] = {}
        self.log: list[tuple[float, str, str]] = []
        self.transmits: list[tuple[float, str, Transmit]] = []
        self.event_log: list[dict[str, Any]] = []
        self._q: list[_Pending] = []
        self._seq = itertools.count()
        self.hold = False  # when true, transmissions are queued but never delivered
        self.connected: set[tuple[str, NID, NID]] = set()  # (node, NI, peer NI) "connections"
        self._order: dict[str, int] = {}  # engine -> add order (ties between due engines)
        self._deadline: dict[str, float | None] = {}  # engine -> deadline it has in _timers
        self._dirty: set[str] = set()  # engines whose next_deadline() must be asked again
        self._timers: list[tuple[float, int, str]] = []  # heap; entries may be stale
        self._nid_text: dict[NID, str] = {}

    # ------------------------------------------------------------------ wiring
    def add(self, name: str, engine: LNetEngine) -> LNetEngine:
        self.engines[name] = engine
        self.events[name] = []
        self._order.setdefault(name, len(self._order))
        self._deadline.pop(name, None)
        self._dirty.add(name)
        for ni in engine.local_nis():
            self.owner[ni.nid] = name
        return engine

    def refresh(self) -> None:
        """Re-read every engine's NIs (after net add/del)."""
        self.owner = {ni.nid: name for name, eng in self.engines.items()
                      for ni in eng.local_nis()}
        self.touch()

    def touch(self, name: str | None = None) -> None:
        """Re-ask node ``name``'s (default: every node's) ``next_deadline()`` before the next
        step: for engine changes made without ``apply``/``call``."""
        self._dirty.update(self.engines if name is None else (name,))

    def set_link(self, nid: NID, up: bool, iface: str | None = None) -> None:
        """Link state of the interface carrying ``nid`` (a ``link_up``/``link_down`` event,
        as the Mininet supervisor logs it)."""
        (self.down.discard if up else self.down.add)(nid)
        node = self.host.get(nid) or self.owner.get(nid, "?")
        extra = {"iface": iface} if iface is not None else {}
        self.record(f"link_{'up' if up else 'down'}", node, nid=str(nid), **extra)

    def set_latency(self, nid: NID, latency: float) -> None:
        self.nid_latency[nid] = latency

    def record(self, kind: str, node: str, /, **fields: Any) -> None:
        """Append ``{"t", "kind", "node", **fields}`` to ``event_log`` (events.jsonl schema)."""
        self.event_log.append({"t": round(self.now, 9), "kind": kind, "node": node, **fields})

    def _nid_str(self, nid: NID) -> str:
        """``str(nid)``, cached: formatting NIDs was a seventh of the time per message."""
        text = self._nid_text.get(nid)
        if text is None:
            text = self._nid_text[nid] = str(nid)
        return text

    def _link_latency(self, a: NID, b: NID) -> float:
        lat = max(self.nid_latency.get(a, self.latency), self.nid_latency.get(b, self.latency))
        return lat + (self.rng.uniform(0, self.jitter) if self.jitter else 0.0)

    def path_error(self, a: NID, b: NID) -> int:
        """0 if NI ``a`` can reach NID ``b`` now, else the errno the socklnd would report:
        -ENETDOWN (``a``'s own link is down), -ENETUNREACH (no route to ``b``, ``b`` down or
        gone). Across segments the sending host routes (see the module docstring)."""
        if a in self.down:
            return -ENETDOWN
        if b in self.down or b not in self.owner:
            return -ENETUNREACH
        sa, sb = self.segment.get(a), self.segment.get(b)
        if sa is None or sb is None or sa == sb:
            return 0
        host = self.host.get(a) or self.owner.get(a)
        for nid, seg in self.segment.items():
            if seg == sb and nid not in self.down and (
                    self.host.get(nid) or self.owner.get(nid)) == host:
                return 0
        return -ENETUNREACH

    def reachable(self, a: NID, b: NID) -> bool:
        """``path_error(a, b) == 0``."""
        return self.path_error(a, b) == 0

    def _at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._q, _Pending(t, next(self._seq), fn))

    # ------------------------------------------------------------------ actions
    def apply(self, name: str, actions: list[Action]) -> None:
        self._dirty.add(name)  # the engine was just called: its deadline may have moved
        for act in actions:
            if isinstance(act, Transmit):
                self.transmits.append((self.now, name, act))
                nid = self._nid_str
                self.record("send", name, tx=act.tx_id, type=act.hdr.type.name, ni=nid(act.ni),
                            lpni=nid(act.lpni), src=nid(act.hdr.src_nid),
                            dst=nid(act.hdr.dest_nid), nob=len(act.payload))
                self._transmit(name, act)
            elif isinstance(act, MDEvent):
                self.events[name].append(act)
                self.record("md", name, handle=act.handle, type=act.kind, status=act.status,
                            unlinked=act.unlinked)
            elif isinstance(act, Log):
                self.log.append((self.now, name, act.text))
            elif isinstance(act, NotifyPeerDown):  # lnd_notify_peer_down: conns closed
                self.record("notify_peer_down", name, lpni=str(act.lpni))
                self.log.append((self.now, name, f"socklnd: LNet notified peer NI {act.lpni} "
                                                 "dead"))
                self.connected = {c for c in self.connected
                                  if not (c[0] == name and c[2] == act.lpni)}

    def _notify(self, name: str, ni: NID, lpni: NID, alive: bool) -> None:
        """The LND's ``lnet_notify`` on a "connection" change of (ni, lpni)."""
        key = (name, ni, lpni)
        if alive == (key in self.connected) and alive:
            return
        (self.connected.add if alive else self.connected.discard)(key)
        self.record("peer_notify", name, ni=str(ni), lpni=str(lpni), alive=alive)
        self.apply(name, self.engines[name].handle(
            PeerNotify(ni=ni, nid=lpni, alive=alive), self.now))

    def _fail(self, name: str, act: Transmit, rc: int) -> None:
        self._notify(name, act.ni, act.lpni, False)
        self._complete(name, act.tx_id, rc, HStatus.REMOTE_DROPPED)

    def _complete(self, name: str, tx_id: int, rc: int, hstatus: HStatus) -> None:
        self.record("tx_done", name, tx=tx_id, rc=rc, hstatus=hstatus.name)
        self.apply(name, self.engines[name].handle(
            TxCompleted(tx_id=tx_id, rc=rc, hstatus=hstatus), self.now))

    def _transmit(self, name: str, act: Transmit) -> None:
        delay = self._link_latency(act.ni, act.lpni)
        rc = self.path_error(act.ni, act.lpni)
        if rc:  # -ENETDOWN fails at once (dead interface), no route after the latency
            self._at(self.now + (0.0 if rc == -ENETDOWN else delay),
                     lambda: self._fail(name, act, rc))
            return
        if self.hold:
            return
        dst = self.owner[act.lpni]

        def deliver() -> None:
            rc = self.path_error(act.ni, act.lpni)
            if rc:  # a link went down in flight: the conn closed under the tx
                self._fail(name, act, rc)
                return
            self._notify(name, act.ni, act.lpni, True)
            nid = self._nid_str
            self.record("recv", dst, type=act.hdr.type.name, ni=nid(act.lpni),
                        peer=nid(act.ni), src=nid(act.hdr.src_nid), dst=nid(act.hdr.dest_nid))
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
    def _refresh_deadlines(self) -> None:
        """Re-ask the dirty engines' deadlines; push the ones that changed."""
        for name in self._dirty:
            eng = self.engines.get(name)
            d = eng.next_deadline() if eng is not None else None
            if name in self._deadline and self._deadline[name] == d:
                continue
            self._deadline[name] = d
            if d is not None:
                heapq.heappush(self._timers, (d, self._order[name], name))
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
        if self._q and (d is None or self._q[0].t < d):
            return self._q[0].t
        return d

    def step(self, t_end: float = VIRTUAL_TIME_LIMIT) -> bool:
        """Advance to the next pending thing (if not after ``t_end``) and run it: a delivery
        first, else the timers of every engine then due, in ``add`` order."""
        if not self.tracked:
            self.touch()  # the caller may have changed an engine behind the fabric's back
        return self._step(t_end)

    def _step(self, t_end: float) -> bool:
        t_next = self.next_time()
        if t_next is None or t_next > t_end:
            return False
        self.now = max(self.now, t_next)
        if self._q and self._q[0].t <= self.now:
            heapq.heappop(self._q).fn()
            return True
        due: set[str] = set()
        timers = self._timers
        while timers and timers[0][0] <= self.now:
            d, _, name = heapq.heappop(timers)
            if self._deadline.get(name, _UNQUEUED) == d:
                due.add(name)
        for name in sorted(due, key=self._order.__getitem__):
            del self._deadline[name]  # popped: pushed again once re-asked
            self.apply(name, self.engines[name].handle_timer(self.now))
        return True

    def run_until(self, t_end: float) -> None:
        self.touch()
        while self._step(t_end):
            pass
        self.now = max(self.now, t_end)
