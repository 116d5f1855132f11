"""``lnet_finalize``'s container: a finalization that starts while another one runs waits
for it, instead of running inside it.

Theory of operation: lib-msg.c ``lnet_finalize`` puts a message on its CPT's
``msc_finalizing`` list and returns at once when a finalizer is already at work on that
container; the finalizer's loop takes the message next. So finalizing one message never
recurses into finalizing the next, however long the chain: returning a message's credits
posts the next waiter (``lnet_return_tx_credits_locked``), which may be dropped for having
waited past its deadline (``lnet_post_send_locked``), which finalizes it, which returns its
credits, and so on down a queue of hundreds. Here that chain once ran deeper than Python's
stack (explore on mr-routers.yaml, seeds 225, 503, 843 and 962: RecursionError in
``finalize_tx``). The jobs run in the order they were queued, the first one first.

A job is the arguments of ``TxFinalizer._finalize_tx``, called on it directly (a native call
in the compiled engine: a bound method and ``*args`` per message were a generic call that
boxed every argument, issue 13's lst ping profile).

``TxFinalizer`` is ``lnet_finalize`` for a sent message (split from the send path, send.py,
as lib-msg.c is from lib-move.c; it uses the sender's credits, selection and posting):
credits back (posting the next waiter), health check (``Health.check``), which may resend
(decommitted, sent again with its source/router parameters, full reselection; a resend whose
selection fails ends the message, ``lnet_resend_pending_msgs_locked``).
Otherwise the stats are decommitted (only on success) and the initiator's MD gets its event.
Selection failures never commit: no credits, no health, no resend (spec §2.8). Every message
ends in one final MD event (spec §4.4) and, while tracing, one ``MsgTrace`` ``complete``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from nodes.lnet.actions import Action, Log
from nodes.lnet.hdr import MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.msg import NEXT, MsgInput
from nodes.lnet.route import RouteWait
from nodes.lnet.select import SelectError

if TYPE_CHECKING:
    from nodes.lnet.msg import Msg
    from nodes.lnet.nid import NID
    from nodes.lnet.send import Sender

#: ``_finalize_tx``'s arguments: message, now, rc, hstatus, no_resend
Job = tuple["Msg", float, int, HStatus, bool]


class FinalizeContainer:
    """One engine's container: ``pending`` is not None while a finalizer runs."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: deque[Job] | None = None

    def finalize(self, sender: TxFinalizer, msg: Msg, now: float, rc: int, hstatus: HStatus,
                 no_resend: bool) -> list[Action]:
        """``sender._finalize_tx(...)`` now if no finalizer runs (and then every job queued
        meanwhile, in order), else queued for the running one; the actions of every job it
        ran."""
        if self.pending is not None:
            self.pending.append((msg, now, rc, hstatus, no_resend))
            return []
        self.pending = pending = deque[Job]()
        try:
            actions = sender._finalize_tx(msg, now, rc, hstatus, no_resend)
            while pending:
                m, t, r, h, n = pending.popleft()
                actions += sender._finalize_tx(m, t, r, h, n)
        finally:
            self.pending = None
        return actions


