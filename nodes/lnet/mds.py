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

Match entries are kept in post order (``mes``) and indexed: an ME with no ignore bits by
(portal, match bits), one with ignore bits by portal; ``match`` takes the earliest posted of
the two candidates, so the answer is the post-order scan's (``lnet_ptl_match_md``) at the
cost of two lookups. A target MD posted with events (``attach(..., events=True)``) gets a
PUT or GET event per match (``delivered``, ``lnet_md_deliver_event``) and is unlinked, its ME
removed, when its threshold runs out (lib-md.c ``lnet_md_unlinkable``) or on ``unlink``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any, Final

from nodes.lnet.actions import Action, MDEvent
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.hdr import MsgType, Payload, WireHandle
from nodes.lnet.msg import MD, ME, MDOwner, OwnerRole
from nodes.lnet.nid import NID
from nodes.lnet.timers import MD_RESPONSE, MD_USER, Timers

#: a component's handler for its MDs' events: (md, kind, status, payload, source) -> actions
OwnerHandler = Callable[[MD, str, int, Payload, NID | None], list[Action]]
_MD_KINDS: Final = frozenset({MD_RESPONSE, MD_USER})


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
        self._exact: dict[tuple[int, int], list[ME]] = {}  # (portal, bits): no ignore bits
        self._wild: dict[int, list[ME]] = {}  # portal -> MEs with ignore bits
        self._me_of: dict[int, ME] = {}  # target MD handle -> its ME
        self._seq: dict[int, int] = {}  # id(ME) -> post order

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
               sink: bool, events: bool, threshold: int = -1) -> MD:
        """``LNetMEAttach`` + ``LNetMDAttach``: a target MD on a portal; ``threshold`` -1
        is ``LNET_MD_THRESH_INF``, N unlinks it after N matches (``LNET_UNLINK``)."""
        md = MD(next(self.ids), threshold, data=data, sink=sink, events=events)
        self.mds[md.handle] = md
        me = ME(portal, match_bits, ignore_bits, md)
        self.mes.append(me)
        self._seq[id(me)] = md.handle
        self._me_of[md.handle] = me
        if ignore_bits:
            self._wild.setdefault(portal, []).append(me)
        else:
            self._exact.setdefault((portal, match_bits), []).append(me)
        return md

    def _detach(self, handle: int) -> None:
        """Remove the ME of target MD ``handle`` (it was unlinked)."""
        me = self._me_of.pop(handle, None)
        if me is None:
            return
        del self._seq[id(me)]
        self.mes.remove(me)
        index: dict[Any, list[ME]] = self._wild if me.ignore_bits else self._exact
        key = me.portal if me.ignore_bits else (me.portal, me.match_bits)
        index[key].remove(me)
        if not index[key]:
            del index[key]

    def get(self, handle: int) -> MD | None:
        return self.mds.get(handle)

    def match(self, portal: int, match_bits: int) -> MD | None:
        """``lnet_ptl_match_md``: the first live MD (in post order) whose ME matches."""
        exact = self._exact.get((portal, match_bits))
        best = exact[0] if exact else None
        for me in self._wild.get(portal, ()):
            if me.matches(match_bits):
                if best is None or self._seq[id(me)] < self._seq[id(best)]:
                    best = me
                break
        return best.md if best is not None else None

    def delivered(self, md: MD, kind: str, *, source: NID | None, initiator: NID | None,
                  target: NID | None, payload: Payload = b"", mlength: int = 0
                  ) -> list[Action]:
        """A PUT or GET matched target MD ``md`` (``lnet_md_deliver_event``): its event, if
        posted with events; the last one its threshold allows unlinks it."""
        if md.threshold > 0:
            md.threshold -= 1
            if md.threshold == 0:
                return self.final(md, kind, 0, source=source, initiator=initiator,
                                  payload=payload, mlength=mlength, target=target)
        if not md.events:
            return []
        return self.event(md, kind, 0, source=source, initiator=initiator, payload=payload,
                          mlength=mlength, target=target)

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
              payload: Payload = b"", mlength: int = 0,
              target: NID | None = None) -> list[Action]:
        """Deliver an event on ``md``: to the upper layer, or to the owner's component."""
        if md.unlinked and not unlinked:
            return []
        if md.owner is not None:
            return self.owners[md.owner.role](md, kind, status, payload, source)
        return [MDEvent(handle=md.handle, kind=kind, status=status, unlinked=unlinked,
                        source=source, initiator=initiator, payload=payload,
                        mlength=mlength, target=target)]

    def final(self, md: MD, kind: str, status: int, *, source: NID | None = None,
              initiator: NID | None = None, payload: Payload = b"",
              mlength: int = 0, target: NID | None = None) -> list[Action]:
        """The MD's last event (exactly once): unlink it (and its ME) and detach its
        response tracker. A target MD posted without events stays silent."""
        if md.unlinked:
            return []
        md.unlinked = True
        self.mds.pop(md.handle, None)
        if md.handle in self._me_of:
            self._detach(md.handle)
            if not md.events:
                return []
        if md.rsp_deadline is not None:
            md.rsp_deadline = None
            self.timers.cancel((MD_RESPONSE, md.handle))
            self.counters.values["rst_alloc"] = max(0, self.counters.values["rst_alloc"] - 1)
        if md.user_deadline is not None:
            self.timers.cancel((MD_USER, md.handle))
        out = self.event(md, kind, status, unlinked=True, source=source, initiator=initiator,
                         payload=payload, mlength=mlength, target=target)
        # an unlinked MD's message is never looked up again (its owner had it just now): the
        # MD <-> Msg cycle broken, both go by reference counting instead of living until the
        # collector finds them (each PUT's MD, Msg, header, wire handle)
        md.msg = None
        return out


def id_source(start: int = 2) -> Iterator[int]:
    """One counter for MD handles, message ids and tx ids (as ``new_id`` was)."""
    return itertools.count(start)
