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
The fabric is composed, not inherited (issue 29): ``sched`` (``sched.py``: the virtual
timeline, O(log n) per event, and the event-log store), ``paths`` (``paths.py``: the wiring,
path verdicts and the socklnd's connections), and for the sim backend ``observers``
(``simfabric.py``: the daemon's notice log, trace and recorders) and ``rules`` (the active
faults, ``netfaults.py``); each part owns its state, the fabric the engines, their drivers,
the path cache and the per-message moves (send, deliver, fail, complete, notify). The
members callers had on the old chain (``now``, ``step``, ``down``, ``connected``...) are the
parts' own, bound here once (no wrapper frame on a call). Unit tests change engines directly (no
``apply``), so ``run_until`` and, unless the fabric is ``tracked`` (``SimFabric``), each
outside ``step`` first re-asks every engine (``touch``). Wiring is incremental
(``add``/``refresh_node``; interfaces indexed by (host, segment)): n nodes come up in O(n).
Failures carry the socklnd's rc and hstatus (``nodes/lnd/errmap.py``).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from errno import ECONNREFUSED
from typing import TYPE_CHECKING, Any

from nodes.driver import NodeDriver
from nodes.lnd import errmap
from nodes.lnd.wire6 import v3_view
from nodes.lnet.actions import MDEvent, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import ENETDOWN, ENETUNREACH
from nodes.lnet.events import MessageReceived, TxCompleted
from nodes.lnet.hdr import MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID, O2IBLND
from testbed.sim.conns import Conns
from testbed.sim.links import Link, Links
from testbed.sim.netfaults import transmit_ruled
from testbed.sim.o2ibsim import O2ibSim
from testbed.sim.paths import UNANSWERED, Paths
from testbed.sim.sched import VIRTUAL_TIME_LIMIT, Scheduler
from testbed.sim.simdriver import FabricDriver, close_recorders, flush_recorders

if TYPE_CHECKING:
    from testbed.sim.netfaults import Rule
    from testbed.sim.simfabric import Observers

__all__ = ["VIRTUAL_TIME_LIMIT", "Fabric"]

_HS_NAME = {h: h.name for h in HStatus}  # (Enum.name is a property: slow per message)
_TYPE_NAME = {t: t.name for t in MsgType}


