"""The LNet engine of one node: a sans-I/O state machine (ARCHITECTURE, STYLE rule 1).

Theory of operation: the driver feeds configuration calls (the DLC API), upper-layer sends
(``put``/``get``/``ping``), LND events (``handle``), link-state changes (``ni_set_fatal``) and
the passing of time (``handle_timer``); every call returns a list of actions (``Transmit``,
``MDEvent``, ``Log``, ``NotifyPeerDown``, ``MsgTrace``). ``next_deadline()`` is the earliest
deadline; ``deadline_changed`` says cheaply whether it may differ from the value last
returned (re-arm only then). No sockets, threads, clocks or unseeded randomness in here.

This module is the facade: it builds the components, wires them, keeps the public surface.
Each concept is an object owning its state, one module each: ``LocalNets``, ``PeerTable``,
``MDTable``, ``Timers``, ``Health`` (§3.1-3.3), ``Recovery`` (§3.5), ``NIState`` (dbg-110),
``Notices``, ``Discovery`` (§5), ``Router`` (§6), ``FaultState`` (§8), ``UDSPTable`` (§7),
``Requests``, ``Sender`` and ``Receiver`` (the lifecycle, §1.5, §4); the selector
``select.py`` (§2) is pure and the ``Decisions`` (``decisions.py``) are injectable.
Invariant (spec §4.4): every send ends in exactly one final MD event (``unlinked=True``).
"""

from __future__ import annotations

import random

from nodes.lnet.actions import Action, Log
from nodes.lnet.config_api import ConfigAPI
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.decisions import Decisions
from nodes.lnet.discovery import Discovery
from nodes.lnet.errors import ECANCELED, ETIMEDOUT
from nodes.lnet.events import MessageReceived, PeerNotify, TxCompleted
from nodes.lnet.failloc import (
    CFS_FAIL_DELAY_MSG_FORWARD,
    CFS_FAIL_RTR_HEALTH_INC,
    CFS_FAIL_SOCK_CONN,
    CFS_FAIL_TEST_PING_MD,
    FailLoc,
)
from nodes.lnet.fault import FaultState
from nodes.lnet.hdr import (
    LNET_MTU,
    LNET_PID_LUSTRE,
    LNET_PING_INFO_MIN_SIZE,
    LNET_PROTO_PING_MATCHBITS,
    LNET_RESERVED_PORTAL,
)
from nodes.lnet.health import Health
from nodes.lnet.mds import MDTable, id_source
from nodes.lnet.msg import MD, MDOwner, Msg, OwnerRole
from nodes.lnet.nets import LocalNets
from nodes.lnet.ni import LNetNI
from nodes.lnet.nid import NID
from nodes.lnet.nistate import NIState
from nodes.lnet.node import NodeState
from nodes.lnet.notify import Notices
from nodes.lnet.peer import PeerNI, PeerTable
from nodes.lnet.ping import PingInfo, metadata_bytes, metadata_report, node_ping_info
from nodes.lnet.receive import Receiver
from nodes.lnet.recovery import Recovery
from nodes.lnet.requests import Requests
from nodes.lnet.router import Router
from nodes.lnet.send import Sender
from nodes.lnet.timers import Timers
from nodes.lnet.trace import Tracer
from nodes.lnet.tunables import ModuleStrings, Tunables
from nodes.lnet.udsp import UDSPTable
from nodes.lnet.views import Views


