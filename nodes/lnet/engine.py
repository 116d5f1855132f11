"""The LNet engine of one node: a sans-I/O state machine (ARCHITECTURE, STYLE rule 1).

Theory of operation: the driver feeds configuration calls (the DLC API), upper-layer sends
(``put``/``get``/``ping``), LND events (``handle``), link-state changes (``ni_set_fatal``) and
the passing of time (``handle_timer``); every call returns a list of actions (``Transmit``,
``MDEvent``, ``Log``, ``NotifyPeerDown``, ``MsgTrace``). ``next_deadline()`` is the earliest
deadline; ``deadline_changed`` says cheaply whether it may differ from the value last
returned, so a driver re-arms its own timer only then. No sockets, threads, clocks or
unseeded randomness in here.

This module is the facade: it builds the components, wires them and keeps the public surface.
Each concept is an object owning its state (one module each): ``LocalNets`` (``nets.py``),
``PeerTable`` (``peer.py``), ``MDTable`` (``mds.py``), ``Timers`` (``timers.py``),
``Health`` (spec §3.1-3.3), ``Recovery`` (§3.5), ``NIState`` (NI status and link state,
dbg-110), ``Notices`` (``notify.py``), ``Discovery`` (§5), ``Router`` (§6), ``FaultState``
(§8), ``UDSPTable`` (§7), ``Sender`` and ``Receiver`` (the message lifecycle, §1.5, §4), with
the pure selector ``select.py`` (§2) and the injectable ``Decisions`` (``decisions.py``).
Invariant (spec §4.4): every send ends in exactly one final MD event (``unlinked=True``).
"""

from __future__ import annotations

import random

from nodes.lnet.actions import Action, Log
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.decisions import Decisions
from nodes.lnet.discovery import Discovery, DiscoveryQueues
from nodes.lnet.errors import ECANCELED, EEXIST, ENODEV, ETIMEDOUT, LNetConfigError
from nodes.lnet.events import MessageReceived, PeerNotify, TxCompleted
from nodes.lnet.fault import FaultState
from nodes.lnet.hdr import (
    LNET_MTU,
    LNET_PID_LUSTRE,
    LNET_PING_INFO_MIN_SIZE,
    LNET_PROTO_PING_MATCHBITS,
    LNET_RESERVED_PORTAL,
    LNetHdr,
    MsgType,
    WireHandle,
)
from nodes.lnet.health import Health
from nodes.lnet.mds import MDTable, id_source
from nodes.lnet.msg import MD, ME, MDOwner, Msg, OwnerRole
from nodes.lnet.nets import LocalNets
from nodes.lnet.ni import LNET_NI_STATUS_DOWN, LNET_NI_STATUS_UP, LNetNet, LNetNI
from nodes.lnet.nid import LO_NID, NID, Net
from nodes.lnet.nistate import NIState
from nodes.lnet.node import NodeState
from nodes.lnet.notify import Notices
from nodes.lnet.peer import PeerNI, PeerTable
from nodes.lnet.ping import (
    LNET_PING_FEAT_BASE,
    LNET_PING_FEAT_DISCOVERY,
    LNET_PING_FEAT_MULTI_RAIL,
    LNET_PING_FEAT_NI_STATUS,
    LNET_PING_FEAT_RTE_DISABLED,
    PingInfo,
)
from nodes.lnet.receive import Receiver
from nodes.lnet.recovery import Recovery
from nodes.lnet.router import ROUTER_PARAMS, Router
from nodes.lnet.send import Sender
from nodes.lnet.timers import Timers
from nodes.lnet.trace import Tracer
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE, Tunables
from nodes.lnet.udsp import UDSPTable
from nodes.lnet.views import render