class TxFinalizer:
    """``lnet_finalize`` of one engine's sent messages, one at a time (``container``)."""

    __slots__ = ("container", "sender")

    def __init__(self, sender: Sender) -> None:
        self.sender = sender
        self.container = FinalizeContainer()

    def resend(self, msg: Msg, now: float) -> list[Action]:
        """``lnet_resend_msg_locked`` + ``lnet_resend_pending_msgs_locked`` (spec §3.3); dbg-115:
        one error line names the failed NID pair and hstatus and the new pair (real LNet: D_NET
        lines only; the seed asks for an error)."""
        failed = (f"{msg.type.name} to {msg.final_dst}: send from "
                  f"{msg.txni.nid if msg.txni else '?'} to "
                  f"{msg.txpeer.nid if msg.txpeer else '?'} failed ({msg.hstatus.name})")
        if self.sender.tracer.on:
            self.sender.tracer.resend(msg, now)
        msg.fire(MsgInput.RESEND)
        msg.retry_count += 1
        msg.tx_committed = False
        msg.tx_delayed = False
        logs: list[Action] = []
        if msg.fwd is not None:
            # the target becomes the header's dest_nid (the peer NI last tried) and the MR
            # forwarding decision is made again for it (lnet_resend_msg_locked -> lnet_send)
            msg.final_dst = msg.hdr.dest_nid
            logs = self.sender.router.fwd.mr_final_hop(msg)
        assert msg.final_dst is not None
        try:
            ni, lpni = self.sender.select(msg, self.sender.resolve(msg.final_dst))
        except SelectError as e:
            return [*logs, Log(level="error", text=f"{failed}; cannot resend: Error sending "
                                                   f"{msg.type.name} to {msg.final_dst}: "
                                                   f"{e.errno}"),
                    *self.fail_unsent(msg, now, e.errno, HStatus.LOCAL_ERROR)]
        except RouteWait as w:
            msg.fire(MsgInput.WAIT_ROUTE)
            return logs + self.sender.router.path.park(msg, w, now)
        self.sender.counters.values["resend_count"] += 1
        self.sender.commit(msg, ni, lpni, now)
        return [*logs, Log(level="error", text=f"{failed}; resending from {ni.nid} to "
                                               f"{lpni.nid} (try {msg.retry_count + 1})"),
                *self.sender.post(msg, now)]

    def finalize_tx(self, msg: Msg, now: float, rc: int, hstatus: HStatus, *,
                    no_resend: bool = False) -> list[Action]:
        """``lnet_finalize`` of a sent message, after the one in progress if any."""
        return self.container.finalize(self, msg, now, rc, hstatus, no_resend)

    def _finalize_tx(self, msg: Msg, now: float, rc: int, hstatus: HStatus,
                     no_resend: bool) -> list[Action]:
        """Credits, health, maybe resend, stats, events."""
        msg.hstatus = hstatus
        msg.no_resend = msg.no_resend or no_resend
        actions = self.sender.return_credits(msg, now)
        ni, lpni = msg.txni, msg.txpeer
        if lpni is not None and hstatus != HStatus.OK:
            self.sender.router.alive.tx_failed(lpni, hstatus)  # LND peer-down notification (002)
        if msg.tx_committed and ni is not None and lpni is not None and not ni.is_lo:
            resend, logs = self.sender.health.check(msg, now)
            # dbg-110: a status moved by this health change is logged with its cause (§3.1)
            actions += logs
            if self.sender.nistate.status_moved(ni):
                actions += self.sender.nistate.log_status(ni, hstatus.name)
            if resend:
                return actions + self.resend(msg, now)
        msg.tx_committed = False
        if msg.fwd is not None:  # router buffer and credit back (spec §1.5)
            actions += self.sender.router.fwd.return_rx_credits(msg, now)
        if rc == 0:
            # lnet_msg_decommit_tx: only successful sends are counted
            self.sender.counters.values["send_count"] += 1
            if msg.type == MsgType.PUT:
                self.sender.counters.values["send_length"] += msg.nob
            egress = (msg.type == MsgType.PUT and msg.retry_count == 0 and msg.md is not None
                      and not msg.is_response)
            for x in (ni, lpni):  # (a generator here compiled to a list per message)
                if x is not None:
                    x.stats.sent.bump(msg.type)
                    if egress:
                        x.stats.put_egress.add(int((now - msg.committed_at) * 1e9))
        return actions + self.decommit(msg, now, rc, ni.nid if ni else None)

    def fail_unsent(self, msg: Msg, now: float, rc: int, hstatus: HStatus) -> list[Action]:
        """Selection failed: never committed, so no credits, no health, no resend (§2.8)."""
        msg.hstatus = hstatus
        msg.no_resend = True
        # a router simply frees it (spec §2.8)
        actions = self.sender.router.fwd.return_rx_credits(msg, now) if msg.fwd is not None else []
        return actions + self.decommit(msg, now, rc, None)

    def decommit(self, msg: Msg, now: float, rc: int, source: NID | None) -> list[Action]:
        """Off the active list, finalized: the trace's ``complete`` and the MD's SEND."""
        self.sender.counters.msg_free()
        msg.onactivelist = False
        msg.phase = NEXT[msg.phase, MsgInput.FINALIZE]
        if self.sender.tracer.on:
            self.sender.tracer.complete(msg, rc, now)
        md = msg.md
        if md is None or msg.is_response:
            return []
        if rc != 0 or md.threshold <= 1:
            return self.sender.mds.final(md, "SEND", rc, source=source)
        md.threshold -= 1
        return self.sender.mds.event(md, "SEND", 0, source=source)

