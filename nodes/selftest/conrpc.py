"""The console's RPC transactions (lnet/selftest/conrpc.c), sans-I/O.

Theory of operation: a console operation sends one framework RPC to each node of a list (a
transaction, ``lstcon_rpc_trans_ndlist``; a condition per operation skips nodes or refuses
the whole list), waits for all of them or the timeout (``lstcon_rpc_trans_postwait``: at
least ``LST_TRANS_MIN_TIMEOUT``; RPCs still out then are aborted, the node marked Down if
it was a real timeout), then reads the replies (``conreply``). A transaction is waited for by
``yield``ing it from the console operation's generator (``console.py``); its RPCs' done
callbacks resume it. RPCs left behind by a finished transaction are orphans, ignored when
they complete.
"""


from __future__ import annotations

from collections.abc import Callable, Generator
from errno import EINTR, EPERM, ESHUTDOWN, ETIMEDOUT
from typing import Any

from nodes.selftest import conreply
from nodes.selftest.contypes import (
    DOWN,
    LST_TRANS_MIN_TIMEOUT,
    POST_BATCH,
    SERVICE,
    ConNode,
    ConRpc,
    Op,
    Trans,
)
from nodes.selftest.rpc import Srpc
from nodes.selftest.rpcclient import ClientRpc, SrpcClient
from nodes.selftest.wire import Service, SrpcMsg


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
            self.add(trans, nd, SERVICE[op], reqst, bk)
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
        trans.stat = conreply.trans_stat(self.ses, trans)
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
        result = {"rc": 0, "ents": conreply.interpret(self.ses, trans, readent),
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
