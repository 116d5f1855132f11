"""Tests on a test node: instances, units, and the brw and ping tests (lnet/selftest
framework.c ``sfw_add_test_instance``/``sfw_run_batch``, brw_test.c, ping_test.c).

Theory of operation: a TEST RPC adds a test instance to a batch: a server instance only
serves (its service is always posted), a client instance gets one unit per destination and
concurrency slot (``tsr_ndest`` x ``tsr_concur``). Running the batch starts every client
unit; a unit sends one RPC at a time to its destination and goes again until its loop count
runs out (-1: until stopped), the batch is stopped, or an RPC fails (the console always
asks to stop a unit on error, ``tes_stop_onerr``). A stop marks the instances stopping
(units finish their RPC in flight); a forced stop aborts those RPCs with -EINTR. When a
batch's last unit is done the batch is idle (``on_batch_idle``).

brw: the client's request names read or write, the length and the check; the *server* moves
the bulk (``srpc_do_bulk``): it PUTs ``BRW_MAGIC`` data into the client's buffer for a read
(the client checks it), GETs the client's data for a write (and checks it, replying
EBADMSG on bad data). Every failure counts in the session's ``brw_errors`` (ping:
``ping_errors``) on the node that saw it. ping: a 160-byte request and reply carrying a magic
and a sequence number, both checked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from errno import EBADMSG, EINTR, EINVAL, EIO, ENOENT, EPROTO
from typing import Any

from nodes.lnet.hdr import LNET_MTU
from nodes.lnet.nid import NID
from nodes.selftest import bulk, wire
from nodes.selftest.rpc import Bulk, Srpc
from nodes.selftest.rpcclient import ClientRpc, SrpcClient
from nodes.selftest.rpcserver import ServerRpc, ServiceDef
from nodes.selftest.wire import LST_FEAT_BULK_LEN, LST_FEATS_MASK, Service, SrpcMsg

log = logging.getLogger("lnet.selftest")
LST_PING_TEST_MAGIC = 0xBABEFACE
#: a work item runs this long after it was scheduled (a workqueue's turn; virtual seconds on
#: the sim, a loop iteration on the daemon)
WORK_DELAY = 1e-6
_BRW_CHECKS = (bulk.CHECK_NONE, bulk.CHECK_SIMPLE, bulk.CHECK_FULL, bulk.CHECK_DISCARD)


@dataclass(eq=False)
class Batch:
    """``struct sfw_batch`` (``session`` is the framework's ``Session``)."""

    bid: int
    session: Any
    tests: list[TestInstance] = field(default_factory=list)
    nactive: int = 0


@dataclass(eq=False)
class TestInstance:
    """``struct sfw_test_instance``; ``brw`` is (opc, check, length, offset)."""

    batch: Batch
    service: Service
    is_client: bool
    stop_onerr: bool
    concur: int
    loop: int
    feats: int
    brw: tuple[int, int, int, int] | None = None
    units: list[Unit] = field(default_factory=list)
    nactive: int = 0
    stopping: bool = False
    active_rpcs: set[ClientRpc] = field(default_factory=set)


@dataclass(eq=False)
class Unit:
    """``struct sfw_test_unit``: one destination x one concurrency slot."""

    inst: TestInstance
    dest: NID
    loop: int = 0


class Tests:
    """The brw and ping tests of one node."""

    def __init__(self, srpc: Srpc, client: SrpcClient, rpc_timeout: float) -> None:
        self.srpc = srpc
        self.client = client
        self.rpc_timeout = rpc_timeout
        self.on_batch_idle: Callable[[Any], None] = lambda sn: None
        #: what each test RPC calls when done (one bound method for all; an attribute a
        #: test can wrap, as a compiled class's methods cannot be replaced)
        self.rpc_done: Callable[[ClientRpc], None] = self._rpc_done
        self.ping_seq = 0  # lst_ping_data.pnd_counter
        self.ready: list[Unit] = []  # units whose work item is scheduled (sfw_run_test)
        self._services = [
            ServiceDef(Service.BRW, "brw_test", self._brw_handle, self._brw_bulk_ready),
            ServiceDef(Service.PING, "ping_test", self._ping_handle)]

    def services(self) -> list[ServiceDef]:
        return self._services

    def known(self, service: int) -> bool:
        """``sfw_find_test_case``."""
        return service in (Service.BRW, Service.PING)

    # ------------------------------------------------------------------ instances
    def add_instance(self, bat: Batch, req: SrpcMsg, dests: bytes | memoryview) -> int:
        """``sfw_add_test_instance``: 0 or a negative errno."""
        b = req.body
        loop = b["loop"] - (1 << 32) if b["loop"] >= 1 << 31 else b["loop"]  # an int: -1
        tsi = TestInstance(bat, Service(b["service"]), bool(b["is_client"]),
                           bool(b["stop_onerr"]), b["concur"], loop, req.feats)
        if not tsi.is_client:
            bat.tests.append(tsi)
            return 0
        try:
            ids = wire.unpack_ids(dests, b["ndest"])
        except wire.SrpcWireError:
            return -EINVAL
        if tsi.service is Service.BRW:
            opc, check, length, offset = wire.unpack_bulk(b["u"], req.feats, req.swapped)
            offset %= bulk.PAGE_SIZE
            if (offset % bulk.BRW_MSIZE or length > LNET_MTU or length <= 0
                    or opc not in (bulk.LST_BRW_READ, bulk.LST_BRW_WRITE)
                    or check not in _BRW_CHECKS or not bulk.valid_layout(offset, length)):
                return -EINVAL  # brw_client_init
            tsi.brw = (opc, check, length, offset)
        else:
            self.ping_seq = 0  # ping_client_init
        for nid4, _pid in ids:
            tsi.units += [Unit(tsi, NID.from_nid4(nid4)) for _ in range(tsi.concur)]
        bat.tests.append(tsi)
        return 0

    def run_batch(self, bat: Batch) -> None:
        """``sfw_run_batch``: every client unit starts (a running batch is left alone)."""
        if bat.nactive:
            return
        for tsi in bat.tests:
            if not tsi.is_client:
                continue
            bat.nactive += 1
            tsi.nactive += len(tsi.units)
            for unit in tsi.units:
                unit.loop = tsi.loop
            if not tsi.units:
                self._instance_done(tsi)
        for tsi in bat.tests:
            if tsi.is_client:
                for unit in tsi.units:
                    self._schedule(unit)

    def _schedule(self, unit: Unit) -> None:
        """``swi_schedule_workitem``: the unit runs from the work queue, a moment later
        (``WORK_DELAY``), never inline -- so a unit testing its own node (loopback, which
        completes an RPC within one engine call) cannot run forever at one instant."""
        if not self.ready:
            self.srpc.timers.arm(("work",), self.srpc.now + WORK_DELAY)
        self.ready.append(unit)

    def run_ready(self) -> None:
        """The work queue's turn: every scheduled unit sends its next RPC."""
        ready, self.ready = self.ready, []
        for unit in ready:
            self._run(unit)

    def stop_batch(self, bat: Batch, force: bool) -> None:
        """``sfw_stop_batch``."""
        for tsi in bat.tests:
            if not tsi.is_client or not tsi.nactive or tsi.stopping:
                continue
            tsi.stopping = True
            if force:
                for rpc in list(tsi.active_rpcs):
                    self.client.abort(rpc, -EINTR)

    def query_batch(self, bat: Batch, testidx: int) -> tuple[int, int]:
        """``sfw_query_batch``: (rc, active units of the batch or of test ``testidx``)."""
        if testidx < 0:
            return -EINVAL, 0
        if testidx == 0:
            return 0, bat.nactive
        if testidx <= len(bat.tests):
            return 0, bat.tests[testidx - 1].nactive
        return -ENOENT, 0

    # ------------------------------------------------------------------ client units
    def _run(self, unit: Unit) -> None:
        """``sfw_run_test``: one more RPC, unless the instance is stopping."""
        tsi = unit.inst
        if tsi.stopping:
            self._unit_done(unit)
            return
        rpc = self._brw_prep(unit) if tsi.service is Service.BRW else self._ping_prep(unit)
        if unit.loop > 0:
            unit.loop -= 1
        tsi.active_rpcs.add(rpc)
        self.client.post(rpc)

    def _rpc_done(self, rpc: ClientRpc) -> None:
        """``sfw_test_rpc_done``."""
        unit: Unit = rpc.priv
        tsi = unit.inst
        (self._brw_done if tsi.service is Service.BRW else self._ping_done)(unit, rpc)
        tsi.active_rpcs.discard(rpc)
        if tsi.stopping or unit.loop == 0 or (rpc.status != 0 and tsi.stop_onerr):
            self._unit_done(unit)
        else:
            self._schedule(unit)

    def _unit_done(self, unit: Unit) -> None:
        """``sfw_test_unit_done``."""
        tsi = unit.inst
        tsi.nactive -= 1
        if tsi.nactive == 0:
            self._instance_done(tsi)

    def _instance_done(self, tsi: TestInstance) -> None:
        tsi.stopping = False
        bat = tsi.batch
        bat.nactive -= 1
        if bat.nactive == 0:
            self.on_batch_idle(bat.session)

    def _rpc(self, unit: Unit, service: Service, reqst: dict[str, Any],
             bk: Bulk | None = None) -> ClientRpc:
        return ClientRpc(unit.dest, service, reqst, self.rpc_done, unit.inst.feats,
                         self.rpc_timeout, bk, unit)

    # ------------------------------------------------------------------ brw
    def _brw_prep(self, unit: Unit) -> ClientRpc:
        """``brw_client_prep_rpc``: a write sends ``BRW_MAGIC`` data, a read a sink."""
        assert unit.inst.brw is not None
        opc, check, length, offset = unit.inst.brw
        write = opc == bulk.LST_BRW_WRITE
        data = bulk.pattern(length, offset, check, bulk.BRW_MAGIC) if write else b""
        return self._rpc(unit, Service.BRW, {"rw": opc, "len": length, "flags": check},
                         Bulk(length, sink=not write, offset=offset, data=data,
                              keep=check in (bulk.CHECK_SIMPLE, bulk.CHECK_FULL)))

    def _brw_done(self, unit: Unit, rpc: ClientRpc) -> None:
        """``brw_client_done_rpc``: errors counted, read data checked."""
        tsi = unit.inst
        sn = tsi.batch.session
        if rpc.status != 0:
            log.error("BRW RPC to %s failed with %d", rpc.dest, rpc.status)
            if not tsi.stopping:
                sn.brw_errors += 1
            return
        assert rpc.reply is not None and tsi.brw is not None
        status = rpc.reply.body["status"]
        if status != 0:
            sn.brw_errors += 1
            rpc.status = -status
            return
        opc, check, _length, offset = tsi.brw
        if opc == bulk.LST_BRW_WRITE or rpc.bulk is None:
            return
        bad = bulk.verify(rpc.bulk.data, offset, check)
        rpc.bulk.data = b""
        if bad is not None:
            log.error("Bad data in bulk: %#x, %#x expected; Bulk data from %s is corrupted!",
                      bad, bulk.BRW_MAGIC, rpc.dest)
            sn.brw_errors += 1
            rpc.status = -EBADMSG

    def _brw_handle(self, rpc: ServerRpc) -> int:
        """``brw_server_handle``: validate, then set up the bulk the server moves."""
        b, feats = rpc.reqst.body, rpc.reqst.feats
        rpc.reply["status"] = 0
        if b["rw"] not in (bulk.LST_BRW_READ, bulk.LST_BRW_WRITE) \
                or b["flags"] not in _BRW_CHECKS:
            rpc.reply["status"] = EINVAL
            return 0
        if feats & ~LST_FEATS_MASK:
            rpc.reply_feats, rpc.reply["status"] = LST_FEATS_MASK, EPROTO
            return 0
        if not feats & LST_FEAT_BULK_LEN and b["len"] % bulk.PAGE_SIZE:
            rpc.reply["status"] = EINVAL
            return 0
        rpc.reply_feats = feats
        if b["len"] == 0 or b["len"] > LNET_MTU:
            rpc.reply["status"] = EINVAL
            return 0
        read = b["rw"] == bulk.LST_BRW_READ
        data = bulk.pattern(b["len"], 0, b["flags"], bulk.BRW_MAGIC) if read else b""
        rpc.bulk = Bulk(b["len"], sink=not read, data=data)
        return 0

    def _brw_bulk_ready(self, rpc: ServerRpc, status: int) -> int:
        """``brw_bulk_ready``: a write's data is checked here, EBADMSG when bad."""
        b = rpc.reqst.body
        if status != 0:
            log.error("BRW bulk %s failed for RPC from %s: %d",
                      "READ" if b["rw"] == bulk.LST_BRW_READ else "WRITE", rpc.peer, status)
            return -EIO
        if b["rw"] == bulk.LST_BRW_READ or rpc.bulk is None:
            return 0
        bad = bulk.verify(rpc.bulk.data, 0, b["flags"])
        rpc.bulk.data = b""
        if bad is not None:
            log.error("Bad data in bulk: %#x, %#x expected; Bulk data from %s is corrupted!",
                      bad, bulk.BRW_MAGIC, rpc.peer)
            rpc.reply["status"] = EBADMSG
        return 0

    # ------------------------------------------------------------------ ping
    def _ping_prep(self, unit: Unit) -> ClientRpc:
        """``ping_client_prep_rpc``."""
        seq, self.ping_seq = self.ping_seq, (self.ping_seq + 1) & 0xFFFF_FFFF
        now = self.srpc.now
        return self._rpc(unit, Service.PING, {
            "magic": LST_PING_TEST_MAGIC, "seq": seq, "time_sec": int(now),
            "time_nsec": int((now % 1) * 1e9)})

    def _ping_done(self, unit: Unit, rpc: ClientRpc) -> None:
        """``ping_client_done_rpc``."""
        tsi = unit.inst
        sn = tsi.batch.session
        if rpc.status != 0:
            if not tsi.stopping:
                sn.ping_errors += 1
            log.error("Unable to ping %s: %d", rpc.dest, rpc.status)
            return
        assert rpc.reply is not None
        body = rpc.reply.body
        if body["magic"] != LST_PING_TEST_MAGIC or body["seq"] != rpc.reqst["seq"]:
            rpc.status = -EBADMSG
            sn.ping_errors += 1
            log.error("Bad magic or seq from %s: %#x/%d", rpc.dest, body["magic"],
                      body["seq"])

    def _ping_handle(self, rpc: ServerRpc) -> int:
        """``ping_server_handle``: a bad magic drops the RPC."""
        b = rpc.reqst.body
        if b["magic"] != LST_PING_TEST_MAGIC:
            log.error("Unexpect magic %08x from %s", b["magic"], rpc.peer)
            return -EINVAL
        rpc.reply.update(seq=b["seq"], magic=LST_PING_TEST_MAGIC)
        if rpc.reqst.feats & ~LST_FEATS_MASK:
            rpc.reply_feats, rpc.reply["status"] = LST_FEATS_MASK, EPROTO
            return 0
        rpc.reply_feats = rpc.reqst.feats
        return 0
