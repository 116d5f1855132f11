"""In-memory fabric: N engines, a virtual clock, links that fail (STYLE rule 13).

Theory of operation: each engine's ``Transmit`` becomes a delivery to the engine owning the
destination NID after the link latency (virtual seconds), followed by the sender's
``TxCompleted``; ``step``/``run_until`` jump virtual time to the next delivery or engine
deadline (exact, instant). Latency per NID (the larger of both ends) + optional seeded jitter.
Reachability mimics what the socklnd sees on a Mininet host (spec §3.7, snd-080/085;
``paths.py`` has the verdicts and the Linux behaviour they were measured against):

* link state is per NID (``set_link``); a send *from* a NI whose link is down fails at once
  (-ENETDOWN, REMOTE_DROPPED), as ksocklnd fails txs on an interface without carrier;
* NIDs may be given an L2 segment (``segment``) and a host (``host``, the node owning the
  interface even when no NI is configured on it). Two NIDs on one segment reach each other.
  Across segments the *host* routes: a NI on lan0 sending to a peer NID on lan1 of the same
  LNet net goes out of the host's interface on lan1 (Linux connected route, weak host model);
  with no up interface of the sending host on the destination's segment a connect fails
  (-ENETUNREACH, REMOTE_DROPPED, no route); an established connection's writes are held;
* a destination whose interface is down, or whose host has no up interface on the sender's
  segment (no way back for the SYN-ACK), does not answer: a connect fails when Linux's ARP
  gives up (-EHOSTUNREACH, REMOTE_DROPPED) or at the NI's LND timeout (-ETIMEDOUT,
  LOCAL_TIMEOUT), and a write on an established connection completes and is lost;
* a killed node's NID refuses (-ECONNREFUSED); a NID owned by no engine is unreachable.

Checked at send time and at arrival (a link down in flight fails the tx as
``ksocknal_del_peer`` fails the txs of a closed connection). Like the socklnd, the fabric tells
the sending engine about peer NI aliveness (``PeerNotify``, ``lnet_notify``, seed 002
rtr-mr-lnd-notify): alive on the first delivery over a (NI, peer NI) pair (a "connection"),
dead when a tx over the pair fails (before its completion, so a resend sees it);
``NotifyPeerDown`` "closes" the sender's pairs to that NID (logged as a ``notify_peer_down``
event). Every message, MD event and link change goes to ``event_log`` in the schema of
Mininet's events.jsonl (``send``, ``recv``, ``tx_done``, ``md``, ``link_down``/``link_up``; a
message's kept compact until read, ``sched.py``): the same seed and inputs give the same log,
byte for byte.

Each engine is carried by a ``NodeDriver`` (``nodes/driver.py``, the node daemon's too), a
``FabricDriver`` (``simdriver.py``) that calls this fabric's clock, wire, timer and sinks.
Scheduling, O(log n) per event, is ``sched.py``'s. Unit tests change engines directly (no
``apply``), so ``run_until`` and, unless the fabric is ``tracked`` (``SimFabric``), each
outside ``step`` first re-asks every engine (``touch``). Wiring is incremental
(``add``/``refresh_node``; interfaces indexed by (host, segment)): n nodes come up in O(n).
Failures carry the socklnd's rc and hstatus (``nodes/lnd/errmap.py``).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from errno import ECONNREFUSED
from typing import Any

from nodes.driver import NodeDriver
from nodes.lnd import errmap
from nodes.lnd.wire6 import v3_view
from nodes.lnet.actions import MDEvent, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import ENETDOWN, ENETUNREACH
from nodes.lnet.events import MessageReceived, PeerNotify, TxCompleted
from nodes.lnet.hdr import MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID, O2IBLND
from testbed.sim.links import _Link
from testbed.sim.o2ibsim import O2ibSim
from testbed.sim.paths import UNANSWERED, Paths
from testbed.sim.sched import VIRTUAL_TIME_LIMIT
from testbed.sim.simdriver import FabricDriver
from testbed.sim.watched import _Watched

__all__ = ["VIRTUAL_TIME_LIMIT", "Fabric"]

_HS_NAME = {h: h.name for h in HStatus}  # (Enum.name is a property: slow per message)
_TYPE_NAME = {t: t.name for t in MsgType}


class Fabric(Paths):
    """Engines wired by NID. ``events[name]`` collects each node's MD events in order."""

    def __init__(self, latency: float = 0.001, *, seed: int = 0, jitter: float = 0.0) -> None:
        super().__init__()
        self.version = 0  # bumped by every wiring change: cached _Links are then stale
        self._latency = latency
        self.jitter = jitter
        self.rng = random.Random(seed)
        self.engines: dict[str, LNetEngine] = {}
        self.drivers: dict[str, NodeDriver] = {}
        self.owner: dict[NID, str] = {}
        self._owned: dict[str, set[NID]] = {}  # node -> NIDs it owns in ``owner``
        self.down = _Watched(self.changed)
        #: NIDs of killed nodes: connecting is refused, an established connection is reset
        self.dead = _Watched(self.changed)
        self._seen_inc: dict[tuple[str, NID], int] = {}  # (node, peer NID) -> incarnation
        #: peers' connections to a killed node: reset (not refused) on their next use
        self._reset_pending: set[tuple[str, NID, NID]] = set()
        self._stalled: set[tuple[str, NID, NID]] = set()  # conns whose close is pending
        self._held: dict[tuple[str, NID, NID], list[Transmit]] = {}  # (paths.held)
        self._written: set[int] = set()
        #: keep every MD event per node and every Transmit (tests read them); a long-lived
        #: server turns it off and flushes ``event_log``/``log`` to files instead
        self.keep_history = True
        self.keep_transmits = True  # and (with keep_history) ``transmits`` (unit tests')
        self._links: dict[tuple[NID, NID], _Link] = {}
        self.nid_latency: dict[NID, float] = {}
        self.segment: dict[NID, str] = {}  # L2 segment per NID; unknown NIDs reach everyone
        self.host: dict[NID, str] = {}  # host of each interface NID (default: its owner)
        self._host_seg: dict[tuple[str, str], list[NID]] = {}  # (host, segment) -> its NIDs
        self.events: dict[str, list[MDEvent]] = {}
        self.log: list[tuple[float, str, str]] = []
        self.transmits: list[tuple[float, str, Transmit]] = []
        self.hold = False  # when true, transmissions are queued but never delivered
        self.connected: set[tuple[str, NID, NID]] = set()  # (node, NI, peer NI) "connections"
        #: the same, at the accepting end: a connection carries both ways (``established``)
        self.passive: set[tuple[str, NID, NID]] = set()
        self.conn_cbs: dict[tuple[str, NID, NID], int] = {}  # pairs made by their node: when
        self._nid_text: dict[NID, str] = {}
        self._sending: tuple[Transmit | None, Any] = (None, None)  # _send's decision
        #: a test's hand on the wire: given each message sent (after its ``send`` record),
        #: returns the one to carry, or None if it disposed of it (dropped, failed on _at)
        self.interpose: Callable[[str, Transmit], Transmit | None] | None = None
        self.o2ib = O2ibSim(self)  # the o2iblnd of nodes with o2ib NIs

    @property
    def latency(self) -> float:
        """Default one-way latency (virtual seconds) of a NID without its own."""
        return self._latency

    @latency.setter
    def latency(self, value: float) -> None:
        self._latency = value
        self.changed()

    def add(self, name: str, engine: LNetEngine) -> LNetEngine:
        self.engines[name] = engine
        self.events[name] = []
        self._order.setdefault(name, len(self._order))
        self._deadline.pop(name, None)
        self.drivers[name] = self._driver(name, engine)
        self._dirty.add(name)
        self.refresh_node(name)
        return engine

    def _driver(self, name: str, engine: LNetEngine) -> NodeDriver:
        """The node driver of ``name``: this fabric's clock, wire, timer heap and logs."""
        return FabricDriver(self, name, engine)

    def refresh_node(self, name: str) -> None:
        """Re-read node ``name``'s NIs (after its net add/del): only its NIDs change owner."""
        for nid in self._owned.pop(name, ()):
            if self.owner.get(nid) == name:
                del self.owner[nid]
        eng = self.engines.get(name)
        if eng is None:
            return
        mine = {ni.nid for ni in eng.local_nis()}
        for nid in mine:
            self.owner[nid] = name
        self._owned[name] = mine
        self._dirty.add(name)
        self.changed()

    def refresh(self) -> None:
        """Re-read every engine's NIs (after changes made behind the fabric's back)."""
        self.owner.clear()
        self._owned.clear()
        for name in self.engines:
            self.refresh_node(name)
        self.touch()

    def kill(self, name: str, nids: list[NID]) -> None:
        """Node ``name`` dies (SIGKILL): its NIDs refuse connections and its kernel closes its
        sockets at once (``hang_up``), so later sends are refused (REMOTE_DROPPED), as on
        Mininet."""
        self.remove(name)
        self.dead.update(nids)
        self.hang_up(name, set(nids), True, 2.5)

    def revive(self, name: str, nids: list[NID]) -> None:
        """Node ``name``'s NIDs listen again (a restarted daemon; ``add`` its new engine)."""
        for nid in nids:
            self.dead.discard(nid)

    def remove(self, name: str) -> None:
        """Take node ``name``'s engine off the fabric (its NIDs owned by nobody: sends to them
        fail); its pending timers are forgotten."""
        for nid in self._owned.pop(name, ()):
            if self.owner.get(nid) == name:
                del self.owner[nid]
        self.engines.pop(name, None)
        self.conn_cbs = {k: v for k, v in self.conn_cbs.items() if k[0] != name}
        self.drivers.pop(name, None)
        self._deadline.pop(name, None)
        self._dirty.discard(name)
        self.changed()

    def add_interface(self, nid: NID, segment: str, host: str) -> None:
        """Interface ``nid`` of ``host`` is on L2 ``segment`` (whether or not a NI is on it)."""
        self.segment[nid] = segment
        self.host[nid] = host
        self._host_seg.setdefault((host, segment), []).append(nid)
        self.changed()

    def set_link(self, nid: NID, up: bool, iface: str | None = None,
                 by: str | None = None) -> None:
        """Link state of the interface carrying ``nid`` (a ``link_up``/``link_down`` event,
        as the Mininet supervisor logs it)."""
        (self.down.discard if up else self.down.add)(nid)
        if not up and self.passive:  # its socklnd closes the NI's connections
            self.passive = {c for c in self.passive if c[1] != nid}
        node = self.host.get(nid) or self.owner.get(nid, "?")
        extra: dict[str, str] = {"iface": iface} if iface is not None else {}
        if by is not None:
            extra["by"] = by
        self.record(f"link_{'up' if up else 'down'}", node, nid=str(nid), **extra)

    def set_latency(self, nid: NID, latency: float) -> None:
        self.nid_latency[nid] = latency
        self.changed()

    def changed(self) -> None:
        """The wiring changed (links, owners, latencies, faults): re-decide every path."""
        self.version += 1

    def link(self, ni: NID, lpni: NID) -> _Link:
        """The cached decision for sends from ``ni`` to ``lpni`` (made again once stale)."""
        key = (ni, lpni)
        link = self._links.get(key)
        if link is None or link.version != self.version:
            rc = self.path_error(ni, lpni)
            base = max(self.nid_latency.get(ni, self.latency),
                       self.nid_latency.get(lpni, self.latency))
            link = self._links[key] = _Link(self.version, rc, self.owner.get(lpni), base,
                                            self._nid_str(ni), self._nid_str(lpni))
        return link

    def record(self, kind: str, node: str, /, **fields: Any) -> None:
        """Append ``{"t", "kind", "node", **fields}`` to ``event_log`` (events.jsonl schema)."""
        self._records.append({"t": self.stamp(), "kind": kind, "node": node, **fields})

    def _nid_str(self, nid: NID) -> str:
        """``str(nid)``, cached: formatting NIDs was a seventh of the time per message."""
        text = self._nid_text.get(nid)
        if text is None:
            text = self._nid_text[nid] = str(nid)
        return text

    # ------------------------------------------------------------------ actions
    def apply(self, name: str, actions: list[Any]) -> None:
        """Carry out node ``name``'s engine actions (its driver's ``execute``)."""
        self.drivers[name].execute(actions)

    def call(self, name: str, fn: Callable[..., object], *args: object, **kw: object) -> object:
        """Run an engine API call on node ``name`` now; returns the call's value if any."""
        return self.drivers[name].run(fn, *args, **kw)

    def _send(self, name: str, act: Transmit) -> None:
        if self.keep_transmits and self.keep_history:
            self.transmits.append((self.now, name, act))
        link = self._links.get((act.ni, act.lpni))  # ``link`` inlined (one frame a message)
        if link is None or link.version != self.version:
            link = self.link(act.ni, act.lpni)
        hdr = act.hdr
        src, dst = hdr.src_nid, hdr.dest_nid
        self._records.append((  # ``record``'s fields, compact (sched.py ``as_event``)
            "send", self.stamp(), name, act.tx_id, _TYPE_NAME[hdr.type], link.ni_text,
            link.lpni_text,
            # (unrouted, the header's NIDs are the pair's own objects: their text is cached)
            link.ni_text if src is act.ni else self._nid_str(src),
            link.lpni_text if dst is act.lpni else self._nid_str(dst), len(act.payload)))
        if self.interpose is not None:
            carried = self.interpose(name, act)
            if carried is None:
                return
            act = carried
        if act.ni.net.lnd == O2IBLND:  # o2iblnd's own connections (o2ibsim.py)
            return self.o2ib.transmit(name, act)
        self._sending = (act, link)  # (``_transmit`` need not decide the pair again)
        self._transmit(name, act)

    def _md(self, name: str, ev: MDEvent) -> None:
        if self.keep_history:
            self.events[name].append(ev)
        self._records.append(("md", self.stamp(), name, ev.handle, ev.kind, ev.status,
                              ev.unlinked))

    def _peer_down(self, name: str, lpni: NID) -> None:
        """``lnd_notify_peer_down``: the sender's conns to that NID are closed."""
        self.record("notify_peer_down", name, lpni=str(lpni))
        self.log.append((self.now, name, f"socklnd: LNet notified peer NI {lpni} dead"))
        self.connected = {c for c in self.connected if not (c[0] == name and c[2] == lpni)}
        self.passive = {c for c in self.passive if not (c[0] == name and c[2] == lpni)}

    def _notify(self, name: str, ni: NID, lpni: NID, alive: bool, reset: bool = False) -> None:
        """The LND's ``lnet_notify`` on a "connection" change of (ni, lpni); ``reset``: the
        peer's incarnation changed since the last connection (it was restarted)."""
        key = (name, ni, lpni)
        if alive == (key in self.connected) and alive:
            return
        (self.connected.add if alive else self.connected.discard)(key)
        if not alive:
            self.passive.discard(key)
        extra = {"reset": True} if reset else {}
        self.record("peer_notify", name, ni=str(ni), lpni=str(lpni), alive=alive, **extra)
        self.apply(name, self.engines[name].handle(
            PeerNotify(ni=ni, nid=lpni, alive=alive, reset=reset), self.now))

    def _incarnation_changed(self, name: str, peer: NID, peer_node: str) -> bool:
        """Has ``peer``'s node a new incarnation since ``name`` last connected to it? (the
        socklnd's hello carries it; a changed one resets the peer NI's health history)"""
        inc = self.engines[peer_node].incarnation
        last = self._seen_inc.get((name, peer))
        self._seen_inc[(name, peer)] = inc
        return last is not None and last != inc

    def _fail(self, name: str, act: Transmit, rc: int,
              hstatus: HStatus | None = None) -> None:
        """The tx fails as the socklnd fails it: ``rc`` and, unless given, the hstatus
        ``ksocknal_connect``/``ksocknal_txlist_done`` give that errno (errmap.py)."""
        if name not in self.engines:
            return  # the sender itself is gone (killed)
        key = (name, act.ni, act.lpni)
        if hstatus is None and rc == -ECONNREFUSED and key in self._reset_pending:
            self._reset_pending.discard(key)
            rc, hstatus = errmap.FAILURES["conn_closed"]  # reset by the dead peer's kernel
            self.connected.add(key)  # (so that _notify reports it closed)
        self._notify(name, act.ni, act.lpni, False)
        if hstatus is None:
            rc, hstatus = errmap.connect_failure(rc)
        self._complete(name, act.tx_id, rc, hstatus)

    def _complete(self, name: str, tx_id: int, rc: int, hstatus: HStatus) -> None:
        engine = self.engines.get(name)
        if engine is None:
            return
        self._records.append(("tx_done", self.stamp(), name, tx_id, rc, _HS_NAME[hstatus]))
        self.apply(name, engine.handle(TxCompleted(tx_id=tx_id, rc=rc, hstatus=hstatus),
                                       self.now))

    def _transmit(self, name: str, act: Transmit) -> None:
        sending = self._sending
        link = sending[1] if sending[0] is act else self.link(act.ni, act.lpni)
        delay = link.latency + (self.rng.uniform(0, self.jitter) if self.jitter else 0.0)
        rc = link.rc
        if rc in UNANSWERED:  # nobody answers: known only later (paths.py)
            self._unanswered(name, act, rc, delay)
            return
        if rc:  # -ENETDOWN fails at once (dead interface), no route after the latency...
            if rc == -ENETUNREACH and self.established(name, act) and self._routed_pair(act):
                self.held(name, act, delay)  # ...but on a conn the host has no route for: held
            else:
                self._fail_at(self.now + (0.0 if rc == -ENETDOWN else delay), name, act, rc)
            return
        if not self.hold:  # (held: queued for ever) the pair's decision goes with it
            heapq.heappush(self._q, (self.now + delay, next(self._seq), name, act, link))

    def _routed_pair(self, act: Transmit) -> bool:
        """Whether both ends sit on modelled segments, so -ENETUNREACH is the sending host's
        lost route (Linux holds the connection's writes, ``Paths.held``); a fabric without
        segments (the engine-level unit fabrics: no L2, no routing table) uses -ENETUNREACH
        for a peer that is simply gone, and its sends fail as before explore2's fix."""
        segment = self.segment
        return act.ni in segment and act.lpni in segment

    def _deliver(self, name: str, act: Transmit) -> None:
        arrival = self._arrival  # (the heap entry: the pair's decision unless since stale)
        link: _Link | None = arrival[4] if len(arrival) == 5 and arrival[3] is act else None
        if link is None or link.version != self.version:
            link = self.link(act.ni, act.lpni)
        if link.rc in UNANSWERED:  # the peer stopped answering in flight (paths.py)
            self._unanswered(name, act, link.rc, 0.0)
            return
        if link.rc:  # a link went down in flight: the conn closed under the tx
            self._fail(name, act, link.rc)
            return
        if name not in self.engines:
            return  # the sender died with the message on the wire: nobody to complete
        dst = link.dst
        assert dst is not None  # rc 0: owned
        if self._stalled:  # a write got through: the connection is not stuck
            self._stalled.discard((name, act.ni, act.lpni))
        if (name, act.ni, act.lpni) not in self.connected:  # a connection comes up
            self._reset_pending.discard((name, act.ni, act.lpni))
            self._notify(name, act.ni, act.lpni, True,
                         self._incarnation_changed(name, act.lpni, dst))
            if self._incarnation_changed(dst, act.ni, name):  # the passive side's hello
                self._notify(dst, act.lpni, act.ni, True, True)
            self._conn_up(name, act.ni, act.lpni, dst)
        hdr = act.hdr
        if (hdr.src_nid.size or hdr.dest_nid.size) and not act.ni.size:
            hdr = v3_view(hdr)  # an IPv4 hop speaks socklnd V3 (nid4 headers)
        src, final = hdr.src_nid, hdr.dest_nid
        self._records.append(("recv", self.stamp(), dst, _TYPE_NAME[hdr.type],
                              link.lpni_text, link.ni_text,
                              link.ni_text if src is act.ni else self._nid_str(src),
                              link.lpni_text if final is act.lpni else self._nid_str(final)))
        self.drivers[dst].receive(MessageReceived(ni=act.lpni, peer_nid=act.ni, hdr=hdr,
                                                  payload=act.payload))
        if self._written and act.tx_id in self._written:  # held: completed when written
            self._written.discard(act.tx_id)
            return
        self._complete(name, act.tx_id, 0, HStatus.OK)

