"""The test framework of a test node: its session and batches (lnet/selftest/framework.c).

Theory of operation: every node serves the framework services (debug, query stats, make and
remove session, batch, test) on ``SRPC_FRAMEWORK_REQUEST_PORTAL``, as ``sfw_startup`` does.
A node is in at most one session, made by a console's ``MAKE_SESSION`` (another console gets
EBUSY unless it forces; the same console's second request only takes a reference). Each
framework RPC defuses the session's timer while it runs and re-arms it after
(``sfw_handle_server_rpc``): a session nobody talks to for ``session_timeout`` seconds
expires (``sfw_session_expired``). A session that goes (removed, replaced, expired) becomes a
zombie until its running batches have stopped. Batches are created by the first TEST RPC
naming them; what runs in them is ``sfwtest``'s. Replies carry the session's features; a
framework RPC with other features than the session's gets EPROTO. Errors in replies are
positive errnos, as on the wire.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from errno import EBUSY, EINVAL, EIO, ENOENT, EPROTO, ESRCH

from nodes.lnet.engine import LNetEngine
from nodes.lnet.nid import NID
from nodes.selftest import wire
from nodes.selftest.rpc import Bulk, Srpc
from nodes.selftest.rpcserver import ServerRpc, ServiceDef, SrpcServer
from nodes.selftest.sfwtest import Batch, Tests
from nodes.selftest.timers import TimerHeap
from nodes.selftest.wire import INVALID_SID, LNET_NID_ANY, LST_FEATS_MASK, Service

log = logging.getLogger("lnet.selftest")

#: lnet_selftest module parameters (framework.c): seconds, 0 == never
SESSION_TIMEOUT = 100
RPC_TIMEOUT = 64
_SESSION_TIMER = ("session",)


@dataclass(eq=False)
class Session:
    """``struct sfw_session``."""

    nid4: int
    stamp: int
    name: str
    feats: int
    timeout: int
    started: float
    refcount: int = 1
    batches: dict[int, Batch] = field(default_factory=dict)
    brw_errors: int = 0
    ping_errors: int = 0

    @property
    def sid(self) -> tuple[int, int]:
        return self.nid4, self.stamp


def _sid(sn: Session | None) -> dict[str, int]:
    """``get_old_sid`` as reply fields."""
    nid4, stamp = sn.sid if sn is not None else INVALID_SID
    return {"sid_nid": nid4, "sid_stamp": stamp}


class Framework:
    """``sfw_data`` of one node."""

    def __init__(self, engine: LNetEngine, srpc: Srpc, server: SrpcServer,
                 timers: TimerHeap, tests: Tests) -> None:
        self.engine = engine
        self.srpc = srpc
        self.server = server
        self.timers = timers
        self.tests = tests
        self.session: Session | None = None
        self.zombies: list[Session] = []
        self.session_timeout = SESSION_TIMEOUT
        tests.on_batch_idle = self._batch_idle
        handlers = {Service.DEBUG: self._debug, Service.QUERY_STAT: self._stats,
                    Service.MAKE_SESSION: self._make_session,
                    Service.REMOVE_SESSION: self._remove_session,
                    Service.BATCH: self._control_batch, Service.TEST: self._add_test}
        names = {Service.DEBUG: "debug", Service.QUERY_STAT: "query stats",
                 Service.MAKE_SESSION: "make session",
                 Service.REMOVE_SESSION: "remove session", Service.BATCH: "batch service",
                 Service.TEST: "test service"}
        for sid, fn in handlers.items():
            server.add_service(ServiceDef(sid, names[sid], self._wrap(fn),
                                          self._bulk_ready if sid is Service.TEST else None))
        for sv in tests.services():
            server.add_service(sv)

    # ------------------------------------------------------------------ session timer
    def _arm(self) -> None:
        sn = self.session
        if sn is not None and sn.timeout:
            self.timers.arm(_SESSION_TIMER, self.srpc.now + sn.timeout)

    def expired(self) -> None:
        """``sfw_session_expired``."""
        sn = self.session
        if sn is None:
            return
        log.warning("Session expired! sid: %s-%d, name: %s", NID.from_nid4(sn.nid4),
                    sn.stamp, sn.name)
        self._deactivate()

    def _deactivate(self) -> None:
        """``sfw_deactivate_session``: a zombie until its active batches stopped."""
        sn = self.session
        if sn is None:
            return
        self.timers.cancel(_SESSION_TIMER)
        self.session = None
        self.zombies.append(sn)
        for sv in self.tests.services():
            self.server.abort_service(sv)
        for bat in sn.batches.values():
            if bat.nactive:
                self.tests.stop_batch(bat, force=True)
        self._batch_idle(sn)

    def _batch_idle(self, sn: Session) -> None:
        """A batch stopped: a zombie session with none left active is destroyed."""
        if sn in self.zombies and not any(b.nactive for b in sn.batches.values()):
            self.zombies.remove(sn)

    # ------------------------------------------------------------------ dispatch
    def _wrap(self, fn: Callable[[ServerRpc], int]) -> Callable[[ServerRpc], int]:
        def handler(rpc: ServerRpc) -> int:
            """``sfw_handle_server_rpc``: timer off, features checked, the service, timer on."""
            self.timers.cancel(_SESSION_TIMER)
            req, sn, sid = rpc.reqst, self.session, rpc.service.id
            rc = 0
            if sid not in (Service.MAKE_SESSION, Service.DEBUG):
                if sn is not None and sn.feats != req.feats:
                    log.warning("Features of framework RPC don't match features of current "
                                "session: %x/%x", req.feats, sn.feats)
                    rpc.reply.update(status=EPROTO, **_sid(sn))
                else:
                    rc = fn(rpc)
            elif req.feats & ~LST_FEATS_MASK:
                rpc.reply["status"] = EPROTO
            else:
                rc = fn(rpc)
            rpc.reply_feats = self.session.feats if self.session else LST_FEATS_MASK
            self._arm()
            return rc
        return handler

    def _bulk_ready(self, rpc: ServerRpc, status: int) -> int:
        """``sfw_bulk_ready``: a test client's destination list has arrived."""
        if status != 0:
            log.error("Bulk transfer failed for RPC: service %s, peer %s, status %d",
                      rpc.service.name, rpc.peer, status)
            return -EIO
        self.timers.cancel(_SESSION_TIMER)
        rc = self._add_test(rpc)
        self._arm()
        return rc

    # ------------------------------------------------------------------ services
    def _make_session(self, rpc: ServerRpc) -> int:
        """``sfw_make_session``."""
        b, sn, rep = rpc.reqst.body, self.session, rpc.reply
        if b["sid_nid"] == LNET_NID_ANY:
            rep.update(status=EINVAL, **_sid(sn))
            return 0
        if sn is not None:
            rep.update(status=0, timeout=sn.timeout, **_sid(sn))
            if (b["sid_nid"], b["sid_stamp"]) == sn.sid:
                sn.refcount += 1
                return 0
            if not b["force"]:
                rep.update(status=EBUSY, name=sn.name)
                return 0
        if rpc.reqst.feats & ~LST_FEATS_MASK:
            rep["status"] = EPROTO
            return 0
        new = Session(b["sid_nid"], b["sid_stamp"], wire.cstr(b["name"]), rpc.reqst.feats,
                      self.session_timeout, self.srpc.now)
        self._deactivate()
        self.session = new
        rep.update(status=0, timeout=new.timeout, **_sid(new))
        return 0

    def _remove_session(self, rpc: ServerRpc) -> int:
        """``sfw_remove_session``."""
        b, sn, rep = rpc.reqst.body, self.session, rpc.reply
        rep.update(_sid(sn))
        if b["sid_nid"] == LNET_NID_ANY:
            rep["status"] = EINVAL
        elif sn is None or (b["sid_nid"], b["sid_stamp"]) != sn.sid:
            rep["status"] = ESRCH if sn is None else EBUSY
        else:
            sn.refcount -= 1
            if sn.refcount == 0:
                self._deactivate()
                rep.update(_sid(None))
            rep["status"] = 0
        return 0

    def _debug(self, rpc: ServerRpc) -> int:
        """``sfw_debug_session``."""
        sn = self.session
        if sn is None:
            rpc.reply.update(status=ESRCH, **_sid(None))
        else:
            rpc.reply.update(status=0, timeout=sn.timeout, name=sn.name, **_sid(sn))
        return 0

    def _stats(self, rpc: ServerRpc) -> int:
        """``sfw_get_stats``: sfw, srpc and LNet counters of this node."""
        b, sn, rep = rpc.reqst.body, self.session, rpc.reply
        rep.update(_sid(sn))
        if b["sid_nid"] == LNET_NID_ANY:
            rep["status"] = EINVAL
            return 0
        if sn is None or (b["sid_nid"], b["sid_stamp"]) != sn.sid:
            rep["status"] = ESRCH
            return 0
        lnet = self.engine.counters.values
        for name in wire.LNET_FIELDS.split():
            mask = 0xFFFF_FFFF if name.endswith(("_count", "alloc", "max", "errors")) \
                else 0xFFFF_FFFF_FFFF_FFFF
            rep[f"lnet_{name}"] = lnet.get(name, 0) & mask
        c = self.srpc.counters
        for name in wire.SRPC_FIELDS.split():
            rep[f"rpc_{name}"] = getattr(c, name) & (
                0xFFFF_FFFF_FFFF_FFFF if name.startswith("bulk") else 0xFFFF_FFFF)
        rep.update(fw_running_ms=int((self.srpc.now - sn.started) * 1000) & 0xFFFF_FFFF,
                   fw_active_batches=sum(1 for bt in sn.batches.values() if bt.nactive),
                   fw_zombie_sessions=len(self.zombies),
                   fw_brw_errors=sn.brw_errors & 0xFFFF_FFFF,
                   fw_ping_errors=sn.ping_errors & 0xFFFF_FFFF, status=0)
        return 0

    def _control_batch(self, rpc: ServerRpc) -> int:
        """``sfw_control_batch``: run, stop or query one of the session's batches."""
        b, sn, rep = rpc.reqst.body, self.session, rpc.reply
        rep.update(_sid(sn))
        if sn is None or (b["sid_nid"], b["sid_stamp"]) != sn.sid:
            rep["status"] = ESRCH
            return 0
        bat = sn.batches.get(b["bid"])
        if bat is None:
            rep["status"] = ENOENT
            return 0
        if b["opc"] == 1:  # SRPC_BATCH_OPC_RUN
            self.tests.run_batch(bat)
            rc = 0
        elif b["opc"] == 2:  # SRPC_BATCH_OPC_STOP
            self.tests.stop_batch(bat, force=bool(b["arg"]))
            rc = 0
        elif b["opc"] == 3:  # SRPC_BATCH_OPC_QUERY
            rc, active = self.tests.query_batch(bat, b["testidx"])
            rep["active"] = active
        else:
            return -EINVAL  # dropped
        rep["status"] = -rc if rc < 0 else rc
        return 0

    def _add_test(self, rpc: ServerRpc) -> int:
        """``sfw_add_test``: a client first GETs its destination list from the console."""
        b, sn, rep = rpc.reqst.body, self.session, rpc.reply
        rep.update(_sid(sn))
        if (b["loop"] == 0 or b["concur"] == 0 or b["sid_nid"] == LNET_NID_ANY
                or b["ndest"] > 256 * 341 or (b["is_client"] and b["ndest"] == 0)
                or b["concur"] > wire.LST_MAX_CONCUR
                or not Service.FRAMEWORK_MAX < b["service"] < Service.PING + 1):
            rep["status"] = EINVAL
            return 0
        if sn is None or (b["sid_nid"], b["sid_stamp"]) != sn.sid \
                or not self.tests.known(b["service"]):
            rep["status"] = ENOENT
            return 0
        bat = sn.batches.setdefault(b["bid"], Batch(b["bid"], sn))
        if bat.nactive:
            rep["status"] = EBUSY
            return 0
        if b["is_client"] and rpc.bulk is None:
            rpc.bulk = Bulk(wire.PROCESS_ID.size * b["ndest"], sink=True)
            return 0
        rc = self.tests.add_instance(bat, rpc.reqst, rpc.bulk.data if rpc.bulk else b"")
        rep["status"] = -rc if rc < 0 else rc
        return 0
