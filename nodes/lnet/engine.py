"""The LNet engine of one node: a sans-I/O state machine (ARCHITECTURE, STYLE rule 1).

Theory of operation: the driver feeds configuration calls (the DLC API), upper-layer sends
(``put``/``get``/``ping``), LND events (``handle``), link-state changes (``ni_set_fatal``) and
the passing of time (``handle_timer``); every call returns a list of actions (``Transmit``,
``MDEvent``, ``Log``) and the driver asks ``next_deadline()`` afterwards. No sockets, threads,
clocks or unseeded randomness in here.

This module is the facade; the work lives in one module per concept: ``send.py`` (select ->
commit -> credits -> Transmit, tx finalize, resend), ``select.py`` (spec §2), ``health.py``
(spec §3.1-3.3), ``recovery.py`` (spec §3.5, driven by the 1 s monitor tick), ``receive.py``
(spec §4.2), ``router.py`` (routing, spec §6: ``route``, ``rtrpool``, ``rtrcheck``,
``rtralive``, ``rtrstate``), ``nistate.py`` (NI add/del, link state, dbg-110 logging),
``views.py`` (spec §9).
Invariant (spec §4.4): every send ends in exactly one final MD event (``unlinked=True``),
success or failure with a negative errno.
"""

from __future__ import annotations

import heapq
import random

from nodes.lnet import discovery, nistate, notify, recovery, send, udsp, views
from nodes.lnet.actions import Action, Log, MDEvent
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.errors import (
    ECANCELED,
    EEXIST,
    ENODEV,
    ESHUTDOWN,
    ETIMEDOUT,
    LNetConfigError,
)
from nodes.lnet.events import MessageReceived, PeerNotify, TxCompleted
from nodes.lnet.fault import FaultState, release
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
from nodes.lnet.health import remote_failure
from nodes.lnet.hstatus import HStatus
from nodes.lnet.msg import MD, ME, Msg
from nodes.lnet.ni import LNET_NI_STATUS_DOWN, LNET_NI_STATUS_UP, LNetNet, LNetNI, NetTunables
from nodes.lnet.nid import LO_NET, LO_NID, NID, Net
from nodes.lnet.peer import PeerNI, PeerTable
from nodes.lnet.ping import (
    LNET_PING_FEAT_BASE,
    LNET_PING_FEAT_DISCOVERY,
    LNET_PING_FEAT_MULTI_RAIL,
    LNET_PING_FEAT_NI_STATUS,
    LNET_PING_FEAT_RTE_DISABLED,
    PingInfo,
)
from nodes.lnet.router import ROUTER_PARAMS, Router
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE, Tunables


