"""srpc's client side: one RPC from post to done (lnet/selftest/rpc.c ``srpc_send_rpc``).

Theory of operation: ``post`` arms the RPC's expiry timer (``rpc_timeout``), posts the reply
buffer and the passive bulk (``srpc_prepare_reply``/``srpc_prepare_bulk``), then PUTs the
request (``srpc_send_request``). Each MD's final event fires its ``Ev``; ``_step`` then takes
the events in the fixed order request sent, reply received, bulk done, whatever order they
came in. An error, a bad reply (type or magic: -EBADMSG) or the timer (-ETIMEDOUT) aborts
the RPC: all its MDs are unlinked and it finishes (``done`` called exactly once) when the
last UNLINK came. A reply with an error status unlinks the bulk buffer (the server may never
have moved it) without failing the RPC: the reply stands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from errno import EBADMSG, EINTR, ETIMEDOUT
from typing import Any

from nodes.lnet.actions import MDEvent
from nodes.lnet.nid import NID
from nodes.selftest import wire
from nodes.selftest.rpc import Bulk, Ev, Srpc, State
from nodes.selftest.wire import MsgType, Service, SrpcMsg

log = logging.getLogger("lnet.selftest")


@dataclass(eq=False)
class ClientRpc:
    """``struct srpc_client_rpc``: ``done`` is called once, ``status`` then final."""

    dest: NID
    service: Service
    reqst: dict[str, Any]
    done: Callable[[ClientRpc], None]
    feats: int = wire.LST_FEATS_MASK
    timeout: float = 0.0
    bulk: Bulk | None = None
    priv: Any = None
    state: State = State.NEWBORN
    status: int = 0
    aborted: bool = False
    closed: bool = False
    reply: SrpcMsg | None = None
    reqst_ev: Ev = field(default_factory=Ev)
    reply_ev: Ev = field(default_factory=Ev)
    bulk_ev: Ev = field(default_factory=Ev)
    mdhs: list[int] = field(default_factory=list)


class SrpcClient:
    """The client RPCs of one node."""

    def __init__(self, srpc: Srpc) -> None:
        self.srpc = srpc
        self._expiry: dict[int, ClientRpc] = {}  # id(rpc) -> an RPC whose timer is armed

    def post(self, rpc: ClientRpc) -> None:
        """``srpc_post_rpc``: arm the expiry timer, post reply and bulk, send the request."""
        s = self.srpc
        if rpc.timeout > 0:
            s.timers.arm(("rpc", id(rpc)), s.now + rpc.timeout)
            self._expiry[id(rpc)] = rpc
        rpyid = s.next_id()
        rpc.reply_ev = Ev(fired=False)
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
        rpc.reqst_ev = Ev(fired=False)
        msg = wire.pack(wire.REQUEST_OF[rpc.service], rpc.feats,
                        **{**rpc.reqst, "rpyid": rpyid, "bulkid": bulkid})
        rpc.mdhs.append(s.active(wire.serv_portal(rpc.service), int(rpc.service), rpc.dest,
                                 None, lambda ev: self._event(rpc, rpc.reqst_ev, ev),
                                 payload=msg))

    def expired(self, key: int) -> None:
        """``srpc_client_rpc_expired``: the RPC's timer fired."""
        rpc = self._expiry.pop(key, None)
        if rpc is None or rpc.closed:
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
            expect = MsgType(wire.REQUEST_OF[rpc.service] + 1)
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
        if self.srpc.timers.cancel(("rpc", id(rpc))):
            self._expiry.pop(id(rpc), None)
        rpc.done(rpc)