class Fabric:
    """Engines wired by NID. ``events[name]`` collects each node's MD events in order."""

    start_recording: Callable[..., None]  # (with ``observers``: the sim backend's)

    def __init__(self, latency: float = 0.001, *, seed: int = 0, jitter: float = 0.0,
                 tracked: bool = False, observers: Observers | None = None) -> None:
        self.jitter = jitter
        self.rng = random.Random(seed)
        self.engines: dict[str, LNetEngine] = {}
        self.drivers: dict[str, NodeDriver] = {}
        self.owner: dict[NID, str] = {}
        self._owned: dict[str, set[NID]] = {}  # node -> NIDs it owns in ``owner``
        self.links = links = Links(self.owner, latency)  # the path cache
        self.changed, self.link, self.set_latency = links.changed, links.link, \
            links.set_latency
        #: the timeline (``tracked``: every engine change reaches a driver, flush or refresh)
        self.sched = sched = Scheduler(self.engines, self.drivers, self.deliver,
                                       tracked=tracked)
        self.records = sched.compact_log()  # the event-log store (appended, never rebound)
        self.conns = conns = Conns(self, sched, self.engines)  # the socklnd's connections
        self.paths = paths = Paths(self, sched, conns, self.owner, self.engines)
        links.verdict = paths.path_error
        #: the daemon's notice log, trace, recorders (sim backend; none on a unit fabric)
        self.observers = observers
        if observers is not None:
            self.start_recording = functools.partial(observers.start_recording, self)
        self.close_recorders = functools.partial(close_recorders, self.drivers)
        self.flush_recorders = functools.partial(flush_recorders, self.drivers)
        #: active fault activations (``netfaults.Rule``), set by ``SimFaults``
        self.rules: list[Rule] = []
        # the parts' members, bound once (a call costs no extra frame)
        self.at, self.at_deliver, self.touch = sched.at, sched.at_deliver, sched.touch
        self.step, self.run_until, self.run_guarded = sched.step, sched.run_until, \
            sched.run_guarded
        self.next_time, self.stamp, self.compact_log = sched.next_time, sched.stamp, \
            sched.compact_log
        self.down, self.dead, self.lnd_down = paths.down, paths.dead, paths.lnd_down
        self.segment, self.host = paths.segment, paths.host
        self.path_error, self.reachable, self.established = paths.path_error, \
            paths.reachable, conns.established
        self.hang_up, self.close_routed, self.held = conns.hang_up, paths.close_routed, \
            paths.held
        self.conns_per_peer, self.add_interface = conns.conns_per_peer, paths.add_interface
        self.set_link, self.revive = paths.set_link, paths.revive
        self.fail_at, self.lost = paths.fail_at, paths.lost
        self.notify, self.peer_down = conns.notify, conns.peer_down
        #: keep every MD event per node and every Transmit (tests read them); a long-lived
        #: server turns it off and flushes ``event_log``/``log`` to files instead
        self.keep_history = True
        #: and (with keep_history) ``transmits`` (unit tests'; the sim backend reads none)
        self.keep_transmits = not tracked
        self.events: dict[str, list[MDEvent]] = {}
        self.log: list[tuple[float, str, str]] = []
        self.transmits: list[tuple[float, str, Transmit]] = []
        self.hold = False  # when true, transmissions are queued but never delivered
        self._sending: tuple[Transmit | None, Any] = (None, None)  # send's decision
        #: a test's hand on the wire: given each message sent (after its ``send`` record),
        #: returns the one to carry, or None if it disposed of it (dropped, failed on at)
        self.interpose: Callable[[str, Transmit], Transmit | None] | None = None
        self.o2ib = O2ibSim(self)  # the o2iblnd of nodes with o2ib NIs

    @property
    def now(self) -> float:
        """Virtual time (the scheduler's; a pacer may move it forward)."""
        return self.sched.now

    @now.setter
    def now(self, value: float) -> None:
        self.sched.now = value

    @property
    def event_log(self) -> list[dict[str, Any]]:
        """The event log, every record a dict (``Scheduler.event_log``)."""
        return self.sched.event_log

    @property
    def connected(self) -> set[tuple[str, NID, NID]]:
        """(node, NI, peer NI) socklnd connections (``Conns.connected``)."""
        return self.conns.connected

    @connected.setter
    def connected(self, value: set[tuple[str, NID, NID]]) -> None:
        self.conns.connected = value

    @property
    def passive(self) -> set[tuple[str, NID, NID]]:
        """The accepting ends of connections (``Conns.passive``)."""
        return self.conns.passive

    @property
    def conn_cbs(self) -> dict[tuple[str, NID, NID], int]:
        """When each pair was connected by its own node (``Conns.conn_cbs``)."""
        return self.conns.conn_cbs

    @property
    def latency(self) -> float:
        """Default one-way latency (virtual seconds) of a NID without its own."""
        return self.links.latency

    @latency.setter
    def latency(self, value: float) -> None:
        self.links.latency = value
        self.links.changed()

    def add(self, name: str, engine: LNetEngine) -> LNetEngine:
        self.engines[name] = engine
        self.events[name] = []
        self.sched.added(name)
        drv = self.drivers[name] = FabricDriver(self, name, engine)
        if self.observers is not None:
            self.observers.attach(self, name, drv)
        self.refresh_node(name)
        return engine

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
        self.sched.dirty(name)
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

    def remove(self, name: str) -> None:
        """Take node ``name``'s engine off the fabric (its NIDs owned by nobody: sends to them
        fail); its pending timers are forgotten, its recorder written and closed."""
        drv = self.drivers.get(name)
        for nid in self._owned.pop(name, ()):
            if self.owner.get(nid) == name:
                del self.owner[nid]
        self.engines.pop(name, None)
        self.conns.forget(name)
        self.drivers.pop(name, None)
        self.sched.removed(name)
        self.changed()
        if drv is not None and drv.recorder is not None:
            drv.on_sample_timer()
            drv.recorder.close()

    def record(self, kind: str, node: str, /, **fields: Any) -> None:
        """Append ``{"t", "kind", "node", **fields}`` to ``event_log`` (events.jsonl schema)."""
        self.records.append({"t": self.stamp(), "kind": kind, "node": node, **fields})

    def record_global(self, kind: str, /, **fields: Any) -> None:
        """An event of the testbed, not of one node (faults): ``{"t", "kind", ...}``."""
        self.records.append({"t": self.stamp(), "kind": kind, **fields})

    def flush(self, name: str) -> None:
        """After direct engine calls (a verb's DLC call): node ``name``'s health notices go
        to the event log (notify.py) and its timer is re-armed if its deadline moved."""
        drv = self.drivers.get(name)
        if drv is not None:
            drv.flush_notices()
            drv.rearm()
            drv.sample()

    # ------------------------------------------------------------------ actions
    def apply(self, name: str, actions: list[Any]) -> None:
        """Carry out node ``name``'s engine actions (its driver's ``execute``)."""
        self.drivers[name].execute(actions)

    def call(self, name: str, fn: Callable[..., object], *args: object, **kw: object) -> object:
        """Run an engine API call on node ``name`` now; returns the call's value if any."""
        return self.drivers[name].run(fn, *args, **kw)

    def send(self, name: str, act: Transmit) -> None:
        if self.keep_transmits and self.keep_history:
            self.transmits.append((self.sched.now, name, act))
        links = self.links
        link = links.cache.get((act.ni, act.lpni))  # ``link`` inlined (one frame a message)
        if link is None or link.version != links.version:
            link = links.link(act.ni, act.lpni)
        hdr = act.hdr
        src, dst = hdr.src_nid, hdr.dest_nid
        self.records.append((  # ``record``'s fields, compact (sched.py ``as_event``)
            "send", self.stamp(), name, act.tx_id, _TYPE_NAME[hdr.type], link.ni_text,
            link.lpni_text,
            # (unrouted, the header's NIDs are the pair's own objects: their text is cached)
            link.ni_text if src is act.ni else links.nid_str(src),
            link.lpni_text if dst is act.lpni else links.nid_str(dst), len(act.payload)))
        if self.interpose is not None:
            carried = self.interpose(name, act)
            if carried is None:
                return
            act = carried
        if act.ni.net.lnd == O2IBLND:  # o2iblnd's own connections (o2ibsim.py)
            return self.o2ib.transmit(name, act)
        self._sending = (act, link)  # (``transmit`` need not decide the pair again)
        if self.rules:  # faults active (netfaults.py)
            transmit_ruled(self, name, act)
        else:
            self.transmit(name, act)

    def md_event(self, name: str, ev: MDEvent) -> None:
        if self.keep_history:
            self.events[name].append(ev)
        self.records.append(("md", self.stamp(), name, ev.handle, ev.kind, ev.status,
                             ev.unlinked))

    def fail(self, name: str, act: Transmit, rc: int,
             hstatus: HStatus | None = None) -> None:
        """The tx fails as the socklnd fails it: ``rc`` and, unless given, the hstatus
        ``ksocknal_connect``/``ksocknal_txlist_done`` give that errno (errmap.py)."""
        if name not in self.engines:
            return  # the sender itself is gone (killed)
        key = (name, act.ni, act.lpni)
        conns = self.conns
        if hstatus is None and rc == -ECONNREFUSED and key in conns.reset_pending:
            conns.reset_pending.discard(key)
            rc, hstatus = errmap.FAILURES["conn_closed"]  # reset by the dead peer's kernel
            conns.connected.add(key)  # (so that notify reports it closed)
        self.notify(name, act.ni, act.lpni, False)
        if hstatus is None:
            rc, hstatus = errmap.connect_failure(rc)
        self.complete(name, act.tx_id, rc, hstatus)

    def complete(self, name: str, tx_id: int, rc: int, hstatus: HStatus) -> None:
        engine = self.engines.get(name)
        if engine is None:
            return
        self.records.append(("tx_done", self.stamp(), name, tx_id, rc, _HS_NAME[hstatus]))
        self.apply(name, engine.handle(TxCompleted(tx_id=tx_id, rc=rc, hstatus=hstatus),
                                       self.sched.now))

    def transmit(self, name: str, act: Transmit) -> None:
        sending = self._sending
        link = sending[1] if sending[0] is act else self.link(act.ni, act.lpni)
        delay = link.latency + (self.rng.uniform(0, self.jitter) if self.jitter else 0.0)
        rc = link.rc
        if rc in UNANSWERED:  # nobody answers: known only later (paths.py)
            self.paths.unanswered(name, act, rc, delay)
            return
        now = self.sched.now
        if rc:  # -ENETDOWN fails at once (dead interface), no route after the latency...
            paths = self.paths
            if rc == -ENETUNREACH and self.conns.established(name, act) \
                    and paths.routed_pair(act):
                paths.held(name, act, delay)  # ...but on a conn the host has no route for: held
            else:
                paths.fail_at(now + (0.0 if rc == -ENETDOWN else delay), name, act, rc)
            return
        if not self.hold:  # (held: queued for ever) the pair's decision goes with it
            self.sched.at_deliver(now + delay, name, act, link)

    def deliver(self, name: str, act: Transmit, link: Link | None = None) -> None:
        """``act`` arrives (``link``: the pair's decision made at send time, unless since
        stale), or fails as the path now says."""
        if link is None or link.version != self.links.version:
            link = self.links.link(act.ni, act.lpni)
        paths = self.paths
        if link.rc in UNANSWERED:  # the peer stopped answering in flight (paths.py)
            paths.unanswered(name, act, link.rc, 0.0)
            return
        if link.rc:  # a link went down in flight: the conn closed under the tx
            self.fail(name, act, link.rc)
            return
        if name not in self.engines:
            return  # the sender died with the message on the wire: nobody to complete
        dst = link.dst
        assert dst is not None  # rc 0: owned
        if paths.stalled:  # a write got through: the connection is not stuck
            paths.stalled.discard((name, act.ni, act.lpni))
        conns = self.conns
        if (name, act.ni, act.lpni) not in conns.connected:  # a connection comes up
            conns.reset_pending.discard((name, act.ni, act.lpni))
            conns.notify(name, act.ni, act.lpni, True,
                         conns.incarnation_changed(name, act.lpni, dst))
            if conns.incarnation_changed(dst, act.ni, name):  # the passive side's hello
                conns.notify(dst, act.lpni, act.ni, True, True)
            conns.conn_up(name, act.ni, act.lpni, dst)
        hdr = act.hdr
        if (hdr.src_nid.size or hdr.dest_nid.size) and not act.ni.size:
            hdr = v3_view(hdr)  # an IPv4 hop speaks socklnd V3 (nid4 headers)
        src, final = hdr.src_nid, hdr.dest_nid
        self.records.append(("recv", self.stamp(), dst, _TYPE_NAME[hdr.type],
                             link.lpni_text, link.ni_text,
                             link.ni_text if src is act.ni else self.links.nid_str(src),
                             link.lpni_text if final is act.lpni
                             else self.links.nid_str(final)))
        self.drivers[dst].receive(MessageReceived(ni=act.lpni, peer_nid=act.ni, hdr=hdr,
                                                  payload=act.payload))
        written = paths.written
        if written and act.tx_id in written:  # held: completed when written
            written.discard(act.tx_id)
            return
        self.complete(name, act.tx_id, 0, HStatus.OK)