class LNetEngine:
    """One node's LNet. ``rng`` is injected so the same seed gives the same decisions."""

    def __init__(self, *, rng: random.Random | None = None, pid: int = LNET_PID_LUSTRE,
                 incarnation: int = 1) -> None:
        self.rng = rng or random.Random(0)
        self.pid = pid
        self.incarnation = incarnation
        self.tunables = Tunables()
        self.counters = GlobalCounters()
        self.peers = PeerTable()
        self.nets: dict[Net, LNetNet] = {}
        self.configured = False
        self.net_seq = 0
        self.ping_seq = 1
        self._next_id = 1
        self.txs: dict[int, Msg] = {}
        self._mds: dict[int, MD] = {}
        self._mes: list[ME] = []
        self._timers: list[tuple[float, int]] = []
        self.ni_recoveryq: list[LNetNI] = []      # ln_mt_localNIRecovq (spec §3.5)
        self.lpni_recoveryq: list[PeerNI] = []    # ln_mt_peerNIRecovq
        self.mt_last = float("-inf")              # last monitor tick
        self.faults = FaultState(self.rng)  # lctl net_drop_add/net_delay_add (spec §8)
        self.router = Router(self)  # routes, gateways, buffers, forwarding (router.py, §6)
        self.dc = discovery.DiscoveryQueues()  # ln_dc_request/working (discovery.py, §5.2)
        self.multi_rail = True  # False: a "downrev" non-MR node (seed 000 bck-*, discovery.py)
        self.udsp = udsp.UDSPTable()        # ln_udsp_list (spec §7)
        self.notices = notify.Notices()     # health notices for user space (hlth-lnt-udev)
        self.nistate = nistate.NIStateLog()  # local NI states last logged (dbg-110)
        self._hook_peers()

    def _hook_peers(self) -> None:
        """New peer nets / peer NIs get the UDSP rules applied at creation (spec §7.3)."""
        self.peers.on_new_lpn = lambda pnet: udsp.on_lpn(self, pnet)
        self.peers.on_new_lpni = lambda lpni: udsp.on_lpni(self, lpni)

    # ------------------------------------------------------------------ DLC: configuration
    def configure(self) -> None:
        """``lnetctl lnet configure``: bring LNet up with its loopback NI ``0@lo``."""
        if self.configured:
            return
        lo = LNetNet(LO_NET, NetTunables(peer_timeout=0, peer_credits=0, credits=0))
        lo.nis.append(LNetNI(LO_NID, "", lo, tx_credits=0, max_tx_credits=0, min_tx_credits=0))
        self.nets = {LO_NET: lo}
        self.configured = True
        if self.tunables.forwarding:  # module param forwarding=enabled: a router at once (§6.2)
            self.router.on_tunable("forwarding", 1, None)

    def unconfigure(self) -> list[NID]:
        """``lnetctl lnet unconfigure``: returns the NIDs the LND must shut down."""
        nids = [ni.nid for ni in self.local_nis()]
        self.nets = {}
        self.peers = PeerTable()
        self._hook_peers()
        self.udsp = udsp.UDSPTable()  # lnet_udsp_destroy(shutdown) on LNetNIFini
        self.ni_recoveryq.clear()
        self.lpni_recoveryq.clear()
        self.router = Router(self)
        self.dc = discovery.DiscoveryQueues()
        self.configured = False
        return nids

    def _require_up(self) -> None:
        if not self.configured:
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
        return nistate.net_add(self, net, interface, nid, peer_credits=peer_credits,
                               credits=credits, peer_timeout=peer_timeout, cpts=cpts,
                               numa=numa)

    def net_del(self, net: Net, interface: str | None = None) -> list[NID]:
        """``lnetctl net del --net N [--if IF]``: returns the NIDs removed (logged, dbg-110)."""
        self._require_up()
        return nistate.net_del(self, net, interface)

    def peer_add(self, prim: NID, nids: list[NID], *, non_mr: bool = False,
                 lock_prim: bool = False) -> None:
        """``lnetctl peer add --prim_nid P --nid LIST`` (cfg-070, cfg-075, cfg-080)."""
        self._require_up()
        local = {ni.nid for ni in self.local_nis()}
        for nid in [prim, *nids]:
            if nid in local:
                raise LNetConfigError(-EEXIST, f"{nid} is a local NID")
        credits = {n: ln.tunables.peer_credits for n, ln in self.nets.items()}
        self.peers.user_add(prim, nids, non_mr, lock_prim, credits)

    def peer_del(self, prim: NID, nids: list[NID], *, force: bool = False) -> None:
        self._require_up()
        self.peers.user_del(prim, nids, force)
        self.lpni_recoveryq[:] = [p for p in self.lpni_recoveryq
                                  if self.peers.find_lpni(p.nid) is p]

    def set_tunable(self, name: str, value: int, now: float | None = None) -> list[Action]:
        old = getattr(self.tunables, name, None)
        self.tunables.set(name, value)
        if name == "discovery":  # disabling force-pushes to MR peers (discovery.py, §5.4)
            discovery.set_discovery(self, int(old or 0), value)
        if name in ROUTER_PARAMS:  # routing state and buffer pools (router.py, spec §6.2)
            return self.router.on_tunable(name, value, now)
        return []

    def _ping_changed(self) -> None:
        """A local NI was added or removed: the ping buffer is rebuilt with seq+1 and MR
        peers are pushed the new one (spec §5.1, dyn-045; ``discovery.local_ni_changed``)."""
        self.ping_seq += 1
        discovery.local_ni_changed(self)

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
        return nistate.ni_set_fatal(self, nid, fatal, now, cause)

    def net_set_health(self, nid: NID | None, value: int, now: float) -> None:
        """``lnetctl net set --nid X|--all --health V`` (spec §3.6; out of range -> 1000)."""
        nistate.net_set_health(self, nid, value, now)

    def peer_set_health(self, nid: NID | None, value: int, now: float) -> None:
        """``lnetctl peer set --nid X|--all --health V`` (spec §3.6; subject to §3.5 rules)."""
        if not 0 <= value <= LNET_MAX_HEALTH_VALUE:
            value = LNET_MAX_HEALTH_VALUE
        for lpni in list(self.peers.by_nid.values()):
            if nid is not None and lpni.nid != nid:
                continue
            lpni.healthv = value
            recovery.lpni_enqueue(self, lpni, now)
            self.notices.watch_lpni(lpni)  # its status changes are published (notify.py)

    def stats_reset(self) -> None:
        """``lnetctl stats reset`` (spec §4.5): global counters incl. gauges, per-NI and
        per-peer-NI send/recv/drop and latency stats; health counters are kept. The testbed
        statistics (link events, send/transaction times, counters.py) are reset too."""
        self.counters.reset()
        for ni in self.local_nis(True):
            ni.stats.reset()
            ni.link_events.reset()
        for lpni in self.peers.by_nid.values():
            lpni.stats.reset()

    # ------------------------------------------------------------------ queries
    def local_nis(self, include_lo: bool = False) -> list[LNetNI]:
        return [ni for net in self.nets.values() for ni in net.nis if include_lo or not ni.is_lo]

    def ni_by_nid(self, nid: NID) -> LNetNI | None:
        return next((ni for ni in self.local_nis(True) if ni.nid == nid), None)

    def md_by_handle(self, handle: int) -> MD | None:
        return self._mds.get(handle)

    def ping_info(self) -> PingInfo:
        features = LNET_PING_FEAT_BASE | LNET_PING_FEAT_NI_STATUS
        if self.multi_rail:  # a downrev node has neither bit (bck-025, discovery.py)
            features |= LNET_PING_FEAT_MULTI_RAIL
            if self.tunables.discovery:
                features |= LNET_PING_FEAT_DISCOVERY
        if self.router.rte_disabled():  # STARTING/STOPPING keep it (spec §6.2)
            features |= LNET_PING_FEAT_RTE_DISABLED
        # NI status per entry: a fatal NI is DOWN, otherwise its status (spec §1.2, §5.1)
        nis = tuple((ni.nid, LNET_NI_STATUS_DOWN if ni.fatal_error else ni.status)
                    for ni in self.local_nis())
        return PingInfo(features, self.pid, self.ping_seq, nis)

    def view(self, what: str, **kw: object) -> dict[str, object]:
        """YAML-ready dicts for lnetctl (``views.py``)."""
        return views.render(self, what, **kw)

    # ------------------------------------------------------------------ upper layer API
    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _bind_md(self, now: float, *, threshold: int, data: bytes = b"",
                 timeout: float | None = None, op: MsgType | None = None,
                 owner: tuple[str, NID] | None = None) -> MD:
        md = MD(self.new_id(), threshold, data=data, sent_at=now, op=op, owner=owner)
        self._mds[md.handle] = md
        if timeout is not None:
            md.user_deadline = now + timeout
            heapq.heappush(self._timers, (md.user_deadline, md.handle))
        return md

    def attach_me(self, portal: int, match_bits: int, ignore_bits: int, *,
                  data: bytes = b"", sink: bool = True, events: bool = False) -> int:
        """Post a match entry (a test service); returns the MD handle."""
        md = MD(self.new_id(), -1, data=data, sink=sink, events=events)
        self._mds[md.handle] = md
        self._mes.append(ME(portal, match_bits, ignore_bits, md))
        return md.handle

    def put(self, now: float, dst: NID, *, payload: bytes, portal: int, match_bits: int = 0,
            ack: bool = True, src: NID | None = None, timeout: float | None = None,
            hdr_data: int = 0, numa: int | None = None,
            owner: tuple[str, NID] | None = None) -> tuple[int, list[Action]]:
        """``LNetPut``: returns the MD handle; events arrive as ``MDEvent`` actions.

        ``timeout`` is the caller's own transaction timeout (003); ``numa`` the NUMA node of
        the payload memory (snd-020).
        """
        md = self._bind_md(now, threshold=2 if ack else 1, timeout=timeout, op=MsgType.PUT,
                           owner=owner)
        wmd = WireHandle(self.incarnation, md.handle) if ack else WireHandle()
        hdr = LNetHdr(dest_nid=dst, src_nid=LO_NID, dest_pid=LNET_PID_LUSTRE, src_pid=self.pid,
                      type=MsgType.PUT, payload_length=len(payload), wmd=wmd,
                      match_bits=match_bits, hdr_data=hdr_data, ptl_index=portal)
        msg = Msg(self.new_id(), MsgType.PUT, hdr, payload, md=md, final_dst=dst, md_cpt=numa)
        md.msg = msg
        # discovery pushes are always tracked (lnet_response_tracking 0 still tracks, §4.3)
        return md.handle, self._launch(msg, now, src, track=ack, force_track=owner is not None)

    def get(self, now: float, dst: NID, *, length: int, portal: int, match_bits: int = 0,
            src: NID | None = None, timeout: float | None = None, recovery: bool = False,
            numa: int | None = None,
            owner: tuple[str, NID] | None = None) -> tuple[int, list[Action]]:
        """``LNetGet``: the REPLY's payload comes back in the REPLY ``MDEvent``."""
        md = self._bind_md(now, threshold=2, timeout=timeout, op=MsgType.GET, owner=owner)
        hdr = LNetHdr(dest_nid=dst, src_nid=LO_NID, dest_pid=LNET_PID_LUSTRE, src_pid=self.pid,
                      type=MsgType.GET, payload_length=0,
                      wmd=WireHandle(self.incarnation, md.handle), match_bits=match_bits,
                      ptl_index=portal, sink_length=length)
        msg = Msg(self.new_id(), MsgType.GET, hdr, b"", md=md, final_dst=dst,
                  recovery=recovery, md_cpt=numa)
        md.msg = msg
        force = portal == LNET_RESERVED_PORTAL and match_bits == LNET_PROTO_PING_MATCHBITS
        return md.handle, self._launch(msg, now, src, track=True, force_track=force and
                                       owner is not None)

    def ping(self, now: float, dst: NID, *, timeout: float | None = None,
             src: NID | None = None, numa: int | None = None) -> tuple[int, list[Action]]:
        """``lnet_ping``: a GET of the ping buffer on the reserved portal (spec §4.1)."""
        length = max(LNET_PING_INFO_MIN_SIZE, 16 + 16 * (self.tunables.max_interfaces + 1))
        return self.get(now, dst, length=min(length, LNET_MTU), portal=LNET_RESERVED_PORTAL,
                        match_bits=LNET_PROTO_PING_MATCHBITS, src=src, timeout=timeout,
                        numa=numa)

    def recovery_ping(self, now: float, dst: NID,
                      owner: tuple[str, NID]) -> tuple[int, list[Action]]:
        """``lnet_send_ping(recovery=true)``: 272-byte GET, tracked, NMR, never resent."""
        return self.get(now, dst, length=LNET_PING_INFO_MIN_SIZE, portal=LNET_RESERVED_PORTAL,
                        match_bits=LNET_PROTO_PING_MATCHBITS, recovery=True, owner=owner)

    def unlink(self, now: float, handle: int) -> list[Action]:
        """``LNetMDUnlink``: the MD's owner gives up; it gets a final UNLINK event."""
        md = self._mds.get(handle)
        if md is None or md.unlinked:
            return []
        return self.md_final(md, "UNLINK", -ETIMEDOUT if md.user_deadline else -ECANCELED)

    def _launch(self, msg: Msg, now: float, src: NID | None, *, track: bool,
                force_track: bool = False) -> list[Action]:
        self.counters.msg_alloc()
        if not self.configured:
            return send.fail_unsent(self, msg, now, -ESHUTDOWN, HStatus.LOCAL_ERROR)
        if track and msg.md is not None and (force_track or self._tracking(msg.type)):
            # lnet_attach_rsp_tracker: one deadline per MD, not reset on resend (spec §3.4)
            msg.md.rsp_deadline = now + self.tunables.transaction_timeout
            heapq.heappush(self._timers, (msg.md.rsp_deadline, msg.md.handle))
            self.counters.bump("rst_alloc")
        msg.src_nid_param = src
        return send.send(self, msg, now)

    def _tracking(self, mtype: MsgType) -> bool:
        """``lnet_response_tracking`` 0..3 (spec §4.3)."""
        rt = self.tunables.response_tracking
        return (mtype == MsgType.GET and rt in (1, 3)) or (mtype == MsgType.PUT and rt in (2, 3))

    # the fault hooks (nodes/lnet/fault.py) call these two names
    def _post_send(self, msg: Msg, now: float) -> list[Action]:
        return send.post_send(self, msg, now)

    def _finalize_tx(self, msg: Msg, now: float, rc: int, hstatus: HStatus) -> list[Action]:
        return send.finalize_tx(self, msg, now, rc, hstatus)

    # ------------------------------------------------------------------ MD events
    def md_event(self, md: MD, kind: str, status: int, *, unlinked: bool = False,
                 **kw: object) -> list[Action]:
        """Deliver an event on ``md``: to the upper layer, or to recovery for its pings."""
        if md.unlinked and not unlinked:
            return []
        if md.owner is not None and md.owner[0] in ("rtr", "rtrq"):  # router pings (§6.4)
            return self.router.on_md_event(md, kind, status, kw.get("payload", b""))  # type: ignore[arg-type]
        if md.owner is not None and md.owner[0].startswith("dc_"):  # discovery ping/push
            return discovery.on_md_event(self, md, kind, status, **kw)
        if md.owner is not None:
            return recovery.on_md_event(self, md, kind, status)
        return [MDEvent(handle=md.handle, kind=kind, status=status, unlinked=unlinked,
                        **kw)]  # type: ignore[arg-type]

    def md_final(self, md: MD, kind: str, status: int, **kw: object) -> list[Action]:
        """The MD's last event (exactly once): unlink it and detach its response tracker."""
        if md.unlinked:
            return []
        md.unlinked = True
        self._mds.pop(md.handle, None)
        if md.rsp_deadline is not None:
            md.rsp_deadline = None
            self.counters.values["rst_alloc"] = max(0, self.counters.values["rst_alloc"] - 1)
        return self.md_event(md, kind, status, unlinked=True, **kw)

    # ------------------------------------------------------------------ LND events
    def handle(self, event: TxCompleted | MessageReceived | PeerNotify,
               now: float) -> list[Action]:
        """An LND event. Local NI state changes (dbg-110) from before it are logged first,
        those it caused last (``nistate.py``)."""
        actions = nistate.status_logs(self) if nistate.pending(self) else []
        actions += self._handle(event, now)
        return actions + nistate.status_logs(self) if nistate.pending(self) else actions

    def _handle(self, event: TxCompleted | MessageReceived | PeerNotify,
                now: float) -> list[Action]:
        if isinstance(event, PeerNotify):  # lnet_notify from the LND (seed 002, rtralive.py)
            return self.router.notify(event, now)
        if isinstance(event, TxCompleted):
            msg = self.txs.pop(event.tx_id, None)
            if msg is None:
                return [Log(level="warning", text=f"completion for unknown tx {event.tx_id}")]
            if event.rc == 0 and msg.txni is not None and msg.txpeer is not None:
                # hlth-stt-avg-send-time: commit of this attempt -> the LND's completion
                nsec = int((now - msg.committed_at) * 1e9)
                msg.txni.stats.send_time.add(nsec)
                msg.txpeer.stats.send_time.add(nsec)
            return send.finalize_tx(self, msg, now, event.rc, event.hstatus)
        return self.on_receive(event, now)

    # ------------------------------------------------------------------ receive path
    def on_receive(self, ev: MessageReceived, now: float, *,
                   loopback: bool = False) -> list[Action]:
        """``lnet_parse`` (spec §4.2) for messages addressed to this node."""
        from nodes.lnet.receive import parse  # receive imports fault, which is light

        return parse(self, ev, now, loopback=loopback)

    def send_response(self, now: float, mtype: MsgType, rx_ni: LNetNI, req: LNetHdr,
                      payload: bytes = b"", mlength: int = 0,
                      rtr: NID | None = None) -> list[Action]:
        """ACK/REPLY: from the NID the request came to, to the request's source (snd-045);
        ``rtr`` is the previous hop, the gateway a routed response goes back through (§2.1)."""
        hdr = LNetHdr(dest_nid=req.src_nid, src_nid=rx_ni.nid, dest_pid=req.src_pid,
                      src_pid=self.pid, type=mtype, payload_length=len(payload), wmd=req.wmd,
                      match_bits=req.match_bits, mlength=mlength)
        msg = Msg(self.new_id(), mtype, hdr, payload, is_response=True,
                  final_dst=req.src_nid, src_nid_param=rx_ni.nid, rtr_nid_param=rtr)
        self.counters.msg_alloc()
        return send.send(self, msg, now)

    def match_me(self, portal: int, match_bits: int) -> MD | None:
        for me in self._mes:
            if me.portal == portal and me.matches(match_bits) and not me.md.unlinked:
                return me.md
        return None

    def lookup_md(self, wmd: WireHandle) -> MD | None:
        if wmd.interface_cookie != self.incarnation:
            return None
        md = self._mds.get(wmd.object_cookie)
        return None if md is None or md.unlinked else md

    def md_response(self, now: float, md: MD, kind: str, source: NID, initiator: NID,
                    payload: bytes = b"", mlength: int = 0) -> list[Action]:
        """An ACK or REPLY matched ``md``: its final event. The transaction's time (PUT/GET
        sent -> this response) goes to the responding peer NI (hlth-stt-avg-transaction-time)."""
        lpni = self.peers.find_lpni(source)
        if lpni is not None:
            lpni.stats.transaction_time.add(int((now - md.sent_at) * 1e9))
        return self.md_final(md, kind, 0, source=source, initiator=initiator,
                             payload=payload, mlength=mlength)

    # ------------------------------------------------------------------ time
    def next_deadline(self) -> float | None:
        """Earliest of: MD timers, delayed messages (spec §8.3), the monitor tick (§3.5);
        at once when a local NI state change waits to be logged (dbg-110, nistate.py)."""
        times = (self.faults.next_deadline(), self._next_md_deadline(),
                 recovery.deadline(self), self.router.deadline(),
                 discovery.deadline(self), 0.0 if nistate.pending(self) else None)
        return min((t for t in times if t is not None), default=None)

    def _next_md_deadline(self) -> float | None:
        while self._timers:
            t, handle = self._timers[0]
            md = self._mds.get(handle)
            if md is not None and not md.unlinked and t in (md.rsp_deadline, md.user_deadline):
                return t
            heapq.heappop(self._timers)
        return None

    def handle_timer(self, now: float) -> list[Action]:
        """Delayed messages, response trackers (spec §3.4), caller timeouts, monitor tick."""
        actions = nistate.status_logs(self)  # changes by config calls, with their cause
        actions += release(self, now)  # delayed messages due (spec §8.3)
        while self._timers and self._timers[0][0] <= now:
            t, handle = heapq.heappop(self._timers)
            md = self._mds.get(handle)
            if md is None or md.unlinked:
                continue
            if t == md.rsp_deadline:
                # lnet_finalize_expired_responses: penalise the next hop (spec §3.4, §11.6)
                self.counters.bump("response_timeout_count")
                if md.rsp_next_hop is not None:  # no single-NI exemption here (lib-move.c)
                    before = md.rsp_next_hop.healthv
                    remote_failure(self, md.rsp_next_hop, now, "RESPONSE_TIMEOUT")
                    actions += self.router.health_fell(md.rsp_next_hop, before)  # 002
                actions += self.md_final(md, "UNLINK", -ETIMEDOUT)
            elif t == md.user_deadline:
                actions += self.md_final(md, "UNLINK", -ETIMEDOUT)
        due = recovery.deadline(self)
        if due is not None and due <= now:
            actions += recovery.tick(self, now)
        due = self.router.deadline()
        if due is not None and due <= now:
            actions += self.router.tick(now)  # router checker (spec §6.4)
        due = discovery.deadline(self)
        if due is not None and due <= now:
            actions += discovery.tick(self, now)  # deferred discovery work (spec §5.2)
        return actions + nistate.status_logs(self)  # NI state changes not logged yet (dbg-110)

    def ni_status_up(self, ni: LNetNI) -> bool:
        return ni.status == LNET_NI_STATUS_UP
