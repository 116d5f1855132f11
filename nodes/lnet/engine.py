"""The LNet engine of one node: a sans-I/O state machine (ARCHITECTURE, STYLE rule 1).

Theory of operation: the driver feeds configuration calls (the DLC API), upper-layer sends
(``put``/``get``/``ping``), LND events (``handle``) and the passing of time (``handle_timer``);
every call returns a list of actions (``Transmit``, ``MDEvent``, ``Log``) and the driver asks
``next_deadline()`` afterwards. No sockets, threads, clocks or unseeded randomness in here.

Send path (spec §1.5, §2): select (``select.py``) -> commit (round-robin stamps, deadline) ->
peer NI credit -> NI credit -> Transmit; a message that finds no credit waits in FIFO order and
is posted when a credit comes back (seed 001). Completion (``TxCompleted``) returns the credits,
runs the health check (spec §3.2) which may resend (spec §3.3), and finalizes: the initiator's
MD gets its events. Invariant: every send ends in exactly one final MD event.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import replace

from nodes.lnet import views
from nodes.lnet.actions import Action, Log, MDEvent, Transmit
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.errors import (
    ECANCELED,
    EEXIST,
    EHOSTUNREACH,
    EINVAL,
    ENODEV,
    ENOENT,
    ESHUTDOWN,
    ETIMEDOUT,
    LNetConfigError,
)
from nodes.lnet.events import MessageReceived, TxCompleted
from nodes.lnet.hdr import (
    LNET_HDR_SIZE,
    LNET_MTU,
    LNET_PID_LUSTRE,
    LNET_PING_INFO_MIN_SIZE,
    LNET_PROTO_PING_MATCHBITS,
    LNET_RESERVED_PORTAL,
    LNetHdr,
    MsgType,
    WireHandle,
)
from nodes.lnet.health import apply_health
from nodes.lnet.hstatus import HStatus
from nodes.lnet.msg import MD, ME, Msg
from nodes.lnet.ni import LNET_NI_STATUS_UP, LNetNet, LNetNI, NetTunables
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
from nodes.lnet.select import SelectError, find_local_ni, select_pathway
from nodes.lnet.tunables import Tunables

_RESPONSES = (MsgType.ACK, MsgType.REPLY)


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
        self._txs: dict[int, Msg] = {}
        self._mds: dict[int, MD] = {}
        self._mes: list[ME] = []
        self._timers: list[tuple[float, int]] = []

    # ------------------------------------------------------------------ DLC: configuration
    def configure(self) -> None:
        """``lnetctl lnet configure``: bring LNet up with its loopback NI ``0@lo``."""
        if self.configured:
            return
        lo = LNetNet(LO_NET, NetTunables(peer_timeout=0, peer_credits=0, credits=0))
        lo.nis.append(LNetNI(LO_NID, "", lo, tx_credits=0, max_tx_credits=0, min_tx_credits=0))
        self.nets = {LO_NET: lo}
        self.configured = True

    def unconfigure(self) -> list[NID]:
        """``lnetctl lnet unconfigure``: returns the NIDs the LND must shut down."""
        nids = [ni.nid for ni in self.local_nis()]
        self.nets = {}
        self.peers = PeerTable()
        self.configured = False
        return nids

    def _require_up(self) -> None:
        if not self.configured:
            raise LNetConfigError(-ENODEV, "LNet is not configured")  # lnetctl: No such device

    def net_add(self, net: Net, interface: str, nid: NID, *, peer_credits: int | None = None,
                credits: int | None = None, peer_timeout: int | None = None,
                cpts: tuple[int, ...] = (0,)) -> LNetNI:
        """``lnetctl net add --net N --if IF``: one NI per interface (cfg-020, cfg-040)."""
        self._require_up()
        if net == LO_NET:
            raise LNetConfigError(-EINVAL, "cannot add network: Invalid argument")
        if any(ni.nid == nid for ni in self.local_nis()):
            raise LNetConfigError(-EEXIST, "cannot add network: File exists")
        lnet = self.nets.get(net)
        if lnet is None:
            lnet = LNetNet(net)
            if peer_credits is not None:
                lnet.tunables.peer_credits = peer_credits
            if credits is not None:
                lnet.tunables.credits = credits
            if peer_timeout is not None:
                lnet.tunables.peer_timeout = peer_timeout
            self.nets[net] = lnet
        elif any(ni.interface == interface for ni in lnet.nis):
            raise LNetConfigError(-EEXIST, "cannot add network: File exists")
        max_cr = lnet.tunables.credits
        ni = LNetNI(nid, interface, lnet, cpts=cpts, tx_credits=max_cr, max_tx_credits=max_cr,
                    min_tx_credits=max_cr)
        lnet.nis.append(ni)
        self._ping_changed()
        # peer NIs on this net created before it existed now get credits (spec §1.3)
        for lpni in self.peers.by_nid.values():
            if lpni.nid.net == net and lpni.max_tx_credits == 0:
                c = lnet.tunables.peer_credits
                lpni.tx_credits = lpni.max_tx_credits = lpni.min_tx_credits = c
                lpni.rtr_credits = lpni.min_rtr_credits = c
        return ni

    def net_del(self, net: Net, interface: str | None = None) -> list[NID]:
        """``lnetctl net del --net N [--if IF]``: returns the NIDs removed."""
        self._require_up()
        lnet = self.nets.get(net)
        if lnet is None or net == LO_NET:
            raise LNetConfigError(-ENOENT, "cannot delete network: No such file or directory")
        victims = [ni for ni in lnet.nis if interface is None or ni.interface == interface]
        if not victims:
            raise LNetConfigError(-ENOENT, "cannot delete network: No such file or directory")
        for ni in victims:
            lnet.nis.remove(ni)
        if not lnet.nis:
            del self.nets[net]
        self._ping_changed()
        return [ni.nid for ni in victims]

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

    def set_tunable(self, name: str, value: int) -> None:
        self.tunables.set(name, value)
        if name == "discovery":
            self._ping_changed()

    def _ping_changed(self) -> None:
        self.ping_seq += 1

    # ------------------------------------------------------------------ queries
    def local_nis(self, include_lo: bool = False) -> list[LNetNI]:
        return [ni for net in self.nets.values() for ni in net.nis if include_lo or not ni.is_lo]

    def ni_by_nid(self, nid: NID) -> LNetNI | None:
        return next((ni for ni in self.local_nis(True) if ni.nid == nid), None)

    def ping_info(self) -> PingInfo:
        features = LNET_PING_FEAT_BASE | LNET_PING_FEAT_NI_STATUS | LNET_PING_FEAT_MULTI_RAIL
        if self.tunables.discovery:
            features |= LNET_PING_FEAT_DISCOVERY
        if not self.tunables.routing:
            features |= LNET_PING_FEAT_RTE_DISABLED
        nis = tuple((ni.nid, ni.status) for ni in self.local_nis())
        return PingInfo(features, self.pid, self.ping_seq, nis)

    def view(self, what: str, **kw: object) -> dict[str, object]:
        """YAML-ready dicts for lnetctl (``views.py``)."""
        return views.render(self, what, **kw)

    # ------------------------------------------------------------------ upper layer API
    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _bind_md(self, now: float, *, threshold: int, data: bytes = b"",
                 timeout: float | None = None, op: MsgType | None = None) -> MD:
        md = MD(self._new_id(), threshold, data=data, sent_at=now, op=op)
        self._mds[md.handle] = md
        if timeout is not None:
            md.user_deadline = now + timeout
            heapq.heappush(self._timers, (md.user_deadline, md.handle))
        return md

    def attach_me(self, portal: int, match_bits: int, ignore_bits: int, *,
                  data: bytes = b"", sink: bool = True, events: bool = False) -> int:
        """Post a match entry (a test service); returns the MD handle."""
        md = MD(self._new_id(), -1, data=data, sink=sink, events=events)
        self._mds[md.handle] = md
        self._mes.append(ME(portal, match_bits, ignore_bits, md))
        return md.handle

    def put(self, now: float, dst: NID, *, payload: bytes, portal: int, match_bits: int = 0,
            ack: bool = True, src: NID | None = None, timeout: float | None = None,
            hdr_data: int = 0) -> tuple[int, list[Action]]:
        """``LNetPut``: returns the MD handle; events arrive as ``MDEvent`` actions."""
        md = self._bind_md(now, threshold=2 if ack else 1, timeout=timeout, op=MsgType.PUT)
        wmd = WireHandle(self.incarnation, md.handle) if ack else WireHandle()
        hdr = LNetHdr(dest_nid=dst, src_nid=LO_NID, dest_pid=LNET_PID_LUSTRE, src_pid=self.pid,
                      type=MsgType.PUT, payload_length=len(payload), wmd=wmd,
                      match_bits=match_bits, hdr_data=hdr_data, ptl_index=portal)
        msg = Msg(self._new_id(), MsgType.PUT, hdr, payload, md=md, final_dst=dst)
        md.msg = msg
        return md.handle, self._launch(msg, now, src, track=ack)

    def get(self, now: float, dst: NID, *, length: int, portal: int, match_bits: int = 0,
            src: NID | None = None, timeout: float | None = None,
            recovery: bool = False) -> tuple[int, list[Action]]:
        """``LNetGet``: the REPLY's payload comes back in the REPLY ``MDEvent``."""
        md = self._bind_md(now, threshold=2, timeout=timeout, op=MsgType.GET)
        hdr = LNetHdr(dest_nid=dst, src_nid=LO_NID, dest_pid=LNET_PID_LUSTRE, src_pid=self.pid,
                      type=MsgType.GET, payload_length=0,
                      wmd=WireHandle(self.incarnation, md.handle), match_bits=match_bits,
                      ptl_index=portal, sink_length=length)
        msg = Msg(self._new_id(), MsgType.GET, hdr, b"", md=md, final_dst=dst,
                  recovery=recovery)
        md.msg = msg
        return md.handle, self._launch(msg, now, src, track=True)

    def ping(self, now: float, dst: NID, *, timeout: float | None = None,
             src: NID | None = None) -> tuple[int, list[Action]]:
        """``lnet_ping``: a GET of the ping buffer on the reserved portal (spec §4.1)."""
        length = max(LNET_PING_INFO_MIN_SIZE, 16 + 16 * (self.tunables.max_interfaces + 1))
        return self.get(now, dst, length=min(length, LNET_MTU), portal=LNET_RESERVED_PORTAL,
                        match_bits=LNET_PROTO_PING_MATCHBITS, src=src, timeout=timeout)

    def unlink(self, now: float, handle: int) -> list[Action]:
        """``LNetMDUnlink``: the MD's owner gives up; it gets a final UNLINK event."""
        md = self._mds.get(handle)
        if md is None or md.unlinked:
            return []
        return self._md_final(md, "UNLINK", -ETIMEDOUT if md.user_deadline else -ECANCELED)

    def _launch(self, msg: Msg, now: float, src: NID | None, *, track: bool) -> list[Action]:
        self.counters.msg_alloc()
        if not self.configured:
            return self._fail_unsent(msg, now, -ESHUTDOWN, HStatus.LOCAL_ERROR)
        if track and msg.md is not None and self._tracking(msg.type):
            msg.md.rsp_deadline = now + self.tunables.transaction_timeout
            heapq.heappush(self._timers, (msg.md.rsp_deadline, msg.md.handle))
            self.counters.bump("rst_alloc")
        msg.src_nid_param = src
        return self._send(msg, now)

    def _tracking(self, mtype: MsgType) -> bool:
        rt = self.tunables.response_tracking
        return (mtype == MsgType.GET and rt in (1, 3)) or (mtype == MsgType.PUT and rt in (2, 3))

    # ------------------------------------------------------------------ send path
    def _send(self, msg: Msg, now: float) -> list[Action]:
        """``lnet_send``: select, commit, post; selection errors finalize without resend."""
        assert msg.final_dst is not None
        dst = msg.final_dst
        if dst.is_lo or self.ni_by_nid(dst) is not None:
            return self._send_loopback(msg, now, dst)
        try:
            src = (find_local_ni(msg.src_nid_param, self.local_nis())
                   if msg.src_nid_param else None)
            lpni = self.peers.find_lpni(dst)
            if lpni is None:
                lnet = self.nets.get(dst.net)
                lpni = self.peers.traffic_add(dst, lnet.tunables.peer_credits if lnet else 0)
            nmr = not lpni.peer.multi_rail or msg.recovery
            ni, lpni = select_pathway(lpni=lpni, src=src, nets=self.nets, nmr=nmr,
                                      local_nis=self.local_nis())
        except SelectError as e:
            hs = HStatus.REMOTE_ERROR if e.errno == -EHOSTUNREACH else HStatus.LOCAL_ERROR
            return [Log(level="error", text=e.descr),
                    *self._fail_unsent(msg, now, e.errno, hs)]
        self._commit(msg, ni, lpni, now)
        return self._post_send(msg, now)

    def _commit(self, msg: Msg, ni: LNetNI, lpni: PeerNI, now: float) -> None:
        """``lnet_handle_send``: RR stamps, deadline, header addressing (spec §2.7, §3.4)."""
        peer = lpni.peer
        peer.send_seq += 1
        lpni.peer_net.seq = lpni.seq = peer.send_seq
        self.net_seq += 1
        ni.net.seq = ni.seq = self.net_seq
        msg.txni, msg.txpeer = ni, lpni
        msg.tx_committed = True
        msg.committed_at = now
        lnd_timeout = ni.lnd_timeout or self.tunables.lnd_timeout
        msg.deadline = now + lnd_timeout * (self.tunables.retry_count + 1) + 1
        msg.hdr = replace(msg.hdr, src_nid=ni.nid, dest_nid=lpni.nid)
        if msg.md is not None and msg.md.rsp_deadline is not None:
            msg.md.rsp_next_hop = lpni

    def _post_send(self, msg: Msg, now: float) -> list[Action]:
        """``lnet_post_send_locked``: peer credit then NI credit, else wait FIFO (spec §1.5)."""
        ni, lpni = msg.txni, msg.txpeer
        assert ni is not None and lpni is not None
        if msg.md is not None and msg.md.unlinked:
            return self._finalize_tx(msg, now, -ECANCELED, HStatus.LOCAL_ABORTED)
        if not msg.peer_credit:
            msg.peer_credit = True
            lpni.tx_credits -= 1
            lpni.txqnob += msg.nob + LNET_HDR_SIZE
            lpni.min_tx_credits = min(lpni.min_tx_credits, lpni.tx_credits)
            if lpni.tx_credits < 0:
                msg.queued = True
                lpni.txq.append(msg)
                return []
        if not msg.ni_credit:
            msg.ni_credit = True
            ni.tx_credits -= 1
            ni.min_tx_credits = min(ni.min_tx_credits, ni.tx_credits)
            if ni.tx_credits < 0:
                msg.queued = True
                ni.txq.append(msg)
                return []
        if msg.queued and now > msg.deadline:
            # a message that waited past its deadline is dropped (spec §1.5 step 1)
            self.counters.bump("drop_count")
            self.counters.bump("drop_length", msg.nob)
            return self._finalize_tx(msg, now, -ETIMEDOUT, HStatus.NETWORK_TIMEOUT)
        msg.queued = False
        msg.tx_id = self._new_id()
        self._txs[msg.tx_id] = msg
        return [Transmit(tx_id=msg.tx_id, ni=ni.nid, lpni=lpni.nid, hdr=msg.hdr,
                         payload=msg.payload)]

    def _return_credits(self, msg: Msg, now: float) -> list[Action]:
        """``lnet_return_tx_credits_locked``: give back credits, post the next waiter."""
        actions: list[Action] = []
        ni, lpni = msg.txni, msg.txpeer
        if msg.ni_credit and ni is not None:
            msg.ni_credit = False
            if msg in ni.txq:
                ni.txq.remove(msg)
            ni.tx_credits += 1
            if ni.tx_credits <= 0 and ni.txq:
                actions += self._post_send(ni.txq.popleft(), now)
        if msg.peer_credit and lpni is not None:
            msg.peer_credit = False
            if msg in lpni.txq:
                lpni.txq.remove(msg)
            lpni.tx_credits += 1
            lpni.txqnob -= msg.nob + LNET_HDR_SIZE
            if lpni.tx_credits <= 0 and lpni.txq:
                actions += self._post_send(lpni.txq.popleft(), now)
        return actions

    def _send_loopback(self, msg: Msg, now: float, dst: NID) -> list[Action]:
        """Messages to one of our own NIDs go through the loopback NI, without credits."""
        ni = self.ni_by_nid(dst) or self.nets[LO_NET].nis[0]
        msg.hdr = replace(msg.hdr, src_nid=ni.nid, dest_nid=ni.nid)
        msg.txni = ni
        actions = self._on_receive(MessageReceived(ni=ni.nid, peer_nid=ni.nid, hdr=msg.hdr,
                                                   payload=msg.payload), now, loopback=True)
        return actions + self._finalize_tx(msg, now, 0, HStatus.OK)

    # ------------------------------------------------------------------ LND events
    def handle(self, event: TxCompleted | MessageReceived, now: float) -> list[Action]:
        if isinstance(event, TxCompleted):
            msg = self._txs.pop(event.tx_id, None)
            if msg is None:
                return [Log(level="warning", text=f"completion for unknown tx {event.tx_id}")]
            return self._finalize_tx(msg, now, event.rc, event.hstatus)
        return self._on_receive(event, now)

    def _finalize_tx(self, msg: Msg, now: float, rc: int, hstatus: HStatus) -> list[Action]:
        """``lnet_finalize`` of a sent message: health, maybe resend, credits, events."""
        msg.hstatus = hstatus
        actions = self._return_credits(msg, now)
        ni, lpni = msg.txni, msg.txpeer
        if ni is not None:
            ni.stats.sent.bump(msg.type)
        if lpni is not None:
            lpni.stats.sent.bump(msg.type)
        if msg.tx_committed and ni is not None and lpni is not None and not ni.is_lo:
            resend, logs = apply_health(self, msg, now, rc, hstatus)
            actions += logs
            if resend:
                msg.retry_count += 1
                msg.tx_committed = False
                msg.queued = False
                actions += self._send(msg, now)
                return actions
        if rc == 0:
            if msg.retry_count:
                self.counters.bump("successful_resends")
            self.counters.bump("send_count")
            if msg.type in (MsgType.PUT, MsgType.REPLY):
                self.counters.bump("send_length", msg.nob)
            if msg.type == MsgType.PUT and ni is not None and msg.md is not None:
                ni.stats.put_egress.add(int((now - msg.md.sent_at) * 1e9))
        self.counters.msg_free()
        if msg.md is None or msg.is_response:
            return actions
        md = msg.md
        done = rc != 0 or md.threshold <= 1
        if done:
            return actions + self._md_final(md, "SEND", rc)
        md.threshold -= 1
        return [*actions, MDEvent(handle=md.handle, kind="SEND", status=0, unlinked=False,
                                  source=ni.nid if ni else None)]

    def _fail_unsent(self, msg: Msg, now: float, rc: int, hstatus: HStatus) -> list[Action]:
        """Selection failed: never committed, so no credits, no health, no resend (§2.8)."""
        msg.hstatus = hstatus
        self.counters.msg_free()
        if msg.md is None or msg.is_response:
            return []
        return self._md_final(msg.md, "SEND", rc)

    def _md_final(self, md: MD, kind: str, status: int, **kw: object) -> list[Action]:
        """The MD's last event: unlink it and detach its response tracker."""
        md.unlinked = True
        self._mds.pop(md.handle, None)
        if md.rsp_deadline is not None:
            md.rsp_deadline = None
            self.counters.values["rst_alloc"] = max(0, self.counters.values["rst_alloc"] - 1)
        return [MDEvent(handle=md.handle, kind=kind, status=status, unlinked=True, **kw)]

    # ------------------------------------------------------------------ receive path
    def _on_receive(self, ev: MessageReceived, now: float, *,
                    loopback: bool = False) -> list[Action]:
        """``lnet_parse`` (spec §4.2) for messages addressed to this node."""
        from nodes.lnet.receive import parse  # local import keeps the facade small

        return parse(self, ev, now, loopback=loopback)

    def send_response(self, now: float, mtype: MsgType, rx_ni: LNetNI, req: LNetHdr,
                      payload: bytes = b"", mlength: int = 0) -> list[Action]:
        """ACK/REPLY: from the NID the request came to, to the request's source (snd-045)."""
        hdr = LNetHdr(dest_nid=req.src_nid, src_nid=rx_ni.nid, dest_pid=req.src_pid,
                      src_pid=self.pid, type=mtype, payload_length=len(payload), wmd=req.wmd,
                      match_bits=req.match_bits, mlength=mlength)
        msg = Msg(self._new_id(), mtype, hdr, payload, is_response=True,
                  final_dst=req.src_nid, src_nid_param=rx_ni.nid)
        self.counters.msg_alloc()
        return self._send(msg, now)

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

    def md_response(self, md: MD, kind: str, source: NID, initiator: NID,
                    payload: bytes = b"", mlength: int = 0) -> list[Action]:
        """An ACK or REPLY matched ``md``: its final event."""
        return self._md_final(md, kind, 0, source=source, initiator=initiator,
                              payload=payload, mlength=mlength)

    # ------------------------------------------------------------------ time
    def next_deadline(self) -> float | None:
        while self._timers:
            t, handle = self._timers[0]
            md = self._mds.get(handle)
            if md is not None and not md.unlinked and t in (md.rsp_deadline, md.user_deadline):
                return t
            heapq.heappop(self._timers)
        return None

    def handle_timer(self, now: float) -> list[Action]:
        """Expire response trackers (spec §3.4) and caller timeouts."""
        actions: list[Action] = []
        while self._timers and self._timers[0][0] <= now:
            t, handle = heapq.heappop(self._timers)
            md = self._mds.get(handle)
            if md is None or md.unlinked:
                continue
            if t == md.user_deadline:
                actions += self._md_final(md, "UNLINK", -ETIMEDOUT)
            elif t == md.rsp_deadline:
                self.counters.bump("response_timeout_count")
                from nodes.lnet.health import remote_failure

                if md.rsp_next_hop is not None:
                    actions += remote_failure(self, md.rsp_next_hop, HStatus.REMOTE_TIMEOUT, now)
                actions += self._md_final(md, "UNLINK", -ETIMEDOUT)
        return actions

    def ni_status_up(self, ni: LNetNI) -> bool:
        return ni.status == LNET_NI_STATUS_UP
