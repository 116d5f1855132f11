"""The lst console: session, nodes, groups, pinger and the ioctl entry (lnet/selftest
console.c, conctl.c), sans-I/O.

Theory of operation: every node can be the console (``lst`` talks to its own node, as
``lst`` does to the kernel through ioctls). Each ioctl is a generator (``ioctl``): it runs
until it waits for a transaction (``conrpc.Conrpc.postwait`` yields it) and is resumed when
the transaction is over; its return value is the ioctl's answer, ``{"rc": 0 | -errno,
"trans": <lstcon_trans_stat>, ...}``. The entry checks what ``lstcon_ioctl_entry`` checks,
in its order: a session shutting down (-ESHUTDOWN), an idle-expired session is ended first,
no session (-ESRCH) for all but ``session_new``, then each operation its session key
(-EACCES, ``session_info`` excepted as in the ioctl interface) and its arguments.

The console's nodes exist while a group or a batch holds them (``lstcon_node_find`` /
``lstcon_node_put``); a group held by a test is busy (EBUSY). The pinger (every
``LST_PING_INTERVAL`` s) keeps the nodes' sessions alive with DEBUG RPCs once half their
session timeout has passed since their last reply, and ends the session on every node when
no ioctl came for the console's own timeout (``lstcon_rpc_pinger``). Groups are
``congroup.py``'s, batches and tests ``conbatch.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from errno import E2BIG, EACCES, EEXIST, EINVAL, ENOENT, EPROTO, ESHUTDOWN, ESRCH
from typing import Any

from nodes.lnet.nid import NID
from nodes.selftest import conreply, contypes
from nodes.selftest.conbatch import BatchOps, ConBatch, Group
from nodes.selftest.congroup import GroupOps
from nodes.selftest.conrpc import Conrpc
from nodes.selftest.contypes import ACTIVE, LST_PING_INTERVAL, ConNode, Gen, Op, Trans
from nodes.selftest.rpc import Srpc
from nodes.selftest.rpcclient import SrpcClient
from nodes.selftest.wire import INVALID_SID, LST_FEATS_MASK, LST_NAME_SIZE

LST_CONSOLE_TIMEOUT = 300
LST_DEFAULT_BATCH = "batch"
_PINGER = ("pinger",)


@dataclass(eq=False)
class Session:
    """``struct lstcon_session`` (``console_session``)."""

    active: bool = False
    sid: tuple[int, int] = INVALID_SID
    key: int = 0
    name: str = ""
    timeout: int = 0
    force: bool = False
    features: int = LST_FEATS_MASK
    feats_updated: bool = False
    laststamp: float = 0.0
    expired: bool = False
    shutdown: bool = False
    id_cookie: int = 0
    nodes: dict[NID, ConNode] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    batches: dict[str, ConBatch] = field(default_factory=dict)
    ping: Trans | None = None

    def reset(self) -> None:
        """Back to no session: every batch, group and node goes (``lstcon_session_end``)."""
        self.__init__()  # type: ignore[misc]

    def feats_check(self, feats: int) -> int:
        """``lstcon_session_feats_check``: every node must have the session's features."""
        if feats & ~LST_FEATS_MASK:
            return EPROTO
        if not self.feats_updated:
            self.feats_updated, self.features = True, feats
        return EPROTO if self.features != feats else 0


