"""The console's RPC transactions (lnet/selftest/conrpc.c), sans-I/O.

Theory of operation: a console operation sends one framework RPC to each node of a list (a
transaction, ``lstcon_rpc_trans_ndlist``; a condition per operation skips nodes or refuses
the whole list), waits for all of them or the timeout (``lstcon_rpc_trans_postwait``: at
least ``LST_TRANS_MIN_TIMEOUT``; RPCs still out then are aborted, the node marked Down if
it was a real timeout), then reads the replies: each reply's session id says whether the
node is Active in this session, Busy in another or Unknown (``lstcon_rpc_get_reply``), and
the transaction's statistics count RPC failures and framework errors per operation
(``lstcon_rpc_trans_stat``, ``lstcon_rpc_stat_reply``); ``interpret`` renders one entry per
RPC (``lstcon_rpc_trans_interpreter``): what ``lst`` prints. A transaction is waited for by
``yield``ing it from the console operation's generator (``console.py``); its RPCs' done
callbacks resume it. RPCs left behind by a finished transaction are orphans, ignored when
they complete.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from errno import EINTR, EPERM, EPROTO, ESHUTDOWN, ESRCH, ETIMEDOUT
from typing import Any

from nodes.lnet.hdr import LNET_PID_LUSTRE
from nodes.lnet.nid import NID
from nodes.selftest import wire
from nodes.selftest.rpc import Srpc
from nodes.selftest.rpcclient import ClientRpc, SrpcClient
from nodes.selftest.wire import LNET_NID_ANY, LST_FEATS_MASK, Service, SrpcMsg

LST_TRANS_TIMEOUT = 30
#: RPCs one step of ``postwait`` posts before it lets the node serve other work (issue 27
#: item 1: the kernel posts a transaction's RPCs in one go, on its own thread; here that loop
#: shares one event loop with every other request of the node, or of a whole simulator)
POST_BATCH = 64
LST_TRANS_MIN_TIMEOUT = 3
LST_PING_INTERVAL = 8
#: node states (lnetst.h)
ACTIVE, BUSY, DOWN, UNKNOWN = 0x1, 0x2, 0x4, 0x8


def validate_timeout(t: int) -> int:
    """``LST_VALIDATE_TIMEOUT``."""
    return max(LST_TRANS_MIN_TIMEOUT, min(t, LST_TRANS_TIMEOUT))


class Op(enum.IntEnum):
    """Transaction operations (conrpc.h ``LST_TRANS_*``; 0x1000: private)."""

    SESNEW = 0x1001
    SESEND = 0x1002
    SESQRY = 0x03
    SESPING = 0x04
    TSBCLIADD = 0x1011
    TSBSRVADD = 0x1012
    TSBRUN = 0x1013
    TSBSTOP = 0x1014
    TSBCLIQRY = 0x15
    TSBSRVQRY = 0x16
    STATQRY = 0x21


@dataclass(eq=False)
class ConNode:
    """``struct lstcon_node``: ``refs`` counts the lists holding it."""

    nid: NID
    state: int = UNKNOWN
    stamp: float = 0.0
    timeout: int = 0
    refs: int = 0
    ping: ConRpc | None = None

    @property
    def id_str(self) -> str:
        """``libcfs_id2str``."""
        return f"{LNET_PID_LUSTRE}-{self.nid}"


@dataclass(eq=False)
class ConRpc:
    """``struct lstcon_rpc``."""

    node: ConNode
    rpc: ClientRpc
    trans: Trans | None = None
    posted: bool = False
    finished: bool = False
    status: int = 0
    stamp: float | None = None


@dataclass
class TransStat:
    """``struct lstcon_trans_stat``: RPC total/success/failure, framework counters."""

    rpc: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    rpc_errno: int = 0
    fwk: list[int] = field(default_factory=lambda: [0] * 8)
    fwk_errno: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"rpc": self.rpc, "rpc_errno": self.rpc_errno, "fwk": self.fwk,
                "fwk_errno": self.fwk_errno}


@dataclass(eq=False)
class Trans:
    """``struct lstcon_rpc_trans``."""

    op: Op
    features: int
    rpcs: list[ConRpc] = field(default_factory=list)
    remaining: int = 0
    feats_updated: bool = False
    owner: list[Trans] | None = None
    on_done: Callable[[], None] | None = None
    stat: TransStat = field(default_factory=lambda: TransStat())
    #: the waiting lst went away (a signal in ``wait_event_interruptible``): -EINTR
    interrupted: bool = False


class Conrpc:
    """Transactions of one console (``ses`` is its ``console.Session``)."""

    def __init__(self, srpc: Srpc, client: SrpcClient, rpc_timeout: float,
                 ses: Any) -> None:
        self.srpc = srpc
        self.client = client
        self.rpc_timeout = rpc_timeout
        self.ses = ses
        self._waiting: dict[int, Trans] = {}  # id(trans) -> a transaction being waited on

    # ------------------------------------------------------------------ building
    def prep(self, translist: list[Trans] | None, op: Op) -> Trans | int:
        """``lstcon_rpc_trans_prep``: -EPERM for a second private transaction on an object."""
        if translist is not None and any(t.op & op == 0x1000 for t in translist):
            return -EPERM
        trans = Trans(op, self.ses.features, owner=translist)
        if translist is not None:
            translist.append(trans)
        return trans

    def ndlist(self, nodes: list[ConNode], translist: list[Trans] | None, op: Op,
               make: Callable[[ConNode, int], dict[str, Any] | tuple[dict[str, Any], Any]],
               condition: Callable[[ConNode], int] | None = None) -> Trans | int:
        """``lstcon_rpc_trans_ndlist``: one RPC per node the condition lets through (0
        skips it, <0 aborts the whole transaction with that error)."""
        trans = self.prep(translist, op)
        if isinstance(trans, int):
            return trans
        for nd in nodes:
            rc = 1 if condition is None else condition(nd)
            if rc == 0:
                continue
            if rc < 0:
                self.destroy(trans)
                return rc
            made = make(nd, trans.features)
            reqst, bk = made if isinstance(made, tuple) else (made, None)
            self.add(trans, nd, _SERVICE[op], reqst, bk)
        return trans

    def add(self, trans: Trans, nd: ConNode, service: Service, reqst: dict[str, Any],
            bk: Any = None) -> ConRpc:
        def done(_rpc: ClientRpc) -> None:
            self._rpc_done(crpc)

        crpc = ConRpc(nd, ClientRpc(nd.nid, service, reqst, done, trans.features,
                                    self.rpc_timeout, bk))
        crpc.trans = trans
        trans.rpcs.append(crpc)
        return crpc

    def post_one(self, crpc: ConRpc) -> None:
        """``lstcon_rpc_post``."""
        assert crpc.trans is not None
        crpc.trans.remaining += 1
        crpc.posted = True
        self.client.post(crpc.rpc)

    def _rpc_done(self, crpc: ConRpc) -> None:
        """``lstcon_rpc_done``: an orphan is forgotten; the last one resumes the waiter."""
        trans = crpc.trans
        if trans is None:
            return
        crpc.finished = True
        if crpc.stamp is None:
            crpc.stamp = self.srpc.now
            crpc.status = crpc.rpc.status
        trans.remaining -= 1
        if trans.remaining == 0 and trans.on_done is not None:
            self.srpc.timers.cancel(("trans", id(trans)))
            done, trans.on_done = trans.on_done, None
            done()

    # ------------------------------------------------------------------ waiting
    def postwait(self, trans: Trans, timeout: int) -> Generator[Trans, None, int]:
        """``lstcon_rpc_trans_postwait``: post every RPC, wait, abort what is left."""
        if not trans.rpcs:
            return 0
        timeout = max(timeout, LST_TRANS_MIN_TIMEOUT)
        for i, crpc in enumerate(trans.rpcs):
            if i and i % POST_BATCH == 0:  # a step: other requests are served meanwhile
                trans.interrupted = yield from self.pause()
                if trans.interrupted:
                    break
            self.post_one(crpc)
        if not trans.interrupted and trans.remaining:
            self.srpc.timers.arm(("trans", id(trans)), self.srpc.now + timeout)
            self._waiting[id(trans)] = trans
            yield trans
            self._waiting.pop(id(trans), None)
        rc = 0
        if self.ses.shutdown and trans.owner is not None:
            rc = -ESHUTDOWN
        if trans.interrupted:
            rc = -EINTR
            self.abort(trans, rc)
        elif trans.remaining:
            rc = rc or -ETIMEDOUT
            if rc == -ETIMEDOUT and timeout < LST_TRANS_MIN_TIMEOUT * 2:
                rc = -EINTR  # a short timeout counts as cancelled
            self.abort(trans, rc)
        trans.stat = self.trans_stat(trans)
        return rc

    def pause(self) -> Generator[Trans, None, bool]:
        """One zero-delay wait between steps of a long operation (a timer due now: the
        node's loop, or the simulator's scheduler, runs other work first); True: the
        waiting lst went away (``Selftest.interrupt``)."""
        pause = Trans(Op.SESQRY, 0)
        self._waiting[id(pause)] = pause
        self.srpc.timers.arm(("trans", id(pause)), self.srpc.now)
        yield pause
        self._waiting.pop(id(pause), None)
        self.srpc.timers.cancel(("trans", id(pause)))
        return pause.interrupted

    def run(self, trans: Trans | int, timeout: int,
            readent: Callable[[SrpcMsg], dict[str, Any]] | None = None
            ) -> Generator[Trans, None, dict[str, Any]]:
        """A transaction from ``ndlist`` (or its error) through: post, wait, read, destroy;
        the ioctl's answer with the entries and statistics."""
        if isinstance(trans, int):
            return {"rc": trans}
        yield from self.postwait(trans, timeout)
        result = {"rc": 0, "ents": self.interpret(trans, readent),
                  "trans": trans.stat.to_json(), "feats": trans.features}
        self.destroy(trans)
        return result

    def timed_out(self, key: int) -> None:
        """The transaction's wait is over: resume its waiter with RPCs still out."""
        trans = self._waiting.get(key)
        if trans is not None and trans.on_done is not None:
            done, trans.on_done = trans.on_done, None
            done()

    def abort(self, trans: Trans, error: int) -> None:
        """``lstcon_rpc_trans_abort``: a real timeout marks the node Down."""
        now = self.srpc.now
        for crpc in trans.rpcs:
            if not crpc.posted or crpc.stamp is not None:
                if crpc.stamp is None:
                    crpc.stamp, crpc.status = now, -EINTR
                continue
            crpc.stamp, crpc.status = now, error
            self.client.abort(crpc.rpc, -EINTR)
            if error != -ETIMEDOUT:
                continue
            nd = crpc.node
            if nd.stamp <= now:
                nd.stamp, nd.state = now, DOWN

    def destroy(self, trans: Trans) -> None:
        """``lstcon_rpc_trans_destroy``: unfinished RPCs become orphans."""
        for crpc in trans.rpcs:
            if crpc.posted and not crpc.finished:
                crpc.trans = None
        if trans.owner is not None and trans in trans.owner:
            trans.owner.remove(trans)
        self.srpc.timers.cancel(("trans", id(trans)))

    # ------------------------------------------------------------------ replies
    def get_reply(self, crpc: ConRpc) -> tuple[int, SrpcMsg | None]:
        """``lstcon_rpc_get_reply``: the node's state follows its newest reply."""
        if crpc.status != 0:
            return crpc.status, None
        msg = crpc.rpc.reply
        assert msg is not None and crpc.stamp is not None
        nd = crpc.node
        if nd.stamp > crpc.stamp:
            return 0, msg
        nd.stamp = crpc.stamp
        sid = (msg.body["sid_nid"], msg.body["sid_stamp"])
        if sid[0] == LNET_NID_ANY:
            nd.state = UNKNOWN
        elif sid == self.ses.sid:
            nd.state = ACTIVE
        else:
            nd.state = BUSY
        return 0, msg

    def trans_stat(self, trans: Trans) -> TransStat:
        """``lstcon_rpc_trans_stat``."""
        st = TransStat()
        for crpc in trans.rpcs:
            st.rpc[0] += 1
            error, msg = self.get_reply(crpc)
            if error != 0 or msg is None:
                st.rpc[2] += 1
                st.rpc_errno = st.rpc_errno or -error
                continue
            st.rpc[1] += 1
            self._stat_reply(trans, msg, crpc.node, st)
        if trans.op is Op.SESNEW and st.fwk_errno == 0:
            st.fwk_errno = self.ses.feats_check(trans.features)
        return st

    def _stat_reply(self, trans: Trans, msg: SrpcMsg, nd: ConNode, st: TransStat) -> None:
        """``lstcon_rpc_stat_reply``: the framework counters of one reply."""
        op, status = trans.op, msg.body["status"]
        if op is Op.SESNEW:
            status = self._sesnew_reply(trans, nd, msg)
            st.fwk[0 if status == 0 else 1] += 1
        elif op is Op.SESEND:
            st.fwk[0 if status in (0, ESRCH) else 1] += 1  # ESRCH is no error here
            status = 0 if status == ESRCH else status
        elif op in (Op.SESQRY, Op.SESPING):
            st.fwk[2 if status == ESRCH else 0 if (
                msg.body["sid_nid"], msg.body["sid_stamp"]) == self.ses.sid else 1] += 1
            return
        elif op in (Op.TSBRUN, Op.TSBSTOP):
            ok = status == 0 or (status == EPERM and op is Op.TSBSTOP)
            st.fwk[0 if ok else 1] += 1
            status = 0 if ok else status
        elif op in (Op.TSBCLIQRY, Op.TSBSRVQRY):
            st.fwk[1 if msg.body["active"] else 0] += 1
            if status:
                st.fwk[2] += 1
        else:  # TSBCLIADD/TSBSRVADD/STATQRY
            st.fwk[0 if status == 0 else 1] += 1
        if status and st.fwk_errno == 0:
            st.fwk_errno = status

    def _sesnew_reply(self, trans: Trans, nd: ConNode, msg: SrpcMsg) -> int:
        """``lstcon_sesnew_stat_reply``: features must agree; the node's session timeout."""
        status = msg.body["status"]
        if status == 0 and msg.feats & ~LST_FEATS_MASK:
            status = msg.body["status"] = EPROTO
        if status != 0:
            return int(status)
        if not trans.feats_updated:
            trans.feats_updated, trans.features = True, msg.feats
        if msg.feats != trans.features:
            msg.body["status"] = EPROTO
            return EPROTO
        nd.timeout = msg.body["timeout"]
        return 0

    def interpret(self, trans: Trans,
                  readent: Callable[[SrpcMsg], dict[str, Any]] | None = None
                  ) -> list[dict[str, Any]]:
        """``lstcon_rpc_trans_interpreter``: one ``lstcon_rpc_ent`` per RPC."""
        ents = []
        for crpc in trans.rpcs:
            error, msg = self.get_reply(crpc)
            nd = crpc.node
            ent: dict[str, Any] = {"peer": nd.id_str, "nid": str(nd.nid), "state": nd.state,
                                   "rpc_errno": error, "fwk_errno": 0,
                                   "sid_nid": LNET_NID_ANY, "sid_stamp": -1}
            if error == 0 and msg is not None:
                ent.update(sid_nid=msg.body["sid_nid"], sid_stamp=msg.body["sid_stamp"],
                           fwk_errno=msg.body["status"])
                if readent is not None:
                    ent.update(readent(msg))
            ents.append(ent)
        return ents