class LNetEngine:
    """One node's LNet. ``rng`` is injected so the same seed gives the same decisions;
    ``decisions`` replaces single decisions in tests (``decisions.py``)."""

    def __init__(self, *, rng: random.Random | None = None, pid: int = LNET_PID_LUSTRE,
                 incarnation: int = 1, decisions: Decisions | None = None) -> None:
        self.rng = rng or random.Random(0)
        self.node = NodeState(pid=pid, incarnation=incarnation)
        self.tunables = Tunables()
        self.counters = GlobalCounters()
        self.timers = Timers()
        self.ids = id_source()
        self.tracer = Tracer()
        dec = decisions or Decisions()
        self.peers = PeerTable()
        self.notices = Notices()
        self.nistate = NIState(lambda: self.local.local_nis(), self.timers, self.notices)
        self.local = LocalNets(self.nistate, self._ping_changed)
        self.notices.local_nis = self.local.local_nis
        self.notices.find_lpni = self.peers.find_lpni
        self.udsp = UDSPTable(self.local, self.peers)
        self.mds = MDTable(self.ids, self.timers, self.counters, incarnation)
        self.faults = FaultState(self.rng, self.timers)  # lctl net_drop_add (spec §8)
        self.health = Health(self.tunables, self.counters, self.notices, self.nistate, dec)
        self.recovery = Recovery(self.tunables, self.timers, self.health, self.nistate)
        self.router = Router(node=self.node, tunables=self.tunables, peers=self.peers,
                             local=self.local, counters=self.counters, notices=self.notices,
                             nistate=self.nistate, health=self.health, rng=self.rng,
                             ids=self.ids)
        self.discovery = Discovery(self.node, self.tunables, self.peers, self.local, self.mds,
                                   self.recovery, self.timers)
        self.sender = Sender(node=self.node, tunables=self.tunables, counters=self.counters,
                             local=self.local, peers=self.peers, mds=self.mds,
                             health=self.health, nistate=self.nistate, router=self.router,
                             discovery=self.discovery, faults=self.faults, decisions=dec,
                             tracer=self.tracer, ids=self.ids)
        self.receiver = Receiver(node=self.node, counters=self.counters, local=self.local,
                                 peers=self.peers, mds=self.mds, health=self.health,
                                 router=self.router, discovery=self.discovery,
                                 faults=self.faults, sender=self.sender,
                                 ping_buffer=lambda: self.ping_info().pack())
        self._wire()

    def _wire(self) -> None:
        """Collaborators built after the components that call them."""
        h, r, d = self.health, self.router, self.discovery
        h.recovery = self.recovery
        h.local_count = lambda: len(self.local.local_nis())
        h.is_local = lambda nid: nid in self.local.by_nid
        h.lpni_fell = r.health_fell
        rec = self.recovery
        rec.ping, rec.unlink, rec.peers = self.recovery_ping, self.unlink, self.peers
        rec.md_by_handle, rec.ni_by_nid = self.mds.get, self.local.ni_by_nid
        r.sender_ref, r.discovery_ref = self.sender, d
        r.get, r.ping_changed = self.get, self._ping_changed
        d.sender, d.router_ref = self.sender, r
        d.get, d.put = self.get, self.put
        d.ping_buffer = lambda: self.ping_info().pack()
        self.sender.receiver = self.receiver
        self.mds.register(OwnerRole.LPNI_RECOVERY, rec.on_md_event)
        self.mds.register(OwnerRole.DC_PING, d.on_md_event)
        self.mds.register(OwnerRole.DC_PUSH, d.on_md_event)
        self.mds.register(OwnerRole.RTR_QUERY, lambda md, kind, st, payload, src: [])
        self.peers.on_new_lpn = self.udsp.on_lpn
        self.peers.on_new_lpni = self.udsp.on_lpni

    # ------------------------------------------------------------------ node attributes
    @property
    def pid(self) -> int:
        return self.node.pid

    @property
    def incarnation(self) -> int:
        return self.node.incarnation

    @property
    def configured(self) -> bool:
        return self.node.configured

    @property
    def multi_rail(self) -> bool:
        """False: a "downrev" non-MR node (seed 000 bck-*, discovery.py)."""
        return self.node.multi_rail

    @multi_rail.setter
    def multi_rail(self, value: bool) -> None:
        self.node.multi_rail = value

    @property
    def ping_seq(self) -> int:
        return self.node.ping_seq

    @property
    def nets(self) -> dict[Net, LNetNet]:
        return self.local.nets

    @property
    def trace_messages(self) -> bool:
        """Emit ``MsgTrace`` actions (TRACE-SCHEMA); off by default, set by the driver."""
        return self.tracer.on

    @trace_messages.setter
    def trace_messages(self, value: bool) -> None:
        self.tracer.on = value

    # the names the unit tests and older callers read
    @property
    def dc(self) -> DiscoveryQueues:
        return self.discovery.queues

    @property
    def ni_recoveryq(self) -> list[LNetNI]:
        return self.recovery.ni_queue

    @property
    def lpni_recoveryq(self) -> list[PeerNI]:
        return self.recovery.lpni_queue

    @property
    def mt_last(self) -> float:
        return self.recovery.mt_last

    @property
    def _mes(self) -> list[ME]:
        return self.mds.mes

    # ------------------------------------------------------------------ DLC: configuration
    def configure(self) -> None:
        """``lnetctl lnet configure``: bring LNet up with its loopback NI ``0@lo``."""
        if self.node.configured:
            return
        self.local.configure()
        self.node.configured = True
        if self.tunables.forwarding:  # module param forwarding=enabled: a router at once
            self.router.on_tunable("forwarding", 1, None)

    def unconfigure(self) -> list[NID]:
        """``lnetctl lnet unconfigure``: returns the NIDs the LND must shut down."""
        nis = list(self.local.local_nis())
        self.local.clear()
        for ni in nis:
            self.nistate.removed(ni)
        self.peers.clear()
        self.udsp.rules.clear()  # lnet_udsp_destroy(shutdown) on LNetNIFini
        self.recovery.clear()
        self.router.clear()
        self.discovery.clear()
        self.node.configured = False
        return [ni.nid for ni in nis]

    def _require_up(self) -> None:
        if not self.node.configured:
            raise LNetConfigError(-ENODEV, "LNet is not configured")  # lnetctl: No such device

    def net_add(self, net: Net, interface: str, nid: NID, *, peer_credits: int | None = None,
                credits: int | None = None, peer_timeout: int | None = None,
                cpts: tuple[int, ...] = (0,), numa: int | None = None) -> LNetNI:
        """``lnetctl net add --net N --if IF``: one NI per interface (cfg-020, cfg-040).

        ``numa`` is the emulated NUMA node of the interface's device (``dev cpt``, snd-010;
        testbed extension ``--numa``); None leaves it unbound (-1). Logged (dbg-110) at the
        next tick (``nistate.py``).
        """
        self._require_up()
        return self.local.add(net, interface, nid, peer_credits=peer_credits, credits=credits,
                              peer_timeout=peer_timeout, cpts=cpts, numa=numa,
                              multi_rail=self.node.multi_rail, udsp=self.udsp,
                              peers=self.peers)

    def net_del(self, net: Net, interface: str | None = None) -> list[NID]:
        """``lnetctl net del --net N [--if IF]``: returns the NIDs removed (logged, dbg-110)."""
        self._require_up()
        return self.local.delete(net, interface, self.recovery)

    def peer_add(self, prim: NID, nids: list[NID], *, non_mr: bool = False,
                 lock_prim: bool = False) -> None:
        """``lnetctl peer add --prim_nid P --nid LIST`` (cfg-070, cfg-075, cfg-080)."""
        self._require_up()
        for nid in [prim, *nids]:
            if nid in self.local.by_nid and nid != LO_NID:
                raise LNetConfigError(-EEXIST, f"{nid} is a local NID")
        credits = {n: ln.tunables.peer_credits for n, ln in self.local.nets.items()}
        self.peers.user_add(prim, nids, non_mr, lock_prim, credits)

    def peer_del(self, prim: NID, nids: list[NID], *, force: bool = False) -> None:
        self._require_up()
        self.peers.user_del(prim, nids, force)
        self.recovery.forget_deleted_peers()

    def set_tunable(self, name: str, value: int, now: float | None = None) -> list[Action]:
        old = getattr(self.tunables, name, None)
        self.tunables.set(name, value)
        if name == "discovery":  # disabling force-pushes to MR peers (discovery.py, §5.4)
            self.discovery.set_discovery(int(old or 0), value)
        if name in ROUTER_PARAMS:  # routing state and buffer pools (router.py, spec §6.2)
            return self.router.on_tunable(name, value, now) + self.tracer.take()
        return []

    def _ping_changed(self) -> None:
        """A local NI was added or removed: the ping buffer is rebuilt with seq+1 and MR
        peers are pushed the new one (spec §5.1, dyn-045)."""
        self.node.ping_seq += 1
        self.discovery.local_ni_changed()

    # ------------------------------------------------------------------ health controls
    def ni_set_fatal(self, nid: NID, fatal: bool, now: float,
                     cause: str = "carrier") -> list[Action]:
        """``lnet_set_link_fatal_state``: the LND saw the device's link go down/up (hlt lnd-010).

        Each change counts as a local interface down/up event (hlth-stt-ni-down/up-events)
        and raises an ``ni_link`` notice; ``cause`` is ``carrier`` (link watcher) or
        ``simulated`` (the ``lctl net_ni_down|up`` hook, hlth-dbg-sim-ni-down/up).

        A fatal NI loses to every non-fatal NI in selection (spec §2.4 criterion 1) and shows
        ``status: down`` / ``fatal_error: 1``. Clearing it makes the NI selectable again; its
        status returns to ``up`` when its health is 1000 (config.c), otherwise it is (re)queued
        for local recovery, whose pings now succeed and raise it (spec §3.5).
        """
        ni = self.local.ni_by_nid(nid)
        if ni is None or ni.is_lo:
            return [Log(level="warning", text=f"link state change for unknown NI {nid}")]
        if not self.nistate.set_fatal(ni, fatal):
            return []
        self.notices.emit("ni_link", nid=str(nid), link="down" if fatal else "up", cause=cause)
        # the NI's status is updated in place in the ping buffer: no rebuild, no push (§5.1)
        if not fatal:
            if ni.healthv == LNET_MAX_HEALTH_VALUE:
                self.nistate.set_status(ni, LNET_NI_STATUS_UP)
            else:
                self.recovery.ni_enqueue(ni, now, manual=True)
        word = "down" if fatal else "up"
        return [Log(level="error", text=f"local NI {nid} link {word}: fatal state "
                                        f"{'set' if fatal else 'cleared'}"),
                *self.nistate.log_status(ni, f"link {word}")]

    def net_set_health(self, nid: NID | None, value: int, now: float) -> None:
        """``lnetctl net set --nid X|--all --health V`` (spec §3.6; out of range -> 1000). A
        status change is logged at the next tick, which the NI state log makes due at once."""
        if not 0 <= value <= LNET_MAX_HEALTH_VALUE:
            value = LNET_MAX_HEALTH_VALUE
        for ni in self.local.local_nis():
            if nid is None or ni.nid == nid:
                self.health.manual_ni(ni, value)
                self.recovery.ni_enqueue(ni, now, manual=True)

    def peer_set_health(self, nid: NID | None, value: int, now: float) -> None:
        """``lnetctl peer set --nid X|--all --health V`` (spec §3.6; subject to §3.5 rules)."""
        if not 0 <= value <= LNET_MAX_HEALTH_VALUE:
            value = LNET_MAX_HEALTH_VALUE
        for lpni in list(self.peers.by_nid.values()):
            if nid is None or lpni.nid == nid:
                self.health.manual_lpni(lpni, value)
                self.recovery.lpni_enqueue(lpni, now)

    def stats_reset(self) -> None:
        """``lnetctl stats reset`` (spec §4.5): global counters incl. gauges, per-NI and
        per-peer-NI send/recv/drop and latency stats; health counters are kept. The testbed
        statistics (link events, send/transaction times, counters.py) are reset too."""
        self.counters.reset()
        for ni in self.local.local_nis(True):
            ni.stats.reset()
            ni.link_events.reset()
        for lpni in self.peers.by_nid.values():
            lpni.stats.reset()

    # ------------------------------------------------------------------ queries
    def local_nis(self, include_lo: bool = False) -> list[LNetNI]:
        return list(self.local.local_nis(include_lo))

    def ni_by_nid(self, nid: NID) -> LNetNI | None:
        return self.local.ni_by_nid(nid)

    def md_by_handle(self, handle: int) -> MD | None:
        return self.mds.get(handle)

    def ping_info(self) -> PingInfo:
        features = LNET_PING_FEAT_BASE | LNET_PING_FEAT_NI_STATUS
        if self.node.multi_rail:  # a downrev node has neither bit (bck-025, discovery.py)
            features |= LNET_PING_FEAT_MULTI_RAIL
            if self.tunables.discovery:
                features |= LNET_PING_FEAT_DISCOVERY
        if self.router.rte_disabled():  # STARTING/STOPPING keep it (spec §6.2)
            features |= LNET_PING_FEAT_RTE_DISABLED
        # NI status per entry: a fatal NI is DOWN, otherwise its status (spec §1.2, §5.1)
        nis = tuple((ni.nid, LNET_NI_STATUS_DOWN if ni.fatal_error else ni.status)
                    for ni in self.local.local_nis())
        return PingInfo(features, self.node.pid, self.node.ping_seq, nis)

    def view(self, what: str, **kw: object) -> dict[str, object]:
        """YAML-ready dicts for lnetctl (``views.py``)."""
        return render(self, what, **kw)

    # ------------------------------------------------------------------ upper layer API
    def attach_me(self, portal: int, match_bits: int, ignore_bits: int, *,
                  data: bytes = b"", sink: bool = True, events: bool = False) -> int:
        """Post a match entry (a test service); returns the MD handle."""
        return self.mds.attach(portal, match_bits, ignore_bits, data=data, sink=sink,
                               events=events).handle

    def put(self, now: float, dst: NID, *, payload: bytes, portal: int, match_bits: int = 0,
            ack: bool = True, src: NID | None = None, timeout: float | None = None,
            hdr_data: int = 0, numa: int | None = None,
            owner: MDOwner | None = None) -> tuple[int, list[Action]]:
        """``LNetPut``: returns the MD handle; events arrive as ``MDEvent`` actions.

        ``timeout`` is the caller's own transaction timeout (003); ``numa`` the NUMA node of
        the payload memory (snd-020).
        """
        md = self.mds.bind(now, threshold=2 if ack else 1, timeout=timeout, op=MsgType.PUT,
                           owner=owner)
        wmd = WireHandle(self.node.incarnation, md.handle) if ack else WireHandle()
        hdr = LNetHdr(dest_nid=dst, src_nid=LO_NID, dest_pid=LNET_PID_LUSTRE,
                      src_pid=self.node.pid, type=MsgType.PUT, payload_length=len(payload),
                      wmd=wmd, match_bits=match_bits, hdr_data=hdr_data, ptl_index=portal)
        msg = Msg(next(self.ids), MsgType.PUT, hdr, payload, md=md, final_dst=dst, md_cpt=numa)
        md.msg = msg
        # discovery pushes are always tracked (lnet_response_tracking 0 still tracks, §4.3)
        actions = self.sender.launch(msg, now, src, track=ack, force_track=owner is not None)
        return md.handle, actions + self.tracer.take() if self.tracer.on else actions

    def get(self, now: float, dst: NID, *, length: int, portal: int, match_bits: int = 0,
            src: NID | None = None, timeout: float | None = None, recovery: bool = False,
            numa: int | None = None,
            owner: MDOwner | None = None) -> tuple[int, list[Action]]:
        """``LNetGet``: the REPLY's payload comes back in the REPLY ``MDEvent``."""
        md = self.mds.bind(now, threshold=2, timeout=timeout, op=MsgType.GET, owner=owner)
        hdr = LNetHdr(dest_nid=dst, src_nid=LO_NID, dest_pid=LNET_PID_LUSTRE,
                      src_pid=self.node.pid, type=MsgType.GET, payload_length=0,
                      wmd=WireHandle(self.node.incarnation, md.handle), match_bits=match_bits,
                      ptl_index=portal, sink_length=length)
        msg = Msg(next(self.ids), MsgType.GET, hdr, b"", md=md, final_dst=dst,
                  recovery=recovery, md_cpt=numa)
        md.msg = msg
        force = portal == LNET_RESERVED_PORTAL and match_bits == LNET_PROTO_PING_MATCHBITS
        actions = self.sender.launch(msg, now, src, track=True,
                                     force_track=force and owner is not None)
        return md.handle, actions + self.tracer.take() if self.tracer.on else actions

    def ping(self, now: float, dst: NID, *, timeout: float | None = None,
             src: NID | None = None, numa: int | None = None) -> tuple[int, list[Action]]:
        """``lnet_ping``: a GET of the ping buffer on the reserved portal (spec §4.1)."""
        length = max(LNET_PING_INFO_MIN_SIZE, 16 + 16 * (self.tunables.max_interfaces + 1))
        return self.get(now, dst, length=min(length, LNET_MTU), portal=LNET_RESERVED_PORTAL,
                        match_bits=LNET_PROTO_PING_MATCHBITS, src=src, timeout=timeout,
                        numa=numa)

    def recovery_ping(self, now: float, dst: NID,
                      owner: MDOwner) -> tuple[int, list[Action]]:
        """``lnet_send_ping(recovery=true)``: 272-byte GET, tracked, NMR, never resent."""
        return self.get(now, dst, length=LNET_PING_INFO_MIN_SIZE, portal=LNET_RESERVED_PORTAL,
                        match_bits=LNET_PROTO_PING_MATCHBITS, recovery=True, owner=owner)

    def discover(self, nid: NID, now: float, *, force: bool = False) -> tuple[int, list[Action]]:
        """``lnetctl discover [--force] NID`` (``Discovery.discover``, spec §5.3)."""
        handle, actions = self.discovery.discover(nid, now, force=force)
        return handle, actions + self.tracer.take()

    def unlink(self, now: float, handle: int) -> list[Action]:
        """``LNetMDUnlink``: the MD's owner gives up; it gets a final UNLINK event."""
        md = self.mds.get(handle)
        if md is None or md.unlinked:
            return []
        return self.mds.final(md, "UNLINK", -ETIMEDOUT if md.user_deadline else -ECANCELED)

    # ------------------------------------------------------------------ LND events
    def handle(self, event: TxCompleted | MessageReceived | PeerNotify,
               now: float) -> list[Action]:
        """An LND event. Local NI state changes (dbg-110) from before it are logged first,
        those it caused last (``nistate.py``)."""
        nistate = self.nistate
        actions = nistate.status_logs() if nistate.pending else []
        if isinstance(event, TxCompleted):
            actions += self.sender.tx_completed(event, now)
        elif isinstance(event, MessageReceived):
            actions += self.receiver.parse(event, now)
        else:  # lnet_notify from the LND (seed 002, rtralive.py)
            actions += self.router.alive.notify(event, now)
        if nistate.pending:
            actions += nistate.status_logs()
        return actions + self.tracer.take() if self.tracer.on else actions

    # ------------------------------------------------------------------ time
    def next_deadline(self) -> float | None:
        """Earliest of every component's timer (``timers.py``): MD deadlines, delayed
        messages (spec §8.3), the monitor tick (§3.5), deferred discovery (§5.2), a local NI
        state change to log (dbg-110), and, while routing is in use, the router checker."""
        first = self.timers.next_deadline()
        if not self.router.active:
            return first
        rtr = self.router.deadline()
        return rtr if first is None or (rtr is not None and rtr < first) else first

    @property
    def deadline_changed(self) -> bool:
        """Whether ``next_deadline()`` may now differ from what it last returned (a driver
        that armed its timer at that value need not ask again while this is false)."""
        return self.timers.changed or self.router.active

    def handle_timer(self, now: float) -> list[Action]:
        """Delayed messages, response trackers (spec §3.4), caller timeouts, monitor tick."""
        actions = self.nistate.status_logs()  # changes by config calls, with their cause
        for item in self.faults.release(now):  # delayed messages due (spec §8.3)
            if isinstance(item, Msg):
                actions += self.sender.post(item, now, released=True)
            else:
                actions += self.receiver.parse(item, now, released=True)
        for md, response in self.mds.expired(now):
            if md.unlinked:
                continue  # unlinked by the expiry handled before it
            if response:  # lnet_finalize_expired_responses: the next hop is blamed (§3.4)
                actions += self.health.response_timeout(md.rsp_next_hop, now)
                msg = md.msg
                if self.tracer.on and msg is not None and not msg.traced:
                    self.tracer.complete(msg, -ETIMEDOUT, "RESPONSE_TIMEOUT")
            actions += self.mds.final(md, "UNLINK", -ETIMEDOUT)
        due = self.recovery.deadline()
        if due is not None and due <= now:
            actions += self.recovery.tick(now)
        due = self.router.deadline()
        if due is not None and due <= now:
            actions += self.router.tick(now)  # router checker (spec §6.4)
        if self.discovery.queues.request and self.discovery.queues.wake <= now:
            actions += self.discovery.tick(now)  # deferred discovery work (spec §5.2)
        actions += self.nistate.status_logs()  # NI state changes not logged yet (dbg-110)
        return actions + self.tracer.take() if self.tracer.on else actions

