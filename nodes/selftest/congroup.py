"""The lst console's groups (lnet/selftest/console.c ``lstcon_group_*``, ``lstcon_nodes_*``),
sans-I/O.

Theory of operation: a group is an ordered list of the session's nodes. Adding nodes sends
MAKE_SESSION to those not Active yet (``lstcon_group_nodes_add``) and keeps them whatever the
answer (their state says it: Active, Busy in another session, Down, Unknown); deleting the
group or removing nodes sends REMOVE_SESSION to Active nodes no other list holds. ``update
--clean STATE`` drops the nodes in that state, ``--refresh`` invites the inactive ones again.
A group held by a test is busy (EBUSY) and an emptied group is released. The ioctls are
generators that yield the transaction they wait for (see ``console.py``).
"""

from __future__ import annotations

from errno import E2BIG, EBUSY, EEXIST, EINTR, EINVAL, ENOENT
from typing import TYPE_CHECKING, Any

from nodes.lnet.nid import NID
from nodes.selftest import conrpc, contypes
from nodes.selftest.conbatch import Group
from nodes.selftest.contypes import ACTIVE, ConNode, Gen, Op
from nodes.selftest.wire import LST_NAME_SIZE


class GroupOps:
    """Group ioctls of ``console.Console`` (which provides ``ses``, ``conrpc``,
    ``node_get``, ``node_put``, ``count_states`` and ``_session_req``)."""

    ses: Any
    conrpc: conrpc.Conrpc

    if TYPE_CHECKING:  # provided by Console (and BatchOps)
        def node_get(self, nid: NID, create: bool = True) -> ConNode | None: ...
        def node_put(self, nd: ConNode) -> None: ...
        def _session_req(self, nd: ConNode, _feats: int) -> dict[str, Any]: ...
        def count_states(self, nodes: list[ConNode]) -> dict[str, int]: ...

    # ------------------------------------------------------------------ groups
    def op_group_add(self, key: int, name: str) -> Gen:
        """``lstcon_group_add``."""
        yield from ()
        if name in self.ses.groups:
            return {"rc": -EEXIST}
        if len(name.encode()) > LST_NAME_SIZE - 1:
            return {"rc": -E2BIG}
        self.ses.groups[name] = Group(name)
        return {"rc": 0}

    def _group(self, name: str, busy_ok: bool = False) -> Group | int:
        grp: Group | None = self.ses.groups.get(name)
        if grp is None:
            return -ENOENT
        if grp.tests and not busy_ok:
            return -EBUSY  # referred by a test
        return grp

    def op_nodes_add(self, key: int, name: str, nids: list[str]) -> Gen:
        """``lstcon_nodes_add``: new nodes join the session (SESNEW), then the group."""
        grp = self._group(name)
        if isinstance(grp, int):
            return {"rc": grp}
        if not nids:
            return {"rc": -EINVAL}
        tmp: list[ConNode] = []
        seen = {nd.nid for nd in grp.nodes}  # (a set: a list scan made 65,536 NIDs quadratic)
        for i, text in enumerate(nids):
            if i and i % contypes.POST_BATCH == 0 and (yield from self.conrpc.pause()):
                for made in tmp:  # lst went away before anything was sent
                    self.node_put(made)
                return {"rc": -EINTR}
            nid = NID.parse(text)
            if nid in seen:
                continue
            seen.add(nid)
            nd = self.node_get(nid)
            assert nd is not None
            tmp.append(nd)
        trans = self.conrpc.ndlist(tmp, grp.translist, Op.SESNEW, self._session_req,
                                   lambda nd: int(nd.state != ACTIVE))
        result = yield from self.conrpc.run(trans, contypes.LST_TRANS_TIMEOUT)
        if result["rc"]:
            for nd in tmp:
                self.node_put(nd)
        else:
            grp.nodes += tmp
        return result

    def _release(self, grp: Group, nodes: list[ConNode]) -> None:
        for nd in nodes:
            if nd in grp.nodes:
                grp.nodes.remove(nd)
                self.node_put(nd)

    def _end_nodes(self, grp: Group, nodes: list[ConNode]) -> Gen:
        """SESEND to ``nodes`` that are Active and in no other list (``lstcon_sesrpc_
        condition`` with a group)."""
        trans = self.conrpc.ndlist(nodes, grp.translist, Op.SESEND, self._session_req,
                                   lambda nd: int(nd.state == ACTIVE and nd.refs <= 1))
        return (yield from self.conrpc.run(trans, contypes.LST_TRANS_TIMEOUT))

    def op_group_del(self, key: int, name: str) -> Gen:
        """``lstcon_group_del``: its nodes leave the session, the group goes anyway."""
        grp = self._group(name)
        if isinstance(grp, int):
            return {"rc": grp}
        result = yield from self._end_nodes(grp, list(grp.nodes))
        if result["rc"] == 0:
            self._release(grp, list(grp.nodes))
            self.ses.groups.pop(name, None)
        return result

    def op_group_update(self, key: int, name: str, action: str, states: int = 0,
                        nids: list[str] | None = None) -> Gen:
        """``lstcon_group_clean|refresh``, ``lstcon_nodes_remove``."""
        grp = self._group(name)
        if isinstance(grp, int):
            return {"rc": grp}
        if action == "clean":  # drop the nodes in the given states
            self._release(grp, [nd for nd in grp.nodes if nd.state & states])
            result: dict[str, Any] = {"rc": 0}
        elif action == "remove":
            if not nids:
                return {"rc": -EINVAL}
            wanted = {NID.parse(t) for t in nids}
            gone = [nd for nd in grp.nodes if nd.nid in wanted]
            result = yield from self._end_nodes(grp, gone)
            self._release(grp, gone)
        elif action == "refresh":  # re-invite the inactive nodes
            trans = self.conrpc.ndlist(list(grp.nodes), grp.translist, Op.SESNEW,
                                       self._session_req, lambda nd: int(nd.state != ACTIVE))
            return (yield from self.conrpc.run(trans, contypes.LST_TRANS_TIMEOUT))
        else:
            return {"rc": -EINVAL}
        if not grp.nodes:  # an empty group is released
            self.ses.groups.pop(name, None)
        return result

    def op_group_list(self, key: int, idx: int) -> Gen:
        yield from ()
        names = list(self.ses.groups)
        return {"rc": 0, "name": names[idx]} if 0 <= idx < len(names) else {"rc": -ENOENT}

    def op_group_info(self, key: int, name: str) -> Gen:
        """``lstcon_group_info``: state counts and every node with its state."""
        yield from ()
        grp = self.ses.groups.get(name)
        if grp is None:
            return {"rc": -ENOENT}
        return {"rc": 0, "ndinfo": self.count_states(grp.nodes),
                "nodes": [[nd.id_str, nd.state] for nd in grp.nodes]}
