"""srpc's core: LNet plumbing, events, counters (lnet/selftest/rpc.c), sans-I/O.

Theory of operation. srpc is lnet_selftest's RPC layer; ``rpcclient`` and ``rpcserver`` are
its two sides, this module what they share. Requests go to a service's portal with the
service id as match bits; replies and bulk go to ``SRPC_RDMA_PORTAL`` with match bits the
client made unique (``srpc_next_id``: a counter started from the clock's seconds << 48, so
a restarted node does not reuse them). ``passive`` posts a threshold-1 target MD with events
(``srpc_post_passive_rdma``), ``active`` PUTs without ACK or GETs (``srpc_post_active_rdma``);
each MD handle maps to the callback its events go to (``handles``, what the node driver
routes by). An LNet event with an error other than cancellation counts in ``errors``; an
UNLINK fires an event with -EINTR (``srpc_lnet_ev_handler``). The counters are
``struct srpc_counters``.

Everything happens inside calls from ``node.Selftest`` (an MD event, a timer): engine calls
append their actions to ``out``. Engine failures are events too (a SEND with a status), as in
LNet; nothing here raises.
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from errno import ECANCELED, EINTR

from nodes.lnet.actions import Action, MDEvent
from nodes.lnet.engine import LNetEngine
from nodes.lnet.nid import NID
from nodes.selftest.timers import TimerHeap
from nodes.selftest.wire import SRPC_RDMA_PORTAL

log = logging.getLogger("lnet.selftest")


@dataclass(slots=True)
class Counters:
    """``struct srpc_counters`` (the node's, ``srpc_get_counters``)."""

    errors: int = 0
    rpcs_sent: int = 0
    rpcs_rcvd: int = 0
    rpcs_dropped: int = 0
    rpcs_expired: int = 0
    bulk_get: int = 0
    bulk_put: int = 0


@dataclass(init=False, slots=True)
class Ev:
    """``struct srpc_event``: fired once its MD's (final) event came, with its status."""

    fired: bool = True
    status: int = 0
    unlink: bool = False

    # (written out, as Bulk's: compiled, where the dataclass one runs as Python; three per RPC)
    def __init__(self, fired: bool = True, status: int = 0, unlink: bool = False) -> None:
        self.fired, self.status, self.unlink = fired, status, unlink


@dataclass(init=False, eq=False, slots=True)
class Bulk:
    """``struct srpc_bulk``: ``length`` bytes at ``offset`` into the first page; a ``sink``
    receives, a source holds ``data``. ``data`` of a sink is what arrived, unless ``keep`` is
    False: then nobody reads it (brw ``check=none``) and it is dropped on arrival, as a real
    client's pages are simply written over by the next RPC (the LND reuses the buffer at
    once instead of holding one per RPC in flight)."""

    length: int
    sink: bool
    offset: int = 0
    data: bytes | memoryview = b""
    mdh: int | None = None
    keep: bool = True

    def __init__(self, length: int, sink: bool, offset: int = 0,
                 data: bytes | memoryview = b"", mdh: int | None = None,
                 keep: bool = True) -> None:
        self.length, self.sink, self.offset, self.data = length, sink, offset, data
        self.mdh, self.keep = mdh, keep


class State(enum.Enum):
    """``enum lsr_swi_state``, the states an RPC's work item goes through."""

    NEWBORN = "newborn"
    REQUEST_SUBMITTED = "request submitted"
    REQUEST_SENT = "request sent"
    REPLY_RECEIVED = "reply received"
    BULK_STARTED = "bulk started"
    REPLY_SUBMITTED = "reply submitted"
    DONE = "done"


class Srpc:
    """One node's srpc plumbing: counters, the MD handles it waits on, the ids."""

    def __init__(self, engine: LNetEngine, timers: TimerHeap, first_id: int) -> None:
        self.engine = engine
        self.timers = timers
        self.out: list[Action] = []
        self.now = 0.0
        self.counters = Counters()
        #: MD handle -> what its events go to (``node.Selftest.handles`` is this dict)
        self.handles: dict[int, Callable[[MDEvent], None]] = {}
        self._ids = itertools.count(first_id + 1)  # srpc_next_id (rpc_matchbits)

    # ------------------------------------------------------------------ LNet plumbing
    def next_id(self) -> int:
        return next(self._ids) & 0xFFFF_FFFF_FFFF_FFFF

    def passive(self, bits: int, cb: Callable[[MDEvent], None], *, data: bytes = b"",
                 portal: int = SRPC_RDMA_PORTAL, threshold: int = 1) -> int:
        """``srpc_post_passive_rdma``: a target MD with events."""
        h = self.engine.attach_me(portal, bits, 0, data=data, sink=not data, events=True,
                                  threshold=threshold)
        self.handles[h] = cb
        return h

    def active(self, portal: int, bits: int, peer: NID, self_nid: NID | None,
                cb: Callable[[MDEvent], None], *, payload: bytes | None = None,
                length: int = 0) -> int:
        """``srpc_post_active_rdma``: a PUT without ACK of ``payload``, or a GET."""
        if payload is not None:
            h, acts = self.engine.put(self.now, peer, payload=payload, portal=portal,
                                      match_bits=bits, ack=False, src=self_nid)
        else:
            h, acts = self.engine.get(self.now, peer, length=length, portal=portal,
                                      match_bits=bits, src=self_nid)
        self.handles[h] = cb
        self.out += acts
        return h

    def unlink(self, h: int | None) -> None:
        """``LNetMDUnlink``: its final UNLINK event comes back as an action."""
        if h is not None and h in self.handles:
            self.out += self.engine.unlink(self.now, h)

    def on_md_event(self, ev: MDEvent) -> None:
        cb = self.handles.get(ev.handle)
        if cb is None:
            return
        if ev.unlinked:
            del self.handles[ev.handle]
        if ev.status and ev.status != -ECANCELED:  # srpc_lnet_ev_handler: cancellation is none
            self.counters.errors += 1
            log.debug("LNet event status %d type %s, RPC errors %d", ev.status, ev.kind,
                      self.counters.errors)
        cb(ev)

    @staticmethod
    def fire(e: Ev, ev: MDEvent) -> None:
        e.fired, e.unlink = True, ev.kind == "UNLINK"
        e.status = -EINTR if e.unlink else ev.status

