"""The lst console's batches and tests (lnet/selftest/console.c ``lstcon_batch_*``,
``lstcon_test_*``, conrpc.c ``lstcon_testrpc_prep``), sans-I/O.

Theory of operation: a batch (``add_batch``; ``batch`` always exists) collects tests and the
nodes they run on: its client list (the tests' source groups) and server list (their
destination groups), filled as tests are added. Adding a test checks the batch is idle and
both groups have an Active node, then sends TEST RPCs to every destination node (a server
instance, sized for ``nmax x dist x concur`` requests) and then to every source node (a client
instance with ``span`` destinations chosen by ``--distribute DIST:SPAN``, sent as a bulk the
node GETs); any node not Active refuses the whole transaction (-ENETDOWN). The test is kept
even if some nodes failed, so the user can look; it holds its two groups (busy) from then on.
Running sends BATCH run to every client node (all must be Active); the batch is Running if
any started. Stopping sends BATCH stop (``--force``: abort RPCs in flight); querying asks the
client nodes (also with ``--server``, as the console does) how many test units are active.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from errno import E2BIG, EEXIST, EINVAL, ENETDOWN, ENOENT
from typing import TYPE_CHECKING, Any

from nodes.lnet.hdr import LNET_PID_LUSTRE
from nodes.selftest import conreply, conrpc, contypes, wire
from nodes.selftest.contypes import ACTIVE, BUSY, DOWN, ConNode, Gen, Op, Trans
from nodes.selftest.rpc import Bulk
from nodes.selftest.wire import LST_FEAT_BULK_LEN, LST_NAME_SIZE, Service

BATCH_IDLE = 0xB0
BATCH_RUNNING = 0xB1
LST_TEST_BULK = 1
LST_TEST_PING = 2


@dataclass(eq=False)
class Group:
    """``struct lstcon_group``: ``tests`` holding it make it busy."""

    name: str
    nodes: list[ConNode] = field(default_factory=list)
    translist: list[Trans] = field(default_factory=list)
    tests: int = 0


@dataclass(eq=False)
class ConTest:
    """``struct lstcon_test``; ``param`` is lst's bulk or ping parameter block."""

    batch: ConBatch
    index: int
    type: int
    loop: int
    concur: int
    dist: int
    span: int
    src: Group
    dst: Group
    param: dict[str, int]
    cliidx: int = 0
    translist: list[Trans] = field(default_factory=list)


@dataclass(eq=False)
class ConBatch:
    """``struct lstcon_batch``."""

    name: str
    bid: int
    state: int = BATCH_IDLE
    arg: int = 0
    tests: list[ConTest] = field(default_factory=list)
    cli: list[ConNode] = field(default_factory=list)
    srv: list[ConNode] = field(default_factory=list)
    translist: list[Trans] = field(default_factory=list)


