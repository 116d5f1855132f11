"""srpc's client side: one RPC from post to done (lnet/selftest/rpc.c ``srpc_send_rpc``).

Theory of operation: ``post`` arms the RPC's expiry timer (``rpc_timeout``), posts the reply
buffer and the passive bulk (``srpc_prepare_reply``/``srpc_prepare_bulk``), then PUTs the
request (``srpc_send_request``). Each MD's final event fires its ``Ev``; ``_step`` then takes
the events in the fixed order request sent, reply received, bulk done, whatever order they
came in. An error, a bad reply (type or magic: -EBADMSG) or the timer (-ETIMEDOUT) aborts
the RPC: all its MDs are unlinked and it finishes (``done`` called exactly once) when the
last UNLINK came. A reply with an error status unlinks the bulk buffer (the server may never
have moved it) without failing the RPC: the reply stands.

Expiry timers (``stt_add_timer`` per RPC) are kept here, not as one ``TimerHeap`` key per RPC:
RPCs posted with the same timeout expire in posting order, so each timeout has an
insertion-ordered queue (RPC -> its deadline), and one heap key (``RPC_TIMER``) stands at the
earliest deadline armed. Finishing an RPC is a dict pop; the key is disarmed when no RPC
waits and otherwise left where it is: when it comes early (its RPC finished), the due ones
expire and it moves to the queues' new earliest deadline. An RPC still expires at exactly
its deadline, and a busy node no longer leaves a heap entry per RPC (seconds of them at
``rpc_timeout``) behind for the collector to walk.
"""

from __future__ import annotations

import itertools
import logging
from collections import OrderedDict
from collections.abc import Callable
from errno import EBADMSG, EINTR, ETIMEDOUT
from typing import Any

from nodes.lnet.actions import MDEvent
from nodes.lnet.nid import NID
from nodes.selftest import wire
from nodes.selftest.rpc import Bulk, Ev, Srpc, State
from nodes.selftest.wire import Service, SrpcMsg

log = logging.getLogger("lnet.selftest")
#: the TimerHeap key of every client RPC's expiry (``SrpcClient.expire``)
RPC_TIMER = ("rpc",)


class ClientRpc:
    """``struct srpc_client_rpc``: ``done`` is called once, ``status`` then final. (A
    slotted class with its ``__init__`` written out: one is made per RPC, and the dataclass
    one, with three ``Ev`` default factories, cost several microseconds.)"""

    __slots__ = ("aborted", "bulk", "bulk_ev", "closed", "dest", "done", "feats", "mdhs",
                 "priv", "reply", "reply_ev", "reqst", "reqst_ev", "service", "state",
                 "status", "timeout")

    def __init__(self, dest: NID, service: Service, reqst: dict[str, Any],
                 done: Callable[[ClientRpc], None], feats: int = wire.LST_FEATS_MASK,
                 timeout: float = 0.0, bulk: Bulk | None = None, priv: Any = None) -> None:
        self.dest = dest
        self.service = service
        self.reqst = reqst
        self.done = done
        self.feats = feats
        self.timeout = timeout
        self.bulk = bulk
        self.priv = priv
        self.state = State.NEWBORN
        self.status = 0
        self.aborted = False
        self.closed = False
        self.reply: SrpcMsg | None = None
        self.reqst_ev = Ev(False)
        self.reply_ev = Ev(False)
        self.bulk_ev = Ev()  # (fired: an RPC without bulk waits for none)
        self.mdhs: list[int] = []


