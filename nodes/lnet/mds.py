"""Memory descriptors of one node: binding, matching, events, response trackers (spec §3.4,
§4.1-4.4; lib-md.c, lib-me.c, lib-msg.c ``lnet_attach_rsp_tracker``).

Theory of operation: ``MDTable`` owns every MD and ME of the node and is the only place an MD
event is made. ``event`` delivers one ``lnet_event``: to the upper layer as an ``MDEvent``, or,
for an MD the engine sent for itself, to the component registered for the MD's owner role
(recovery, discovery, router; ``register``). ``final`` is the MD's last event (exactly once):
it unlinks the MD and detaches its response tracker.

Deadlines live in the engine's timer structure (``timers.py``): the caller's timeout
(``MD_USER``) from bind time, the response tracker (``MD_RESPONSE``) from the message's first
hand-off to the LND (seed 003 hlth-lnt-timeout-after-send; a resend keeps it, spec §3.4).
Ties break by MD handle, the response deadline first, as one heap of (time, handle) did.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator

from nodes.lnet.actions import Action, MDEvent
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.hdr import MsgType, WireHandle
from nodes.lnet.msg import MD, ME, MDOwner, OwnerRole
from nodes.lnet.nid import NID
from nodes.lnet.timers import MD_RESPONSE, MD_USER, Timers

#: a component's handler for its MDs' events: (md, kind, status, payload, source) -> actions
OwnerHandler = Callable[[MD, str, int, bytes, NID | None], list[Action]]
_MD_KINDS = frozenset({MD_RESPONSE, MD_USER})


class MDTable:
    """The node's MDs (by handle) and match entries (``ln_portals``, in post order)."""

    def __init__(self, ids: Iterator[int], timers: Timers, counters: GlobalCounters,
                 incarnation: int) -> None:
        self.ids = ids
        self.timers = timers
        self.counters = counters
        self.incarnation = incarnation
        self.mds: dict[int, MD] = {}
        self.mes: list[ME] = []
        self.owners: dict[OwnerRole, OwnerHandler] = {}

    def register(self, role: OwnerRole, handler: OwnerHandler) -> None:
        """Events of MDs owned by ``role`` go to ``handler`` (wired by the engine)."""
        self.owners[role] = handler

    # ------------------------------------------------------------------ binding
    def bind(self, now: float, *, threshold: int, data: bytes = b"",
             timeout: float | None = None, op: MsgType | None = None,
             owner: MDOwner | None = None, track: bool = False) -> MD:
        """``LNetMDBind``; ``timeout`` arms the caller's deadline (lnetctl ping --timeout);
        ``track`` attaches a response tracker (``track``)."""
        md = MD(next(self.ids), threshold, data=data, sent_at=now, op=op, owner=owner)
        self.mds[md.handle] = md
        if track:
            self.track(md)
        if timeout is not None:
            md.user_deadline = now + timeout
            self.timers.arm((MD_USER, md.handle), md.user_deadline, (md.handle, 1))
        return md

    def attach(self, portal: int, match_bits: int, ignore_bits: int, *, data: bytes,
               sink: bool, events: bool) -> MD:
        """``LNetMEAttach`` + ``LNetMDAttach``: a target MD on a portal."""
        md = MD(next(self.ids), -1, data=data, sink=sink, events=events)
        self.mds[md.handle] = md
        self.mes.append(ME(portal, match_bits, ignore_bits, md))
        return md

    def get(self, handle: int) -> MD | None:
        return self.mds.get(handle)

    def match(self, portal: int, match_bits: int) -> MD | None:
        """``lnet_ptl_match_md``: the first live MD whose ME matches."""
        for me in self.mes:
            if me.portal == portal and me.matches(match_bits) and not me.md.unlinked:
                return me.md
        return None

    def lookup(self, wmd: WireHandle) -> MD | None:
        """``lnet_wire_handle2md``: the initiator MD a response names, if still live."""
        if wmd.interface_cookie != self.incarnation:
            return None
        md = self.mds.get(wmd.object_cookie)
        return None if md is None or md.unlinked else md

    # ------------------------------------------------------------------ response tracking
    def track(self, md: MD) -> None:
        """``lnet_attach_rsp_tracker``: tracked, armed at the first hand-off (``arm``)."""
        md.rsp_deadline = math.inf
        self.counters.values["rst_alloc"] += 1

    def arm(self, md: MD, at: float) -> None:
        """The first hand-off to the LND starts the response deadline, once per MD."""
        md.rsp_armed = True
        md.rsp_deadline = at
        self.timers.arm((MD_RESPONSE, md.handle), at, (md.handle, 0))

    def expired(self, now: float) -> list[tuple[MD, bool]]:
        """MDs whose deadline passed, in deadline order: (md, True for a response timeout)."""
        out: list[tuple[MD, bool]] = []
        for kind, handle in self.timers.due(now, _MD_KINDS):
            md = self.mds.get(handle) if isinstance(handle, int) else None
            if md is not None and not md.unlinked:
                out.append((md, kind == MD_RESPONSE))
        return out

    # ------------------------------------------------------------------ events
    def event(self, md: MD, kind: str, status: int, *, unlinked: bool = False,
              source: NID | None = None, initiator: NID | None = None,
              payload: bytes = b"", mlength: int = 0) -> list[Action]:
        """Deliver an event on ``md``: to the upper layer, or to the owner's component."""
        if md.unlinked and not unlinked:
            return []
        if md.owner is not None:
            return self.owners[md.owner.role](md, kind, status, payload, source)
        return [MDEvent(handle=md.handle, kind=kind, status=status, unlinked=unlinked,
                        source=source, initiator=initiator, payload=payload,
                        mlength=mlength)]

    def final(self, md: MD, kind: str, status: int, *, source: NID | None = None,
              initiator: NID | None = None, payload: bytes = b"",
              mlength: int = 0) -> list[Action]:
        """The MD's last event (exactly once): unlink it and detach its response tracker."""
        if md.unlinked:
            return []
        md.unlinked = True
        self.mds.pop(md.handle, None)
        if md.rsp_deadline is not None:
            md.rsp_deadline = None
            self.timers.cancel((MD_RESPONSE, md.handle))
            self.counters.values["rst_alloc"] = max(0, self.counters.values["rst_alloc"] - 1)
        if md.user_deadline is not None:
            self.timers.cancel((MD_USER, md.handle))
        return self.event(md, kind, status, unlinked=True, source=source,
                          initiator=initiator, payload=payload, mlength=mlength)


def id_source(start: int = 2) -> Iterator[int]:
    """One counter for MD handles, message ids and tx ids (as ``new_id`` was)."""
    return itertools.count(start)
