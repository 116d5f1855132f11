"""The replies of a console transaction (lnet/selftest/conrpc.c), sans-I/O.

Theory of operation: once a transaction is over (``conrpc.Conrpc.postwait``), each reply's
session id says whether its node is Active in this session, Busy in another or Unknown
(``lstcon_rpc_get_reply``; a node's state follows its newest reply), the transaction's
statistics count RPC failures and framework errors per operation (``lstcon_rpc_trans_stat``,
``lstcon_rpc_stat_reply``), and ``interpret`` renders one entry per RPC
(``lstcon_rpc_trans_interpreter``), what ``lst`` prints; a ``*_readent`` adds an operation's
own fields. ``ses`` is the console's ``console.Session``.
"""

from __future__ import annotations

from collections.abc import Callable
from errno import EPERM, EPROTO, ESRCH
from typing import Any

from nodes.selftest import wire
from nodes.selftest.contypes import ACTIVE, BUSY, UNKNOWN, ConNode, ConRpc, Op, Trans, TransStat
from nodes.selftest.wire import LNET_NID_ANY, LST_FEATS_MASK, SrpcMsg


def get_reply(ses: Any, crpc: ConRpc) -> tuple[int, SrpcMsg | None]:
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
    elif sid == ses.sid:
        nd.state = ACTIVE
    else:
        nd.state = BUSY
    return 0, msg


def trans_stat(ses: Any, trans: Trans) -> TransStat:
    """``lstcon_rpc_trans_stat``."""
    st = TransStat()
    for crpc in trans.rpcs:
        st.rpc[0] += 1
        error, msg = get_reply(ses, crpc)
        if error != 0 or msg is None:
            st.rpc[2] += 1
            st.rpc_errno = st.rpc_errno or -error
            continue
        st.rpc[1] += 1
        _stat_reply(ses, trans, msg, crpc.node, st)
    if trans.op is Op.SESNEW and st.fwk_errno == 0:
        st.fwk_errno = ses.feats_check(trans.features)
    return st


def _stat_reply(ses: Any, trans: Trans, msg: SrpcMsg, nd: ConNode, st: TransStat) -> None:
    """``lstcon_rpc_stat_reply``: the framework counters of one reply."""
    op, status = trans.op, msg.body["status"]
    if op is Op.SESNEW:
        status = _sesnew_reply(trans, nd, msg)
        st.fwk[0 if status == 0 else 1] += 1
    elif op is Op.SESEND:
        st.fwk[0 if status in (0, ESRCH) else 1] += 1  # ESRCH is no error here
        status = 0 if status == ESRCH else status
    elif op in (Op.SESQRY, Op.SESPING):
        st.fwk[2 if status == ESRCH else 0 if (
            msg.body["sid_nid"], msg.body["sid_stamp"]) == ses.sid else 1] += 1
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


def _sesnew_reply(trans: Trans, nd: ConNode, msg: SrpcMsg) -> int:
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


def interpret(ses: Any, trans: Trans,
              readent: Callable[[SrpcMsg], dict[str, Any]] | None = None
              ) -> list[dict[str, Any]]:
    """``lstcon_rpc_trans_interpreter``: one ``lstcon_rpc_ent`` per RPC."""
    ents = []
    for crpc in trans.rpcs:
        error, msg = get_reply(ses, crpc)
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
