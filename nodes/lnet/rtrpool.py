"""Forwarding on a router: router credits, buffer pools, the final hop (seed 001 "Router
Message Processing", spec §1.5, §1.6, §2.2, §6.6).

Theory of operation. A message for another node takes a router credit of the sending peer NI
(``lpni_rtrcredits``, queued FIFO on the peer's ``rtrq``), then a buffer from the smallest pool
that fits (tiny/small/large, queued FIFO on the pool) of its receive CPT, is sent on with full
reselection
(resends may pick another local NI or gateway, seed 003 hlth-lnt-router-any-ni) and gives both
back when that send finalizes. Routers never drop on deadline. Like any send, a forwarded PUT
or GET first passes the discovery gate (``lnet_select_pathway`` runs it for ``msg_routing``
too, spec §2.2 step 5): the router discovers the final destination's peer on first use,
holding buffer and credit while the message waits on its ``lp_dc_pendq``.

Pools per CPT (router.c ``lnet_rtrpools_alloc``): each CPT of the node's table has its own
three pools, of ``max(total // ncpts, 1)`` buffers each (``lnet_nrb_*_calculate``); a resize
sets every CPT's pool to that share (``lnet_rtrpools_adjust_helper``). A message takes its
buffer from the pools of ``msg_rx_cpt``, the CPT of the NID it came from on the receiving NI
(``lnet_parse``: ``lnet_nid2cpt(from_nid, ni)``; ``lnet_msg2bufpool``), so one CPT's pool can
run dry and queue while another's has credits, as in real LNet.

Final hop (``lnet_mr_forwarding_allowed``, lib-move.c): when the destination is on a local net
the router honours the originator's choice of peer NI, unless originator and destination are
both Multi-Rail and the chosen peer NI is down or below full health: then it sends a PUT or
GET to the destination's best other NI (healthiest, UP) on a local net; an ACK or REPLY always
goes to the addressed NI (``lnet_handle_any_mr_dsta``, SND_RESP). The decision is made for
every attempt: a resend targets the peer NI last tried (``lnet_resend_msg_locked`` sets
``msg_target`` to the header's dest_nid) and may be re-aimed again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from nodes.lnet.actions import Action, Log
from nodes.lnet.cpt import cpt_of_nid
from nodes.lnet.hdr import LNET_MTU, LNetHdr, MsgType, Payload
from nodes.lnet.msg import Forwarding, Msg, MsgInput, MsgPhase
from nodes.lnet.ni import LNET_NI_STATUS_UP
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import PeerNI
    from nodes.lnet.router import Router

PAGE_SIZE: Final = 4096
#: (name, npages) of the three router buffer pools (spec §1.6)
POOLS: Final = (("tiny", 0), ("small", 1), ("large", LNET_MTU // PAGE_SIZE))
POOL_PARAMS: Final = {"tiny_buffers": 0, "small_buffers": 1, "large_buffers": 2}


@dataclass(eq=False, slots=True)
class BufferPool:
    """``lnet_rtrbufpool``: ``credits`` may go negative; waiters queue FIFO in ``msgs``."""

    name: str
    npages: int
    nbuffers: int
    credits: int
    mincredits: int
    msgs: deque[Msg] = field(default_factory=deque)

    def show(self) -> dict[str, int]:
        return {"npages": self.npages, "nbuffers": self.nbuffers, "credits": self.credits,
                "mincredits": self.mincredits}


class RouterPools:
    """Part of ``Router``: buffers, router credits and forwarding."""

    def __init__(self, r: Router) -> None:
        self.r = r
        #: ``ln_rtrpools``: per CPT, the tiny, small and large pool
        self.cpt_pools: list[list[BufferPool]] | None = None
        #: waiters woken by returned credits, run by the outermost ``return_rx_credits``
        self._woken: deque[tuple[bool, Msg]] = deque()
        self._waking = False

    @property
    def pools(self) -> list[BufferPool] | None:
        """Every CPT's pools, CPT by CPT (None until allocated)."""
        if self.cpt_pools is None:
            return None
        return [pool for pools in self.cpt_pools for pool in pools]

    def _share(self, total: int) -> int:
        """``lnet_nrb_*_calculate``: a CPT's share of a pool's buffers, at least one."""
        return max(total // len(self.cpt_pools or [[]]), 1)

    def pools_resize(self, name: str, value: int, now: float) -> list[Action]:
        """``set tiny_buffers|small_buffers|large_buffers N`` on a router (spec §1.6):
        each CPT's pool gets its share (``lnet_rtrpools_adjust_helper``)."""
        actions: list[Action] = []
        for pools in self.cpt_pools or []:
            actions += self._resize(pools[POOL_PARAMS[name]], self._share(value), now)
        return actions

    def _resize(self, pool: BufferPool, value: int, now: float) -> list[Action]:
        delta = value - pool.nbuffers
        pool.nbuffers = value
        actions: list[Action] = []
        if delta < 0:
            pool.credits += delta  # shrinking is lazy: fewer buffers come back
            pool.mincredits = min(pool.mincredits, pool.credits)
        for _ in range(max(delta, 0)):  # each new buffer is a returned credit
            pool.credits += 1
            if pool.credits <= 0 and pool.msgs:
                actions += self.forward_send(pool.msgs.popleft(), now)
        return actions

    def alloc_pools(self) -> None:
        """``lnet_rtrpools_alloc``: three pools on each CPT of the node's table."""
        if self.cpt_pools is None:
            t = self.r.tunables
            ncpts = self.r.local.cpt_table.ncpts
            sizes = [max(n // ncpts, 1)
                     for n in (t.tiny_buffers, t.small_buffers, t.large_buffers)]
            self.cpt_pools = [[BufferPool(name, npages, n, n, n)
                               for (name, npages), n in zip(POOLS, sizes, strict=True)]
                              for _cpt in range(ncpts)]

    def pools_idle(self) -> bool:
        return all(p.credits == p.nbuffers and not p.msgs for p in self.pools or [])

    def forward(self, ni: LNetNI, lpni: PeerNI, hdr: LNetHdr, payload: Payload,
                now: float) -> list[Action]:
        """A message for another node arrived on a router (seed 001, spec §1.5, §6.6):
        committed for receiving, a peer router credit taken (``peerrtrcredit``)."""
        msg = Msg(next(self.r.ids), hdr.type, hdr, payload, final_dst=hdr.dest_nid,
                  fwd=Forwarding(ni, lpni), rx_committed=True, onactivelist=True,
                  peerrtrcredit=True)
        self.r.counters.msg_alloc()
        lpni.rtr_credits -= 1
        lpni.min_rtr_credits = min(lpni.min_rtr_credits, lpni.rtr_credits)
        if lpni.rtr_credits < 0:
            msg.fire(MsgInput.WAIT_RTRCREDIT)
            lpni.peer.rtrq.append(msg)  # wait for a router credit (lp_rtrq)
            return []
        return self.take_buffer(msg, now)

    def pool_for(self, nob: int, cpt: int = 0) -> BufferPool:
        """``lnet_msg2bufpool``: of CPT ``cpt``'s pools, the smallest that holds the payload."""
        assert self.cpt_pools is not None
        pools = self.cpt_pools[cpt]
        for pool in pools:
            if pool.npages * PAGE_SIZE >= nob:
                return pool
        return pools[-1]

    def take_buffer(self, msg: Msg, now: float) -> list[Action]:
        if self.cpt_pools is None:
            self.alloc_pools()
        assert msg.fwd is not None
        fwd = msg.fwd
        pool = self.pool_for(msg.nob, cpt_of_nid(fwd.rxpeer.nid, fwd.rxni.cpts))
        msg.fwd.pool = pool
        msg.rtrcredit = True
        pool.credits -= 1
        pool.mincredits = min(pool.mincredits, pool.credits)
        if pool.credits < 0:
            msg.fire(MsgInput.WAIT_BUFFER)
            pool.msgs.append(msg)  # wait for a buffer (rbp_msgs), FIFO
            return []
        return self.forward_send(msg, now)

    def forward_send(self, msg: Msg, now: float) -> list[Action]:
        self.r.counters.values["route_count"] += 1
        self.r.counters.values["route_length"] += msg.nob
        if msg.phase is not MsgPhase.NEW:
            msg.fire(MsgInput.READY)
        return self.r.sender.send(msg, now)

    def mr_final_hop(self, msg: Msg) -> list[Action]:
        """``lnet_mr_forwarding_allowed``: re-aim the final hop at a healthier NI of an MR
        destination (lib-move.c); the header's dest_nid follows at commit (spec §2.7).

        Called by ``send.send`` after the discovery gate and by ``TxFinalizer.resend`` for every
        attempt, as ``lnet_select_pathway`` decides it per send."""
        eng = self.r
        dst = msg.final_dst
        if dst is None or dst.net not in eng.nets:
            return []  # not the final hop
        if msg.type in (MsgType.ACK, MsgType.REPLY):
            return []  # SND_RESP: an ACK/REPLY goes to the exact dst NID (spec §2.3)
        lpni = eng.peers.find_lpni(dst)
        src = eng.peers.find_lpni(msg.hdr.src_nid)
        if lpni is None or src is None or not src.peer.multi_rail \
                or not lpni.peer.multi_rail:
            return []
        if lpni.ns_status == LNET_NI_STATUS_UP and lpni.healthv >= LNET_MAX_HEALTH_VALUE:
            return []
        cands = [p for p in lpni.peer.lpnis if p.nid.net in eng.nets and eng.nets[p.nid.net].nis
                 and p.ns_status == LNET_NI_STATUS_UP]
        if not cands:
            return []
        best = min(cands, key=lambda p: (-p.healthv, p.sel_priority, -p.tx_credits, p.seq))
        if best is lpni:
            return []
        msg.final_dst = best.nid
        return [Log(level="info", text=f"MR forwarding {msg.type.name} for {dst} to "
                                       f"{best.nid}")]

    def drop_forward(self, msg: Msg, now: float, why: str) -> list[Action]:
        self.r.counters.values["drop_count"] += 1
        self.r.counters.values["drop_length"] += msg.nob
        self.r.counters.msg_free()
        return [Log(level="info", text=f"dropping routed {msg.type.name} to {msg.final_dst}: "
                                       f"{why}"), *self.return_rx_credits(msg, now)]

    def return_rx_credits(self, msg: Msg, now: float) -> list[Action]:
        """``lnet_return_rx_credits_locked``: buffer, then router credit; wake the next.

        A woken message whose send fails at once comes back here through ``finalize_tx``
        and wakes the one after it: the waiters are run in a loop by the outermost call, so
        a long queue failing at once (a peer just gone) cannot exhaust the stack."""
        fwd = msg.fwd
        assert fwd is not None
        pool, fwd.pool = fwd.pool, None
        if msg.rtrcredit and pool is not None:
            msg.rtrcredit = False
            pool.credits += 1
            if pool.credits <= 0 and pool.msgs:
                self._woken.append((True, pool.msgs.popleft()))
        if msg.peerrtrcredit:
            msg.peerrtrcredit = False
            lpni = fwd.rxpeer
            lpni.rtr_credits += 1
            if lpni.rtr_credits <= 0 and lpni.peer.rtrq:
                self._woken.append((False, lpni.peer.rtrq.popleft()))
        msg.rx_committed = False
        if self._waking:
            return []
        actions: list[Action] = []
        self._waking = True
        try:
            while self._woken:
                has_buffer, woken = self._woken.popleft()
                actions += (self.forward_send(woken, now) if has_buffer
                            else self.take_buffer(woken, now))
        finally:
            self._waking = False
        return actions

    def routing_show(self) -> dict[str, Any]:
        """``lnetctl routing show``: nothing until the pools have been allocated."""
        if self.cpt_pools is None:
            return {}
        t = self.r.tunables
        cpts: list[dict[str, Any]] = [{f"cpt[{i}]": {p.name: p.show() for p in pools}}
                                      for i, pools in enumerate(self.cpt_pools)]
        return {"routing": [*cpts, {"enable": int(self.r.enabled)}],
                "buffers": {"tiny": t.tiny_buffers, "small": t.small_buffers,
                            "large": t.large_buffers}}