class LNetEngine(ConfigAPI):
    """One node's LNet. ``rng`` is injected so the same seed gives the same decisions;
    ``decisions`` replaces single decisions in tests (``decisions.py``)."""

    def __init__(self, *, rng: random.Random | None = None, pid: int = LNET_PID_LUSTRE,
                 incarnation: int = 1, decisions: Decisions | None = None) -> None:
        self.rng = rng or random.Random(0)
        self.node = NodeState(pid=pid, incarnation=incarnation)
        self.tunables = Tunables()
        self.module_strings = ModuleStrings()  # networks=, ip2nets=, routes= as given
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
        self.fail = FailLoc(self.rng)  # lctl set_param fail_loc (failloc.py)
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
        self.requests = Requests(self.node, self.tunables, self.counters, self.mds,
                                 self.sender, self.ids)
        self.views = Views(self.local, self.peers, self.counters, self.tunables, self.recovery,
                           self.router)
        self._wire()
        # the same objects under the names older callers and the unit tests read
        self.pid, self.incarnation, self.nets = pid, incarnation, self.local.nets
        self.dc, self._mes = self.discovery.queues, self.mds.mes
        self.ni_recoveryq, self.lpni_recoveryq = self.recovery.ni_queue, self.recovery.lpni_queue

    def _wire(self) -> None:
        """Collaborators built after the components that call them; MD owner roles."""
        h, r, d = self.health, self.router, self.discovery
        h.recovery = self.recovery
        h.local_count = lambda: len(self.local.local_nis())
        h.is_local = lambda nid: nid in self.local.by_nid
        h.lpni_fell = r.health_fell
        h.lpni_live = lambda lpni: self.peers.find_lpni(lpni.nid) is lpni
        rec = self.recovery
        rec.ping, rec.unlink, rec.peers = self.recovery_ping, self.unlink, self.peers
        rec.md_by_handle, rec.ni_by_nid = self.mds.get, self.local.ni_by_nid
        r.sender_ref, r.discovery_ref = self.sender, d
        r.get, r.ping_changed = self.get, self._ping_changed
        d.sender, d.router_ref = self.sender, r
        d.get, d.put = self.get, self.put
        d.ping_buffer = lambda: self.ping_info().pack()
        self.sender.receiver = self.receiver
        fail = self.fail
        h.rtr_health_inc_fails = lambda: fail.check(CFS_FAIL_RTR_HEALTH_INC)
        self.faults.skip_rx_delay = lambda: fail.check(CFS_FAIL_DELAY_MSG_FORWARD)

        def sock_conn(ni: NID, lpni: NID, now: float) -> list[Action]:
            """socklnd_cb.c ``ksocknal_process_transmit``: under fail_loc CFS_FAIL_SOCK_CONN a
            simulated send error also closes the connection and its siblings; the reaper's
            ``ksocknal_peer_failed`` then tells LNet the peer NI is dead (``lnet_notify``),
            after the tx was finalized (its health already counted)."""
            if not fail.check(CFS_FAIL_SOCK_CONN):
                return []
            return self.router.alive.notify(PeerNotify(ni=ni, nid=lpni, alive=False), now)
        self.sender.after_sim_error = sock_conn
        self.mds.register(OwnerRole.LPNI_RECOVERY, rec.on_md_event)
        self.mds.register(OwnerRole.NI_RECOVERY, rec.on_ni_md_event)
        for role in (OwnerRole.DC_PING, OwnerRole.DC_PUSH):
            self.mds.register(role, d.on_md_event)
        self.mds.register(OwnerRole.RTR_QUERY, lambda md, kind, st, payload, src: [])
        self.mds.register(OwnerRole.PING_MD, lambda md, kind, st, payload, src: [
            Log(level="warning", text=line)  # pr_info: on the console
            for line in (metadata_report(payload) if kind == "REPLY" and not st else [])])
        self.peers.on_new_lpn = self.udsp.on_lpn
        self.peers.on_new_lpni = self._new_lpni
        self.local.module_buffer_credits = lambda: self.tunables.peer_buffer_credits

    def _new_lpni(self, lpni: PeerNI) -> None:
        """peer.c ``lnet_peer_ni_alloc``: router buffer credits from
        ``lnet_peer_buffer_credits`` (``nets.buffer_credits``), then UDSP rules (§7.3)."""
        if lpni.max_tx_credits:
            lpni.rtr_credits = lpni.min_rtr_credits = self.local.buffer_credits(lpni.nid.net)
        self.udsp.on_lpni(lpni)

    # ------------------------------------------------------------------ node attributes
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
    def ping_seq(self) -> int:  # the ping buffer's sequence number (spec §5.1)
        return self.node.ping_seq

    @property
    def trace_messages(self) -> bool:
        """Emit ``MsgTrace`` actions (TRACE-SCHEMA); off by default, set by the driver."""
        return self.tracer.on

    @trace_messages.setter
    def trace_messages(self, value: bool) -> None:
        self.tracer.on = value

    @property
    def mt_last(self) -> float:  # the last monitor tick (recovery.py)
        return self.recovery.mt_last

    def _ping_changed(self) -> None:
        """A local NI was added or removed: the ping buffer is rebuilt with seq+1 and MR
        peers are pushed the new one (spec §5.1, dyn-045)."""
        self.node.ping_seq += 1
        self.discovery.local_ni_changed()

    def local_nis(self, include_lo: bool = False) -> list[LNetNI]:
        return list(self.local.local_nis(include_lo))

    def ni_by_nid(self, nid: NID) -> LNetNI | None:
        return self.local.ni_by_nid(nid)

    def md_by_handle(self, handle: int) -> MD | None:
        return self.mds.get(handle)

    def ping_info(self) -> PingInfo:
        """Our ping buffer (``ping.node_ping_info``, spec §5.1)."""
        return node_ping_info(self.node.pid, self.node.ping_seq, self.node.multi_rail,
                              bool(self.tunables.discovery), self.router.rte_disabled(),
                              self.local.local_nis(),
                              test_md=self.fail.check(CFS_FAIL_TEST_PING_MD))

    def view(self, what: str, **kw: object) -> dict[str, object]:  # lnetctl's YAML
        return self.views.render(what, **kw)

    # ------------------------------------------------------------------ upper layer API
    def attach_me(self, portal: int, match_bits: int, ignore_bits: int, *,
                  data: bytes = b"", sink: bool = True, events: bool = False,
                  threshold: int = -1) -> int:
        """Post a match entry; returns the MD handle. ``events``: its PUT/GET ``MDEvent``s;
        ``threshold`` N: unlinked after N matches, -1 never (``LNetMDAttach``)."""
        return self.mds.attach(portal, match_bits, ignore_bits, data=data, sink=sink,
                               events=events, threshold=threshold).handle

    def put(self, now: float, dst: NID, *, payload: bytes, portal: int, match_bits: int = 0,
            ack: bool = True, src: NID | None = None, timeout: float | None = None,
            hdr_data: int = 0, numa: int | None = None,
            owner: MDOwner | None = None) -> tuple[int, list[Action]]:
        """``LNetPut``: returns the MD handle; events arrive as ``MDEvent`` actions.
        ``timeout`` is the caller's own transaction timeout (003); ``numa`` the NUMA node of
        the payload memory (snd-020)."""
        handle, actions = self.requests.put(now, dst, payload=payload, portal=portal,
                                            match_bits=match_bits, ack=ack, src=src,
                                            timeout=timeout, hdr_data=hdr_data, numa=numa,
                                            owner=owner)
        return handle, actions + self.tracer.take() if self.tracer.on else actions

    def get(self, now: float, dst: NID, *, length: int, portal: int, match_bits: int = 0,
            src: NID | None = None, timeout: float | None = None, recovery: bool = False,
            numa: int | None = None,
            owner: MDOwner | None = None) -> tuple[int, list[Action]]:
        """``LNetGet``: the REPLY's payload comes back in the REPLY ``MDEvent``."""
        handle, actions = self.requests.get(now, dst, length=length, portal=portal,
                                            match_bits=match_bits, src=src, timeout=timeout,
                                            recovery=recovery, numa=numa, owner=owner)
        return handle, actions + self.tracer.take() if self.tracer.on else actions

    def ping(self, now: float, dst: NID, *, timeout: float | None = None,
             src: NID | None = None, numa: int | None = None) -> tuple[int, list[Action]]:
        """``lnet_ping``: a GET of the ping buffer on the reserved portal (spec §4.1). Under
        fail_loc CFS_FAIL_TEST_PING_MD the NID metadata is fetched first (api-ni.c
        ``lnet_discover_nid_metadata``: a GET sized for it, its reply dumped on the
        console, E12)."""
        length = max(LNET_PING_INFO_MIN_SIZE, 16 + 16 * (self.tunables.max_interfaces + 1))
        actions: list[Action] = []
        if self.fail.check(CFS_FAIL_TEST_PING_MD):
            md_len = min(length + metadata_bytes(self.tunables.max_interfaces), LNET_MTU)
            _h, actions = self.get(now, dst, length=md_len, portal=LNET_RESERVED_PORTAL,
                                   match_bits=LNET_PROTO_PING_MATCHBITS, src=src,
                                   owner=MDOwner(OwnerRole.PING_MD, dst))
        handle, acts = self.get(now, dst, length=min(length, LNET_MTU),
                                portal=LNET_RESERVED_PORTAL,
                                match_bits=LNET_PROTO_PING_MATCHBITS, src=src, timeout=timeout,
                                numa=numa)
        return handle, actions + acts

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
        """``LNetMDUnlink``: a final UNLINK event."""
        md = self.mds.get(handle)
        if md is None or md.unlinked:
            return []
        return self.mds.final(md, "UNLINK", -ETIMEDOUT if md.user_deadline else -ECANCELED)

    # ------------------------------------------------------------------ LND events
    def handle(self, event: TxCompleted | MessageReceived | PeerNotify,
               now: float) -> list[Action]:
        """An LND event; NI state changes (dbg-110) from before it logged first."""
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
        return self.tracer.drain_into(actions) if self.tracer.on else actions

    def next_deadline(self) -> float | None:
        """Earliest timer of every component (``timers.py``) and, while routing is in use,
        of the router checker (``Router.deadline``)."""
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
                # by its NID (rspt_next_hop_nid, looked up at expiry): the peer NI the table
                # has now, not one discovery replaced meanwhile (explore seed 544)
                hop = md.rsp_next_hop
                hop = self.peers.find_lpni(hop.nid) if hop is not None else None
                actions += self.health.response_timeout(hop, now)
                msg = md.msg
                if self.tracer.on and msg is not None and not msg.traced:
                    self.tracer.complete(msg, -ETIMEDOUT, now, "RESPONSE_TIMEOUT")
            actions += self.mds.final(md, "UNLINK", -ETIMEDOUT)
        due = self.recovery.deadline()
        if due is not None and due <= now:
            actions += self.recovery.tick(now)
        due = self.router.deadline()
        if due is not None and due <= now:
            actions += self.router.checker.tick(now)  # router checker (spec §6.4)
        if self.discovery.queues.request and self.discovery.queues.wake <= now:
            actions += self.discovery.run_queue(now)  # deferred discovery work (spec §5.2)
        actions += self.nistate.status_logs()  # NI state changes not logged yet (dbg-110)
        return actions + self.tracer.take() if self.tracer.on else actions

