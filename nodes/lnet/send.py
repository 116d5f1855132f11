"""Send path: ``lnet_send`` -> select -> commit -> credits -> Transmit; and tx finalize.

Theory of operation (spec §1.5, §2, §3.3, §4.4): ``Sender`` moves every message it sends
through the lifecycle of ``msg.py`` (``Msg.fire``). ``send`` passes the discovery gate,
resolves the destination peer NI (creating a non-MR traffic peer if unknown), asks the
selector (``select.py``, through the engine's ``Decisions``) or the router for (NI, peer NI),
commits (round-robin stamps, per-attempt deadline ``now + lnd_timeout*(retry_count+1) + 1``
capped by the caller's own transaction timeout, spec §3.4/003) and posts: peer NI credit
(``peertxcredit``), then NI credit (``txcredit``), else the message waits FIFO
(``tx_delayed``, seed 001). A message that waited past its deadline is dropped with
NETWORK_TIMEOUT (spec §1.5 step 1). Right before a ``Transmit`` the LNet fault rules get
their say (``FaultState.tx_check``, spec §8) and the MD's response tracker starts.

A sent message ends in ``finalizer.py`` (``Sender.finalizer``, lib-msg.c ``lnet_finalize``):
the LND's completion, a drop, a simulated error or a failed selection hand it there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from nodes.lnet.actions import Action, Log, Transmit
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.decisions import Decisions
from nodes.lnet.errors import ECANCELED, EHOSTUNREACH, EINVAL, ESHUTDOWN, ETIMEDOUT
from nodes.lnet.events import TxCompleted
from nodes.lnet.fault import EINVAL_TX, FaultState, simulated_error_log
from nodes.lnet.finalizer import TxFinalizer
from nodes.lnet.hdr import LNET_HDR_SIZE, LNET_RESERVED_PORTAL, LNetHdr, MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.loopback import send_loopback
from nodes.lnet.mds import MDTable
from nodes.lnet.msg import NEXT, Msg, MsgInput, MsgPhase
from nodes.lnet.nid import LO_KEY, NID
from nodes.lnet.node import NodeState
from nodes.lnet.peer import PeerTable
from nodes.lnet.route import RouteWait
from nodes.lnet.select import SelectError
from nodes.lnet.timers import MD_RESPONSE
from nodes.lnet.trace import Tracer
from nodes.lnet.tunables import Tunables, attempt_timeout

if TYPE_CHECKING:
    from nodes.lnet.discovery import Discovery
    from nodes.lnet.health import Health
    from nodes.lnet.nets import LocalNets
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.nistate import NIState
    from nodes.lnet.peer import PeerNI
    from nodes.lnet.receive import Receiver
    from nodes.lnet.router import Router


class Sender:
    """The send side of the message lifecycle; ``txs`` are the messages with the LND."""

    def __init__(self, *, node: NodeState, tunables: Tunables, counters: GlobalCounters,
                 local: LocalNets, peers: PeerTable, mds: MDTable, health: Health,
                 nistate: NIState, router: Router, discovery: Discovery, faults: FaultState,
                 decisions: Decisions, tracer: Tracer, ids: Iterator[int]) -> None:
        self.node = node
        self.tunables = tunables
        self.counters = counters
        self.local = local
        self.peers = peers
        self.mds = mds
        self.health = health
        self.nistate = nistate
        self.router = router
        self.discovery = discovery
        self.faults = faults
        self.decisions = decisions
        self.tracer = tracer
        self.ids = ids
        self.timers = mds.timers
        self.finalizer = TxFinalizer(self)  # lnet_finalize of a sent message
        self.txs: dict[int, Msg] = {}
        self.receiver: Receiver | None = None  # wired by the engine (loopback)
        # after a simulated send error: fail_loc 0xe020 closes the conns (wired by the engine)
        self.after_sim_error: Callable[[NID, NID, float], list[Action]] = lambda a, b, c: []

    # ------------------------------------------------------------------ entry points
    def launch(self, msg: Msg, now: float, src: NID | None) -> list[Action]:
        """``LNetPut``/``LNetGet`` once the MD is bound and the message is on the active
        list (``requests.py``): sent, or failed at once when LNet is down."""
        if not self.node.configured:
            return self.finalizer.fail_unsent(msg, now, -ESHUTDOWN, HStatus.LOCAL_ERROR)
        msg.src_nid_param = src
        return self.send(msg, now)

    def respond(self, now: float, mtype: MsgType, rx_ni: LNetNI, req: LNetHdr,
                payload: bytes = b"", mlength: int = 0, rtr: NID | None = None,
                rx_committed: bool = False) -> list[Action]:
        """ACK/REPLY: from the NID the request came to, to the request's source (snd-045);
        ``rtr`` is the previous hop, the gateway a routed response goes back through (§2.1);
        ``rx_committed``: a REPLY, the GET's own message (``Health.check``)."""
        hdr = LNetHdr(dest_nid=req.src_nid, src_nid=rx_ni.nid, dest_pid=req.src_pid,
                      src_pid=self.node.pid, type=mtype, payload_length=len(payload),
                      wmd=req.wmd, match_bits=req.match_bits, mlength=mlength)
        msg = Msg(next(self.ids), mtype, hdr, payload, is_response=True, final_dst=req.src_nid,
                  src_nid_param=rx_ni.nid, rtr_nid_param=rtr, onactivelist=True,
                  rx_committed=rx_committed)
        self.counters.msg_alloc()
        return self.send(msg, now)

    def tx_completed(self, ev: TxCompleted, now: float) -> list[Action]:
        """The LND is done with ``ev.tx_id`` (``lnet_finalize`` from the LND)."""
        msg = self.txs.pop(ev.tx_id, None)
        if msg is None:
            return [Log(level="warning", text=f"completion for unknown tx {ev.tx_id}")]
        if ev.rc == 0 and msg.txni is not None and msg.txpeer is not None:
            # hlth-stt-avg-send-time: commit of this attempt -> the LND's completion
            nsec = int((now - msg.committed_at) * 1e9)
            msg.txni.stats.send_time.add(nsec)
            msg.txpeer.stats.send_time.add(nsec)
        return self.finalizer.finalize_tx(msg, now, ev.rc, ev.hstatus)

    def resolve(self, dst: NID) -> PeerNI:  # the peer NI; a non-MR traffic peer if unknown
        lpni = self.peers.find_lpni(dst)
        return lpni or self.peers.traffic_add(dst, self.local.peer_credits(dst.net))

    def select(self, msg: Msg, lpni: PeerNI) -> tuple[LNetNI, PeerNI]:
        """Run the pathway selection for ``lpni`` (``msg.final_dst``); raises SelectError."""
        src = None
        if msg.src_nid_param is not None:
            src = self.local.ni_by_nid(msg.src_nid_param)
            if src is None or src.is_lo:  # spec §2.8: a source must be one of ours
                raise SelectError(-EINVAL, f"source NID {msg.src_nid_param} is not a local "
                                           "NID")
        if self.router.path.is_remote(lpni, src, msg):  # routed path (spec §2.6)
            msg.fixed_ni = True
            return self.router.path.find_routed_path(msg, lpni, src)
        # the final hop of a forwarded message honours the originator's NID (NMR_DST);
        # one re-aimed from a remote NID onto a local net of an MR peer runs MR selection
        nmr = not lpni.peer.multi_rail or msg.recovery or (
            msg.fwd is not None and lpni.nid.net in self.local.nets)
        msg.fixed_ni = src is not None or msg.fwd is not None
        return self.decisions.pathway(
            lpni, src, self.local.nets, nmr, msg.md_cpt, self.tunables.numa_range,
            msg.hdr.ptl_index == LNET_RESERVED_PORTAL and msg.type in (MsgType.GET, MsgType.PUT),
            msg.is_response)

    def send(self, msg: Msg, now: float) -> list[Action]:
        """``lnet_send``: select, commit, post; selection errors finalize without resend."""
        dst = msg.final_dst
        assert dst is not None
        if dst._net == LO_KEY:  # (``dst.net == LO_NET`` without a Net.__eq__ per message)
            # lib-move.c lnet_select_pathway: only 0@lo is short-cut (lnet_handle_lo_send);
            # our own other NIDs are peers like any other and go through the LND (E1)
            return send_loopback(self, msg, now)
        lpni = self.resolve(dst)
        # discovery gate (spec §2.2 step 5): wait on the peer's lp_dc_pendq if not up to
        # date; a router runs it for a forwarded message's final destination too
        if (waiting := self.discovery.gate(msg, lpni, now)) is not None:
            return waiting
        logs: list[Action] = []
        if msg.fwd is not None:
            logs = self.router.fwd.mr_final_hop(msg)
            assert msg.final_dst is not None
            lpni = self.resolve(msg.final_dst)
        try:
            ni, lpni = self.select(msg, lpni)
        except SelectError as e:
            hs = HStatus.REMOTE_ERROR if e.errno == -EHOSTUNREACH else HStatus.LOCAL_ERROR
            return [*logs, Log(level="error", text=e.descr),
                    *self.finalizer.fail_unsent(msg, now, e.errno, hs)]
        except RouteWait as w:  # gateway discovered on first use (seed 002)
            msg.fire(MsgInput.WAIT_ROUTE)
            return logs + self.router.path.park(msg, w, now)
        self.commit(msg, ni, lpni, now)
        return logs + self.post(msg, now)

    def commit(self, msg: Msg, ni: LNetNI, lpni: PeerNI, now: float) -> None:
        """``lnet_handle_send`` + ``lnet_msg_commit``: RR stamps, deadline, header
        addressing (spec §2.7, §3.4)."""
        peer = lpni.peer
        peer.send_seq += 1
        lpni.peer_net.seq = lpni.seq = peer.send_seq
        self.node.net_seq += 1
        ni.net.seq = ni.seq = self.node.net_seq
        msg.phase = NEXT[msg.phase, MsgInput.COMMIT]
        msg.txni, msg.txpeer = ni, lpni
        msg.tx_committed = True
        msg.committed_at = now
        msg.deadline = self.msg_deadline(ni, now, msg)
        # routed: header dest = final destination; forwarded: the originator's src stays (§2.7)
        dest, msg.rt_dst = msg.rt_dst or lpni.nid, None
        src = msg.hdr.src_nid if msg.fwd is not None else ni.nid
        msg.hdr = msg.hdr.readdressed(src, dest)
        if msg.md is not None and msg.md.rsp_deadline is not None:
            msg.md.rsp_next_hop = lpni

    def msg_deadline(self, ni: LNetNI, now: float, msg: Msg | None = None) -> float:
        """``get_msg_deadline`` (spec §3.4): per-attempt, LND timeout x (retry_count+1) + 1;
        the transaction timeout when the NI's LND has none; a caller-given transaction
        timeout (003 "callers may specify a different transaction timeout") caps it."""
        if ni.lnd_timeout:
            deadline = now + attempt_timeout(ni.lnd_timeout, self.tunables.retry_count)
        else:
            deadline = now + self.tunables.transaction_timeout
        if msg is not None and msg.md is not None and msg.md.user_deadline is not None:
            deadline = min(deadline, msg.md.user_deadline)
        return deadline

    def _drop(self, msg: Msg, ni: LNetNI, lpni: PeerNI, now: float, rc: int,
              hstatus: HStatus) -> list[Action]:
        """``lnet_check_message_drop``; traced as a ``send`` marked ``dropped`` (issue 11)."""
        self.counters.values["drop_count"] += 1
        self.counters.values["drop_length"] += msg.nob
        ni.stats.dropped.bump(msg.type)
        lpni.stats.dropped.bump(msg.type)
        if self.tracer.on:
            self.tracer.send(msg, ni, lpni, self.tunables.retry_count, now, dropped=hstatus.name)
        return self.finalizer.finalize_tx(msg, now, rc, hstatus)

    def post(self, msg: Msg, now: float, *, released: bool = False) -> list[Action]:
        """``lnet_post_send_locked``: peer credit then NI credit, else wait FIFO (spec §1.5);
        ``released``: the message comes back from an LNet delay rule (spec §8.3)."""
        if msg.phase is MsgPhase.TX_DELAYED:
            msg.fire(MsgInput.CREDIT)
        elif msg.phase is MsgPhase.FAULT_DELAYED:
            msg.fire(MsgInput.RELEASE)
        ni, lpni = msg.txni, msg.txpeer
        assert ni is not None and lpni is not None
        if msg.md is not None and msg.md.unlinked and not msg.is_response:
            return self.finalizer.finalize_tx(msg, now, -ECANCELED, HStatus.LOCAL_ABORTED,
                                              no_resend=True)
        if not msg.peertxcredit:
            msg.peertxcredit = True
            lpni.tx_credits -= 1
            lpni.txqnob += msg.nob + LNET_HDR_SIZE
            lpni.min_tx_credits = min(lpni.min_tx_credits, lpni.tx_credits)
            if lpni.tx_credits < 0:
                msg.tx_delayed = True
                msg.fire(MsgInput.QUEUE)
                lpni.txq.append(msg)
                return []
        if not msg.txcredit:  # from the queue of the peer NI's CPT (msg_tx_cpt)
            msg.txcredit = True
            tq = ni.take_tx_credit(lpni.nid)
            if tq.credits < 0:
                msg.tx_delayed = True
                msg.fire(MsgInput.QUEUE)
                tq.delayed.append(msg)
                return []
        if msg.fwd is not None and self.router.alive.next_hop_dead(msg, lpni):
            # a router does not send to a peer NI marked down (spec §1.5 step 1, seed 002)
            return self._drop(msg, ni, lpni, now, -EHOSTUNREACH, HStatus.REMOTE_DROPPED)
        if msg.tx_delayed and now > msg.deadline and msg.fwd is None:
            # past its deadline: dropped (spec §1.5 step 1); routers never are (spec §3.4)
            return self._drop(msg, ni, lpni, now, -ETIMEDOUT, HStatus.NETWORK_TIMEOUT)
        msg.tx_delayed = False
        verdict = self.faults.tx_check(msg, now, released=released)
        if verdict is True:  # an LNet delay rule holds it, credits and all (spec §8.3)
            msg.fire(MsgInput.DELAY)
            return []
        if verdict is not False:  # lnet_send_error_simulation (spec §8.2)
            hs = HStatus(verdict)
            if self.tracer.on:  # the attempt was made on ni/lpni; the rule fails it there
                self.tracer.send(msg, ni, lpni, self.tunables.retry_count, now, dropped=hs.name)
            return [simulated_error_log(msg.hdr, hs),
                    *self.finalizer.finalize_tx(msg, now, EINVAL_TX, hs),
                    *self.after_sim_error(ni.nid, lpni.nid, now)]
        md = msg.md
        if md is not None and md.rsp_deadline is not None and not md.rsp_armed \
                and not msg.is_response:
            # seed 003 hlth-lnt-timeout-after-send: the response tracker starts at the first
            # hand-off to the LND, once per MD (docs/differences.md)
            md.rsp_armed = True
            md.rsp_deadline = at = now + self.tunables.transaction_timeout
            self.timers.arm((MD_RESPONSE, md.handle), at, (md.handle, 0))
        msg.tx_id = tx_id = next(self.ids)
        self.txs[tx_id] = msg
        msg.phase = NEXT[msg.phase, MsgInput.TRANSMIT]
        if self.tracer.on:
            self.tracer.send(msg, ni, lpni, self.tunables.retry_count, now)
        return [Transmit(tx_id=tx_id, ni=ni.nid, lpni=lpni.nid, hdr=msg.hdr, payload=msg.payload)]

    def return_credits(self, msg: Msg, now: float) -> list[Action]:
        """``lnet_return_tx_credits_locked``: give back credits, post the next waiter."""
        actions: list[Action] = []
        ni, lpni = msg.txni, msg.txpeer
        if msg.txcredit and ni is not None and lpni is not None:
            msg.txcredit = False
            tq = ni.give_tx_credit(lpni.nid, msg)
            if tq.credits <= 0 and tq.delayed:
                actions += self.post(tq.delayed.popleft(), now)
        if msg.peertxcredit and lpni is not None:
            msg.peertxcredit = False
            if msg in lpni.txq:
                lpni.txq.remove(msg)
            lpni.tx_credits += 1
            lpni.txqnob -= msg.nob + LNET_HDR_SIZE
            if lpni.tx_credits <= 0 and lpni.txq:
                actions += self.post(lpni.txq.popleft(), now)
        return actions
