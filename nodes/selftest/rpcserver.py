"""srpc's server side: services and their RPCs (lnet/selftest/rpc.c ``srpc_handle_rpc``).

Theory of operation: a service (``srpc_add_service``) has its request buffer posted on its
portal (``SRPC_FRAMEWORK_REQUEST_PORTAL`` below ``Service.FRAMEWORK_MAX``, else
``SRPC_REQUEST_PORTAL``) with the service id as match bits; one persistent buffer stands for
the lazy portal's pool of buffers. A request that is not one whole ``srpc_msg`` of the
service's type is dropped (counted). Otherwise the handler runs (a version mismatch skips it
and replies EPROTO); a handler error drops the RPC; a handler that set a ``bulk`` has it moved
first -- GET from the client's buffer when the server is the sink (brw write), PUT into it
when the source (brw read), from the NI the request came to -- and its ``bulk_ready`` sees the
result; then the reply is PUT to the request's ``rpyid``. An RPC that fails counts as
dropped (``srpc_server_rpc_done``); ``bulk_get``/``bulk_put`` count the bytes moved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from errno import EPROTO, ESHUTDOWN
from typing import Any

from nodes.lnet.actions import MDEvent
from nodes.lnet.nid import NID
from nodes.selftest import wire
from nodes.selftest.rpc import Bulk, Ev, Srpc, State
from nodes.selftest.wire import SRPC_MSG_VERSION, SRPC_RDMA_PORTAL, Service, SrpcMsg

log = logging.getLogger("lnet.selftest")


class ServerRpc:
    """``struct srpc_server_rpc``: the handler fills ``reply`` (``status`` first) and may set
    a ``bulk`` to move before replying. (Slotted, its ``__init__`` written out: one is made
    per request, and the dataclass one called two default factories.)"""

    __slots__ = ("aborted", "bulk", "ev", "mdh", "peer", "reply", "reply_feats", "reqst",
                 "self_nid", "service", "state", "status")

    def __init__(self, service: ServiceDef, peer: NID, self_nid: NID | None,
                 reqst: SrpcMsg) -> None:
        self.service = service
        self.peer = peer
        self.self_nid = self_nid
        self.reqst = reqst
        self.reply: dict[str, Any] = {"status": 0}
        self.reply_feats = wire.LST_FEATS_MASK
        self.bulk: Bulk | None = None
        self.state = State.NEWBORN
        self.ev = Ev()
        self.mdh: int | None = None
        self.aborted = False
        self.status = 0


@dataclass(eq=False)
class ServiceDef:
    """``struct srpc_service``: ``handler`` returns 0 or a negative errno (drop the RPC)."""

    id: Service
    name: str
    handler: Callable[[ServerRpc], int]
    bulk_ready: Callable[[ServerRpc, int], int] | None = None
    rpc_done: Callable[[ServerRpc], None] | None = None
    active: set[ServerRpc] = field(default_factory=set)
    mdh: int | None = None


class SrpcServer:
    """The services of one node and their in-flight RPCs."""

    def __init__(self, srpc: Srpc) -> None:
        self.srpc = srpc
        self.services: dict[Service, ServiceDef] = {}

    def add_service(self, sv: ServiceDef) -> None:
        """``srpc_add_service`` and its request buffer."""
        self.services[sv.id] = sv
        sv.mdh = self.srpc.passive(int(sv.id), lambda ev: self._request(sv, ev),
                                   portal=wire.serv_portal(sv.id), threshold=-1)

    def abort_service(self, sv: ServiceDef) -> None:
        """``srpc_abort_service``: in-flight RPCs of ``sv`` notice the abort."""
        for rpc in list(sv.active):
            rpc.aborted = True
            if rpc.mdh is not None and rpc.mdh in self.srpc.handles:
                self.srpc.unlink(rpc.mdh)
            elif rpc.ev.fired:
                self._done(rpc, -ESHUTDOWN)

    def _request(self, sv: ServiceDef, ev: MDEvent) -> None:
        """``srpc_lnet_ev_handler`` SRPC_REQUEST_RCVD, then ``srpc_handle_rpc``."""
        s = self.srpc
        s.counters.rpcs_rcvd += 1
        if ev.status != 0:
            return
        try:
            msg = wire.unpack(ev.payload, expect=wire.REQUEST_OF[sv.id])
        except wire.SrpcWireError as exc:
            log.error("Dropping RPC (%s) from %s: %s", sv.name, ev.source, exc)
            s.counters.rpcs_dropped += 1
            return
        peer = ev.source or ev.initiator
        assert peer is not None  # a PUT event always names its source
        rpc = ServerRpc(sv, peer, ev.target, msg)
        sv.active.add(rpc)
        if msg.version != SRPC_MSG_VERSION:
            log.warning("Version mismatch: %d, %d expected, from %s", msg.version,
                        SRPC_MSG_VERSION, peer)
            rpc.reply["status"] = EPROTO
        else:
            rc = sv.handler(rpc)
            if rc != 0:
                self._done(rpc, rc)
                return
        rpc.state = State.BULK_STARTED
        if rpc.bulk is None:
            self._bulk_done(rpc)
            return
        bk, bulkid = rpc.bulk, msg.body["bulkid"]
        rpc.ev = Ev(fired=False)

        def cb(e: MDEvent) -> None:
            self._event(rpc, e)

        if bk.sink:  # GET the client's data (srpc_do_bulk, SRPC_BULK_GET_RPLD)
            rpc.mdh = s.active(SRPC_RDMA_PORTAL, bulkid, peer, rpc.self_nid, cb,
                               length=bk.length)
        else:  # PUT ours into the client's sink (SRPC_BULK_PUT_SENT)
            rpc.mdh = s.active(SRPC_RDMA_PORTAL, bulkid, peer, rpc.self_nid, cb,
                               payload=bytes(bk.data))

    def _event(self, rpc: ServerRpc, ev: MDEvent) -> None:
        if not ev.unlinked:
            return  # a GET's SEND: wait for its REPLY
        Srpc.fire(rpc.ev, ev)
        rpc.mdh = None
        if rpc.aborted:
            self._done(rpc, -ESHUTDOWN)
        elif rpc.state is State.BULK_STARTED:
            bk = rpc.bulk
            assert bk is not None
            if ev.status == 0 and ev.kind != "UNLINK":
                if bk.sink:
                    bk.data = ev.payload
                    self.srpc.counters.bulk_get += len(ev.payload)
                else:
                    self.srpc.counters.bulk_put += bk.length
            self._bulk_done(rpc)
        else:  # the reply went (or not)
            self._done(rpc, rpc.ev.status)

    def _bulk_done(self, rpc: ServerRpc) -> None:
        if rpc.bulk is not None:
            rc = rpc.ev.status
            if rpc.service.bulk_ready is not None:
                rc = rpc.service.bulk_ready(rpc, rc)
            if rc != 0:
                self._done(rpc, rc)
                return
        rpc.state = State.REPLY_SUBMITTED  # srpc_send_reply
        rpc.ev = Ev(fired=False)
        msg = wire.pack_fields(wire.REPLY_OF[wire.REQUEST_OF[rpc.service.id]],
                               rpc.reply_feats, rpc.reply)
        rpc.mdh = self.srpc.active(SRPC_RDMA_PORTAL, rpc.reqst.body["rpyid"], rpc.peer,
                                   rpc.self_nid, lambda e: self._event(rpc, e), payload=msg)

    def _done(self, rpc: ServerRpc, status: int) -> None:
        """``srpc_server_rpc_done``: a failed RPC counts as dropped."""
        rpc.status = status
        rpc.state = State.DONE
        rpc.service.active.discard(rpc)
        if status != 0:
            self.srpc.counters.rpcs_dropped += 1
        if rpc.service.rpc_done is not None:
            rpc.service.rpc_done(rpc)