_SERVICE = {Op.SESNEW: Service.MAKE_SESSION, Op.SESEND: Service.REMOVE_SESSION,
            Op.SESQRY: Service.DEBUG, Op.SESPING: Service.DEBUG,
            Op.TSBCLIADD: Service.TEST, Op.TSBSRVADD: Service.TEST,
            Op.TSBRUN: Service.BATCH, Op.TSBSTOP: Service.BATCH, Op.TSBCLIQRY: Service.BATCH,
            Op.TSBSRVQRY: Service.BATCH, Op.STATQRY: Service.QUERY_STAT}


def sesqry_readent(msg: SrpcMsg) -> dict[str, Any]:
    """``lstcon_sesrpc_readent``: the node's session timeout and name."""
    return {"priv": [msg.body["timeout"]], "payload": wire.cstr(msg.body["name"])}


def tsbqry_readent(msg: SrpcMsg) -> dict[str, Any]:
    """``lstcon_tsbrpc_readent``: active units."""
    return {"priv": [msg.body["active"]]}


def stat_readent(msg: SrpcMsg) -> dict[str, Any]:
    """``lstcon_statrpc_readent``: the three counter blocks of a good reply."""
    if msg.body["status"] != 0:
        return {}
    return {"payload": {k: v for k, v in msg.body.items()
                        if k.startswith(("fw_", "rpc_", "lnet_"))}}