class SrpcClient:
    """The client RPCs of one node."""

    def __init__(self, srpc: Srpc) -> None:
        self.srpc = srpc
        #: timeout -> the RPCs armed with it, in arming (so deadline) order -> (deadline, seq)
        self._queues: dict[float, OrderedDict[ClientRpc, tuple[float, int]]] = {}
        self._armed: float | None = None  # where RPC_TIMER stands
        self._seq = itertools.count()

    def post(self, rpc: ClientRpc) -> None:
        """``srpc_post_rpc``: arm the expiry timer, post reply and bulk, send the request."""
        s = self.srpc
        if rpc.timeout > 0:
            self._arm(rpc, s.now + rpc.timeout)
        rpyid = s.next_id()
        rpc.mdhs.append(s.passive(rpyid, lambda ev: self._event(rpc, rpc.reply_ev, ev)))
        bulkid = 0
        if rpc.bulk is not None:
            bulkid = s.next_id()
            rpc.bulk_ev = Ev(fired=False)
            bk = rpc.bulk
            bk.mdh = s.passive(bulkid, lambda ev: self._event(rpc, rpc.bulk_ev, ev),
                               data=b"" if bk.sink else bytes(bk.data))
            rpc.mdhs.append(bk.mdh)
        rpc.state = State.REQUEST_SUBMITTED
        msg = wire.pack_request(rpc.service, rpc.feats, rpc.reqst, rpyid, bulkid)
        rpc.mdhs.append(s.active(wire.serv_portal(rpc.service), int(rpc.service), rpc.dest,
                                 None, lambda ev: self._event(rpc, rpc.reqst_ev, ev),
                                 payload=msg))

    # ------------------------------------------------------------------ expiry
    def _arm(self, rpc: ClientRpc, at: float) -> None:
        q = self._queues.get(rpc.timeout)
        if q is None:
            q = self._queues[rpc.timeout] = OrderedDict()
        q[rpc] = (at, next(self._seq))
        if self._armed is None or at < self._armed:
            self._armed = at
            self.srpc.timers.arm(RPC_TIMER, at)

    def _disarm(self, rpc: ClientRpc) -> None:
        """``stt_del_timer`` of a finished RPC."""
        q = self._queues.get(rpc.timeout)
        if q is None or q.pop(rpc, None) is None:
            return
        if not q:
            del self._queues[rpc.timeout]
            if not self._queues:
                self._armed = None
                self.srpc.timers.cancel(RPC_TIMER)

    def expire(self) -> None:
        """``RPC_TIMER`` came: every RPC whose deadline has come expires (in deadline
        order, ties in arming order), and the timer moves to the next deadline."""
        now, due = self.srpc.now, []
        for timeout, q in list(self._queues.items()):
            while q:
                rpc, (at, seq) = next(iter(q.items()))
                if at > now:
                    break
                del q[rpc]
                due.append((at, seq, rpc))
            if not q:
                del self._queues[timeout]
        fronts = [next(iter(q.values()))[0] for q in self._queues.values()]
        self._armed = min(fronts) if fronts else None
        if self._armed is not None:
            self.srpc.timers.arm(RPC_TIMER, self._armed)
        for _at, _seq, rpc in sorted(due, key=lambda d: d[:2]):
            self.expired(rpc)

    def expired(self, rpc: ClientRpc) -> None:
        """``srpc_client_rpc_expired``: the RPC's timer fired."""
        if rpc.closed:
            return
        log.warning("Client RPC expired: service %d, peer %s, timeout %g.", rpc.service,
                    rpc.dest, rpc.timeout)
        self.srpc.counters.rpcs_expired += 1
        self.abort(rpc, -ETIMEDOUT)

    def abort(self, rpc: ClientRpc, why: int) -> None:
        """``srpc_abort_rpc``: unlink everything, finish once the events are in."""
        if rpc.aborted or rpc.closed:
            return
        rpc.aborted, rpc.status = True, why
        self._step(rpc)

    def _event(self, rpc: ClientRpc, e: Ev, ev: MDEvent) -> None:
        if e is rpc.reqst_ev and ev.status == 0 and ev.kind != "UNLINK":
            self.srpc.counters.rpcs_sent += 1
        if not ev.unlinked:
            return
        Srpc.fire(e, ev)
        if e is rpc.reply_ev and not e.unlink:
            try:
                rpc.reply = wire.unpack(ev.payload)
            except wire.SrpcWireError as exc:
                log.warning("Bad message from %s: %s", rpc.dest, exc)
                rpc.reply, e.status = None, -EBADMSG
        elif e is rpc.bulk_ev and not e.unlink and rpc.bulk is not None and rpc.bulk.sink \
                and rpc.bulk.keep:
            rpc.bulk.data = ev.payload
        self._step(rpc)

    def _step(self, rpc: ClientRpc) -> None:
        """``srpc_send_rpc`` from the RPC's current state."""
        if rpc.state is State.DONE:
            return
        if not rpc.aborted:
            rc = self._advance(rpc)
            if rpc.closed:
                return
            if rc != 0:
                rpc.aborted, rpc.status = True, rc
        if rpc.aborted:
            for h in rpc.mdhs:
                self.srpc.unlink(h)
            if rpc.reqst_ev.fired and rpc.reply_ev.fired and rpc.bulk_ev.fired:
                self._done(rpc, -EINTR)

    def _advance(self, rpc: ClientRpc) -> int:
        """The next states while their events are in; an error to abort with, or 0."""
        if rpc.state is State.REQUEST_SUBMITTED:
            if not rpc.reqst_ev.fired:
                return 0
            if rpc.reqst_ev.status:
                return rpc.reqst_ev.status
            rpc.state = State.REQUEST_SENT
        if rpc.state is State.REQUEST_SENT:
            if not rpc.reply_ev.fired:
                return 0
            if rpc.reply_ev.status:
                return rpc.reply_ev.status
            expect = wire.REPLY_OF[wire.REQUEST_OF[rpc.service]]
            if rpc.reply is None or rpc.reply.type != expect:
                log.warning("Bad message from %s: type %s (%s expected)", rpc.dest,
                            rpc.reply.type if rpc.reply else None, expect.name)
                return -EBADMSG
            if rpc.bulk is not None and rpc.reply.body["status"] != 0:
                self.srpc.unlink(rpc.bulk.mdh)  # the peer may never have moved the bulk
            rpc.state = State.REPLY_RECEIVED
        if rpc.bulk is not None and not rpc.bulk_ev.fired:
            return 0
        rc = rpc.bulk_ev.status if rpc.bulk is not None else 0
        if rpc.bulk is not None and rpc.bulk_ev.unlink and rpc.reply is not None \
                and rpc.reply.body["status"] != 0:
            rc = 0  # unlinked because of the remote error: the reply still stands
        self._done(rpc, rc)
        return 0

    def _done(self, rpc: ClientRpc, status: int) -> None:
        """``srpc_client_rpc_done``: the expiry timer defused, ``done`` called once."""
        rpc.closed = True
        if rpc.status == 0:
            rpc.status = status
        rpc.state = State.DONE
        if rpc.timeout > 0:
            self._disarm(rpc)
        rpc.done(rpc)