class BatchOps:
    """Batch and test ioctls of ``console.Console`` (which provides ``ses``, ``conrpc``,
    ``node_get``, ``node_put``)."""

    ses: Any
    conrpc: conrpc.Conrpc

    if TYPE_CHECKING:  # provided by Console
        def node_get(self, nid: Any, create: bool = True) -> ConNode | None: ...
        def node_put(self, nd: ConNode) -> None: ...

    @staticmethod
    def count_states(nodes: list[ConNode]) -> dict[str, int]:
        """``LST_NODE_STATE_COUNTER`` over a node list (``struct lstcon_ndlist_ent``)."""
        out = {"nnode": len(nodes), "nactive": 0, "nbusy": 0, "ndown": 0, "nunknown": 0}
        for nd in nodes:
            key = {ACTIVE: "nactive", BUSY: "nbusy", DOWN: "ndown"}.get(nd.state, "nunknown")
            out[key] += 1
        return out

    def batch_add(self, name: str) -> int:
        """``lstcon_batch_add``."""
        if name in self.ses.batches:
            return -EEXIST
        if len(name.encode()) > LST_NAME_SIZE - 1:
            return -E2BIG
        self.ses.id_cookie += 1
        self.ses.batches[name] = ConBatch(name, self.ses.id_cookie)
        return 0

    def op_batch_add(self, key: int, name: str) -> Gen:
        yield from ()
        return {"rc": self.batch_add(name)}

    def op_batch_list(self, key: int, idx: int) -> Gen:
        yield from ()
        names = list(self.ses.batches)
        return {"rc": 0, "name": names[idx]} if 0 <= idx < len(names) else {"rc": -ENOENT}

    def op_batch_info(self, key: int, name: str, testidx: int = 0, server: bool = False
                      ) -> Gen:
        """``lstcon_batch_info``: counts of the batch's (or test's) client and server nodes
        and, for the verbose list, the nodes of one side."""
        yield from ()
        bat = self.ses.batches.get(name)
        if bat is None or testidx < 0 or testidx > len(bat.tests):
            return {"rc": -ENOENT}
        test = bat.tests[testidx - 1] if testidx else None
        cli = test.src.nodes if test else bat.cli
        srv = test.dst.nodes if test else bat.srv
        out: dict[str, Any] = {"rc": 0, "cli": self.count_states(cli),
                               "srv": self.count_states(srv),
                               "nodes": [[nd.id_str, nd.state] for nd in (srv if server
                                                                         else cli)]}
        if test is None:
            out.update(ntest=len(bat.tests), state=bat.state)
        else:
            out.update(type=test.type, loop=test.loop, concur=test.concur)
        return out

    def _batch_req(self, bat: ConBatch, index: int, opc: int):  # type: ignore[no-untyped-def]
        def make(nd: ConNode, feats: int) -> dict[str, Any]:
            sid_nid, sid_stamp = self.ses.sid
            return {"sid_nid": sid_nid, "sid_stamp": sid_stamp, "bid": bat.bid,
                    "testidx": index, "opc": opc, "arg": bat.arg if opc in (1, 2) else 0}
        return make

    def _batch_op(self, bat: ConBatch, op: Op, opc: int) -> Gen:
        """``lstcon_batch_op``: RUN needs every client Active, STOP skips the others."""
        cond = (lambda nd: -ENETDOWN if nd.state != ACTIVE else 1) if op is Op.TSBRUN \
            else (lambda nd: int(nd.state == ACTIVE))
        trans = self.conrpc.ndlist(list(bat.cli), bat.translist, op,
                                   self._batch_req(bat, 0, opc), cond)
        return (yield from self.conrpc.run(trans, contypes.LST_TRANS_TIMEOUT))

    def op_batch_start(self, key: int, name: str, timeout: int = 0) -> Gen:
        """``lstcon_batch_run``."""
        bat = self.ses.batches.get(name)
        if bat is None:
            return {"rc": -ENOENT}
        bat.arg = timeout
        result = yield from self._batch_op(bat, Op.TSBRUN, 1)
        if result.get("trans", {}).get("fwk", [0])[0]:
            bat.state = BATCH_RUNNING
        return result

    def op_batch_stop(self, key: int, name: str, force: bool = False) -> Gen:
        """``lstcon_batch_stop``."""
        bat = self.ses.batches.get(name)
        if bat is None:
            return {"rc": -ENOENT}
        bat.arg = int(force)
        result = yield from self._batch_op(bat, Op.TSBSTOP, 2)
        if result["rc"] == 0 and result["trans"]["fwk"][1] == 0:
            bat.state = BATCH_IDLE
        return result

    def op_batch_query(self, key: int, name: str, testidx: int = 0, client: bool = True,
                       timeout: int = 5) -> Gen:
        """``lstcon_test_batch_query``: active units per client node."""
        bat = self.ses.batches.get(name)
        if bat is None or testidx < 0:
            return {"rc": -ENOENT if bat is None else -EINVAL}
        if testidx > len(bat.tests):
            return {"rc": -ENOENT}
        test = bat.tests[testidx - 1] if testidx else None
        nodes = test.src.nodes if test else bat.cli
        translist = test.translist if test else bat.translist
        op = Op.TSBCLIQRY if client else Op.TSBSRVQRY
        trans = self.conrpc.ndlist(list(nodes), translist, op,
                                   self._batch_req(bat, testidx, 3))
        result = yield from self.conrpc.run(trans, timeout, conreply.tsbqry_readent)
        st = result.get("trans")
        if testidx == 0 and st and st["rpc"][2] == 0 and st["fwk"][1] == 0:
            bat.state = BATCH_IDLE  # all answered, nothing runs
        return result

    # ------------------------------------------------------------------ tests
    def op_test_add(self, key: int, batch: str, type: int, loop: int, concur: int,
                    dist: int, span: int, **kw: Any) -> Gen:
        """``lstcon_test_add``: server instances first, then the clients."""
        src_name, dst_name, param = kw.get("from"), kw.get("to"), kw.get("param") or {}
        if loop == 0 or concur <= 0 or dist <= 0 or span <= 0 or type not in (1, 2):
            return {"rc": -EINVAL}
        bat = self.ses.batches.get(batch)
        if bat is None:
            return {"rc": -ENOENT}
        if bat.state != BATCH_IDLE:
            return {"rc": -EINVAL}  # can't change a running batch
        groups = []
        for gname in (src_name, dst_name):
            grp = self.ses.groups.get(gname)
            if grp is None:
                return {"rc": -ENOENT}
            if not any(nd.state == ACTIVE for nd in grp.nodes):
                return {"rc": -EINVAL}  # no Active node
            groups.append(grp)
        test = ConTest(bat, len(bat.tests) + 1, type, loop, concur, dist, span,
                       groups[0], groups[1], dict(param))
        result: dict[str, Any] = {"rc": 0}
        for op, grp in ((Op.TSBSRVADD, test.dst), (Op.TSBCLIADD, test.src)):
            if op is Op.TSBCLIADD and span > len(test.dst.nodes):
                return {"rc": -EINVAL}  # lstcon_dstnodes_prep: span beyond the group
            side = bat.srv if op is Op.TSBSRVADD else bat.cli

            def cond(nd: ConNode, side: list[ConNode] = side) -> int:
                if nd.state != ACTIVE:
                    return -ENETDOWN
                if nd not in side:
                    self.node_get(nd.nid)
                    side.append(nd)
                return 1

            trans = self.conrpc.ndlist(list(grp.nodes), test.translist, op,
                                       self._test_req(test, op), cond)
            result = yield from self.conrpc.run(trans, contypes.LST_TRANS_TIMEOUT)
            if result["rc"]:
                return result
            if result["trans"]["rpc_errno"] or result["trans"]["fwk_errno"]:
                break
        bat.tests.append(test)  # kept anyway, so the user can see what went on
        test.src.tests += 1
        test.dst.tests += 1
        return result

    def _test_req(self, test: ConTest, op: Op):  # type: ignore[no-untyped-def]
        """``lstcon_testrpc_prep``."""
        def make(nd: ConNode, feats: int) -> tuple[dict[str, Any], Bulk | None]:
            sid_nid, sid_stamp = self.ses.sid
            req: dict[str, Any] = {
                "sid_nid": sid_nid, "sid_stamp": sid_stamp, "bid": test.batch.bid,
                "concur": test.concur, "is_client": int(op is Op.TSBCLIADD),
                "stop_onerr": 1,
                "service": Service.PING if test.type == LST_TEST_PING else Service.BRW}
            bk = None
            if op is Op.TSBSRVADD:
                ndist = -(-len(test.src.nodes) // test.dist)
                nspan = -(-len(test.dst.nodes) // test.span)
                req.update(ndest=0, loop=-(-ndist // nspan) * test.dist * test.concur)
            else:
                dests = self._dests(test.dst, test.cliidx, test.dist, test.span)
                test.cliidx += 1
                ids = wire.pack_ids([d.nid.nid4 for d in dests], LNET_PID_LUSTRE)
                if not feats & LST_FEAT_BULK_LEN:  # whole pages
                    ids = ids.ljust(-(-len(ids) // 4096) * 4096, b"\0")
                bk = Bulk(len(ids), sink=False, data=ids)
                req.update(ndest=test.span, loop=test.loop & 0xFFFF_FFFF)  # -1: forever
            p = test.param
            if test.type == LST_TEST_PING:
                req["u"] = wire.pack_ping_req(p.get("size", 0), p.get("flags", 0))
            elif feats & LST_FEAT_BULK_LEN:
                off = p.get("cli_off" if op is Op.TSBCLIADD else "srv_off", 0)
                req["u"] = wire.pack_bulk_v1(p["opc"], p["flags"], p["size"], off)
            else:
                req["u"] = wire.pack_bulk_v0(p["opc"], -(-p["size"] // 4096), p["flags"])
            return req, bk
        return make

    @staticmethod
    def _dests(grp: Group, idx: int, dist: int, span: int) -> list[ConNode]:
        """``lstcon_dstnodes_prep``: ``span`` consecutive nodes of the destination group
        (wrapping), moving on every ``dist`` clients."""
        n = len(grp.nodes)
        start = ((idx // dist) * span) % n
        return [grp.nodes[(start + k) % n] for k in range(min(span, n))]