class Console(GroupOps, BatchOps):
    """``console_session`` and the ioctls on it."""

    ses: Session

    def __init__(self, srpc: Srpc, client: SrpcClient, rpc_timeout: float,
                 local_nid: Callable[[], NID]) -> None:
        self.srpc = srpc
        self.ses = Session()
        self.conrpc = Conrpc(srpc, client, rpc_timeout, self.ses)
        self.local_nid = local_nid

    # ------------------------------------------------------------------ nodes
    def node_get(self, nid: NID, create: bool = True) -> ConNode | None:
        """``lstcon_node_find``: a reference on the session's node (created Unknown)."""
        nd = self.ses.nodes.get(nid)
        if nd is None:
            if not create:
                return None
            nd = self.ses.nodes[nid] = ConNode(nid, stamp=self.srpc.now)
        nd.refs += 1
        return nd

    def node_put(self, nd: ConNode) -> None:
        """``lstcon_node_put``: the last reference takes it out of the session."""
        nd.refs -= 1
        if nd.refs <= 0:
            self.ses.nodes.pop(nd.nid, None)

    def _session_req(self, nd: ConNode, _feats: int) -> dict[str, Any]:
        sid_nid, sid_stamp = self.ses.sid
        return {"sid_nid": sid_nid, "sid_stamp": sid_stamp, "force": int(self.ses.force),
                "name": self.ses.name, "flags": 0, "type": 0}

    # ------------------------------------------------------------------ the entry
    def ioctl(self, opc: str, key: int, args: dict[str, Any]) -> Gen:
        """``lstcon_ioctl_entry``."""
        ses = self.ses
        ses.laststamp = self.srpc.now
        if ses.shutdown:
            return {"rc": -ESHUTDOWN}
        if ses.expired:
            yield from self.session_end_all()
        if opc != "session_new" and not ses.active:
            return {"rc": -ESRCH}
        if opc not in ("session_new", "session_info") and key != ses.key:
            return {"rc": -EACCES}
        for arg in ("name", "batch", "from", "to"):
            value = args.get(arg)
            if value is not None and (not isinstance(value, str) or not value
                                      or len(value.encode()) > LST_NAME_SIZE):
                return {"rc": -EINVAL}
        op = getattr(self, f"op_{opc}", None)
        if op is None:
            return {"rc": -EINVAL}
        result: dict[str, Any] = yield from op(key=key, **args)
        result.setdefault("trans", contypes.TransStat().to_json())
        return result

    # ------------------------------------------------------------------ session
    def op_session_new(self, key: int, name: str, timeout: int = 0, force: bool = False,
                       feats: int = LST_FEATS_MASK) -> Gen:
        """``lstcon_session_new``."""
        ses = self.ses
        if ses.active:
            if not force:
                return {"rc": -EEXIST}
            yield from self.session_end_all()
        if feats & ~LST_FEATS_MASK:
            return {"rc": -EINVAL}
        if len(name.encode()) > LST_NAME_SIZE - 1:
            return {"rc": -E2BIG}
        nid = self.local_nid()
        ses.sid = (nid.nid4, int(self.srpc.now * 1000))
        ses.key, ses.force, ses.features, ses.feats_updated = key, force, feats, False
        ses.timeout = timeout if timeout > 0 else LST_CONSOLE_TIMEOUT
        ses.name = name
        self.batch_add(LST_DEFAULT_BATCH)
        ses.ping = Trans(Op.SESPING, ses.features)
        self.srpc.timers.arm(_PINGER, self.srpc.now + LST_PING_INTERVAL)
        ses.active = True
        return {"rc": 0, "sid_nid": ses.sid[0], "sid_stamp": ses.sid[1]}

    def op_session_info(self, key: int) -> Gen:
        ses = self.ses
        counts = self.count_states(list(ses.nodes.values()))
        yield from ()
        return {"rc": 0, "name": ses.name, "sid_nid": ses.sid[0], "sid_stamp": ses.sid[1],
                "key": ses.key, "feats": ses.features, "ndinfo": counts}

    def op_session_end(self, key: int) -> Gen:
        return (yield from self.session_end_all())

    def session_end_all(self) -> Gen:
        """``lstcon_session_end``: SESEND to every Active node, then nothing is left."""
        ses = self.ses
        trans = self.conrpc.ndlist(list(ses.nodes.values()), None, Op.SESEND,
                                   self._session_req, lambda nd: int(nd.state == ACTIVE))
        if isinstance(trans, int):
            return {"rc": trans}
        ses.shutdown = True
        self.pinger_stop()
        yield from self.conrpc.postwait(trans, contypes.LST_TRANS_TIMEOUT)
        self.conrpc.destroy(trans)
        ses.reset()
        ses.laststamp = self.srpc.now
        return {"rc": 0, "trans": trans.stat.to_json()}

    # ------------------------------------------------------------------ pinger
    def pinger(self) -> None:
        """``lstcon_rpc_pinger``: every LST_PING_INTERVAL seconds while the session lives."""
        ses, now, trans = self.ses, self.srpc.now, self.ses.ping
        if ses.shutdown or ses.expired or trans is None:
            return
        if now - ses.laststamp > ses.timeout:
            ses.expired = True
        for nd in list(ses.nodes.values()):
            if ses.expired:  # an idle console ends the session on its nodes
                if nd.state == ACTIVE:
                    self.conrpc.post_one(self.conrpc.add(trans, nd, contypes.SERVICE[Op.SESEND],
                                                         self._session_req(nd, 0)))
                continue
            if nd.ping is not None:
                if not nd.ping.finished:
                    continue  # in flight
                conreply.get_reply(self.ses, nd.ping)
                trans.rpcs.remove(nd.ping)
                nd.ping = None
            if nd.state != ACTIVE or now - nd.stamp < nd.timeout / 2:
                continue
            nd.ping = self.conrpc.add(trans, nd, contypes.SERVICE[Op.SESPING],
                                      self._session_req(nd, 0))
            self.conrpc.post_one(nd.ping)
        if not ses.expired:
            self.srpc.timers.arm(_PINGER, now + LST_PING_INTERVAL)

    def pinger_stop(self) -> None:
        ses = self.ses
        self.srpc.timers.cancel(_PINGER)
        if ses.ping is not None:
            self.conrpc.abort(ses.ping, -ESHUTDOWN)
            self.conrpc.destroy(ses.ping)
            ses.ping = None
        for nd in ses.nodes.values():
            nd.ping = None

    # ------------------------------------------------------------------ debug and stat
    def _nodes_of(self, kind: str, name: str | None, nids: list[str] | None,
                  create: bool) -> tuple[list[ConNode], list[ConNode]] | int:
        """The node list a debug/stat names, and the temporary references taken."""
        ses = self.ses
        if kind == "session":
            return list(ses.nodes.values()), []
        if kind == "group":
            grp = ses.groups.get(name or "")
            return (list(grp.nodes), []) if grp else -ENOENT
        if kind in ("batch", "batchsrv"):
            bat = ses.batches.get(name or "")
            return (list(bat.srv if kind == "batchsrv" else bat.cli), []) if bat \
                else -ENOENT
        if kind == "nodes" and nids:
            tmp: list[ConNode] = []
            for text in nids:
                nd = self.node_get(NID.parse(text), create)
                if nd is None:
                    for t in tmp:
                        self.node_put(t)
                    return -ENOENT
                if nd in tmp:
                    self.node_put(nd)
                else:
                    tmp.append(nd)
            return list(tmp), tmp
        return -EINVAL

    def op_debug(self, key: int, kind: str, name: str | None = None,
                 nids: list[str] | None = None, timeout: int = 5) -> Gen:
        """``lstcon_*_debug``: who is in which session (``lst ping``)."""
        return (yield from self._query(kind, name, nids, True, Op.SESQRY,
                                       conreply.sesqry_readent, timeout))

    def op_stat(self, key: int, name: str | None = None, nids: list[str] | None = None,
                timeout: int = 5) -> Gen:
        """``lstcon_group_stat``/``lstcon_nodes_stat`` (nodes must be in the session)."""
        return (yield from self._query("nodes" if nids else "group", name, nids, False,
                                       Op.STATQRY, conreply.stat_readent, timeout))

    def _query(self, kind: str, name: str | None, nids: list[str] | None, create: bool, op: Op,
               readent: Callable[[Any], dict[str, Any]], timeout: int) -> Gen:
        """One ``op`` RPC to each node ``_nodes_of`` names, read by ``readent``; the nodes it
        made for the query alone (``create``: NIDs outside the session) are put after."""
        got = self._nodes_of(kind, name, nids, create=create)
        if isinstance(got, int):
            return {"rc": got}
        nodes, tmp = got
        trans = self.conrpc.ndlist(nodes, None, op, self._session_req)
        result = yield from self.conrpc.run(trans, contypes.validate_timeout(timeout), readent)
        for nd in tmp:
            self.node_put(nd)
        return result
