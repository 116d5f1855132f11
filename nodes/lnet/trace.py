"""The message trace: ``MsgTrace`` records of sends, resends and completions (TRACE-SCHEMA).

Theory of operation: the send path asks ``Tracer.on`` (one attribute read) before building
anything, so tracing off costs nothing else. While on, each record is appended to ``buffer``;
the engine facade hands the buffer out at the end of the call that produced it, after that
call's other actions (``take``), so every driver sees them with the call's ``now``. A
message gets one ``send`` per Transmit, one ``resend`` per decision to try again and exactly
one ``complete`` (``Msg.traced`` guards the once).
"""

from __future__ import annotations

from typing import Final

from nodes.lnet.actions import Action, MsgTrace
from nodes.lnet.hdr import LNET_RESERVED_PORTAL, MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.msg import Msg
from nodes.lnet.ni import LNetNI
from nodes.lnet.peer import PeerNI

#: ``Enum.name`` is a Python property (a call per read): the names, looked up
_TYPE_NAME: Final[dict[MsgType, str]] = {t: t.name for t in MsgType}
_HS_NAME: Final[dict[HStatus, str]] = {h: h.name for h in HStatus}


def _health(msg: Msg) -> tuple[tuple[str, int], ...] | None:
    ni, lpni = msg.txni, msg.txpeer
    if ni is None or lpni is None:
        return None
    return (("ni", ni.healthv), ("lpni", lpni.healthv))


def _fixed(msg: Msg, lpni: PeerNI) -> bool:
    """Not the selector's free choice: ``msg.fixed_ni``, or a non-MR peer's preferred NI,
    which LNet keeps fatal or not (lib-move.c ``lnet_find_existing_preferred_best_ni``)."""
    if msg.fixed_ni:
        return True
    if lpni.peer.multi_rail and not msg.recovery and msg.fwd is None:
        return False
    if msg.hdr.ptl_index == LNET_RESERVED_PORTAL and msg.type in (MsgType.GET, MsgType.PUT):
        return False
    return any(e.pref_nids for e in lpni.peer_net.lpnis)


class Tracer:
    """``MsgTrace`` records of one engine while ``on``."""

    __slots__ = ("buffer", "on")

    def __init__(self) -> None:
        self.on = False
        self.buffer: list[Action] = []

    def take(self) -> list[Action]:
        out, self.buffer = self.buffer, []
        return out

    def drain_into(self, actions: list[Action]) -> list[Action]:
        """``actions + take()`` for a list the caller owns: the records appended to it (no
        new lists when there are none, the usual case on a node that only forwards)."""
        buffer = self.buffer
        if buffer:
            actions += buffer
            buffer.clear()
        return actions

    def send(self, msg: Msg, ni: LNetNI, lpni: PeerNI, retry_count: int, now: float,
             dropped: str | None = None) -> None:
        """An attempt of ``msg`` from ``ni`` to ``lpni`` (one per attempt): a Transmit, or
        (``dropped``: its hstatus) an attempt dropped at the hand-off to the LND."""
        first = msg.retry_count == 0
        self.buffer.append(MsgTrace(
            event="send", msg=msg.mid, type=_TYPE_NAME[msg.type], src=str(msg.hdr.src_nid),
            dst=str(msg.hdr.dest_nid), ni=str(ni.nid), lpni=str(lpni.nid),
            attempt=msg.retry_count, fixed_ni=_fixed(msg, lpni), forwarded=msg.fwd is not None,
            deadline=msg.deadline,  # each attempt's own: a resend re-commits (spec §3.4)
            retry_count=retry_count if first else None, dropped=dropped, at=now))

    def resend(self, msg: Msg, now: float) -> None:
        """The decision to send ``msg`` again after the attempt that failed with its
        ``hstatus`` (before the retry count moves: ``attempt`` is the next one)."""
        if msg.traced:
            return  # its response tracker already expired: nothing more to say
        self.buffer.append(MsgTrace(
            event="resend", msg=msg.mid, type=_TYPE_NAME[msg.type], src=str(msg.hdr.src_nid),
            dst=str(msg.hdr.dest_nid), attempt=msg.retry_count + 1,
            forwarded=msg.fwd is not None, hstatus=_HS_NAME[msg.hstatus], health=_health(msg),
            at=now))

    def complete(self, msg: Msg, rc: int, now: float, hstatus: str | None = None) -> None:
        """``msg``'s one final outcome on this node (``hstatus``: ``RESPONSE_TIMEOUT`` when
        its response tracker expired before it was finalized)."""
        if msg.traced:
            return
        msg.traced = True
        failed = rc != 0
        self.buffer.append(MsgTrace(
            event="complete", msg=msg.mid, type=_TYPE_NAME[msg.type], src=str(msg.hdr.src_nid),
            dst=str(msg.hdr.dest_nid), forwarded=msg.fwd is not None,
            hstatus=hstatus or _HS_NAME[msg.hstatus], status=rc,
            health=_health(msg) if failed else None, at=now))
