"""lst's session and group commands (lnet/utils/lst.c ``jt_lst_new_session`` ...
``jt_lst_list_group``), through the console's ioctls, with lst's output word for word.

Theory of operation: each command parses its options as lst does (``getopt_long``; a bad
option prints the command's usage and returns ``CMD_HELP``), checks ``LST_SESSION`` where lst
does, calls the console and prints what lst prints for each outcome; the return value is
lst's (the process exit status is it modulo 256). This is lst's ioctl interface (what every
Lustre up to 2.15 uses; see docs/differences.md for the netlink path of newer ones).
"""

from __future__ import annotations

from errno import EPROTO

from nodes.lnet.nid import NID
from nodes.selftest.getopt import Opt, atoi
from nodes.selftest.lstbase import (
    CMD_HELP,
    LST_NODES_TITLE,
    LstBase,
    state2str,
    str2state,
    strerror,
)
from nodes.selftest.nidlist import parse_nids
from nodes.selftest.wire import LST_NAME_SIZE

_ACTIVE, _BUSY, _DOWN, _UNKNOWN = 1, 2, 4, 8


class GroupCmds(LstBase):
    """Session and group commands."""

    async def new_session(self, argv: list[str]) -> int:
        p = self.getopt("new_session", argv, "ft:", [Opt("timeout", True, "t"),
                                                     Opt("force", False, "f")])
        if p.error:
            return CMD_HELP
        force, timeout, timeout_s = False, 300, None
        for val, arg in p.opts:
            if val == "f":
                force = True
            else:
                timeout_s = arg
        if timeout_s is not None:
            timeout = atoi(timeout_s)
            if timeout <= 0:
                self.err("Invalid timeout value\n")
                return -1
        if len(p.operands) == 1:
            name = p.operands[0]
            if len(name.encode()) >= LST_NAME_SIZE:
                self.err(f"Name size is limited to {LST_NAME_SIZE - 1}\n")
                return -1
        elif not p.operands:
            name = f"{self.user[:LST_NAME_SIZE - 1]}@{self.host[:LST_NAME_SIZE - 1]}"
        else:
            return CMD_HELP
        if self.session_key == 0:
            self.err("Can't find env LST_SESSION or value is not valid\n")
            return -1
        rc = await self.ioctl("session_new", name=name, timeout=timeout, force=force,
                              feats=self.features)
        if rc != 0:
            self.print_error("session", "Failed to create session: %s\n",
                             strerror(self.errno))
            return rc
        self.out(f"SESSION: {name} FEATURES: {self.features:x} TIMEOUT: {timeout} "
                 f"FORCE: {'Yes' if force else 'No'}\n")
        return 0

    async def show_session(self, argv: list[str]) -> int:
        if await self.ioctl("session_info") != 0:
            self.print_error("session", "Failed to show session: %s\n",
                             strerror(self.errno))
            return -1
        r = self.reply
        self.out(f"{r['name']} ID: {r['sid_stamp']}@{NID.from_nid4(r['sid_nid'])}, "
                 f"KEY: {r['key']} FEATURES: {r['feats']:x} NODES: {r['ndinfo']['nnode']}\n")
        return 0

    async def end_session(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        rc = await self.ioctl("session_end")
        if rc == 0:
            self.out("session is ended\n")
            return 0
        if rc == -1:
            self.print_error("session", "Failed to end session: %s\n", strerror(self.errno))
            return rc
        self._trans_failures("session RPCs", "end session on")
        return rc

    def _trans_failures(self, rpcs: str, fwk: str) -> None:
        t = self.trans
        if t["rpc_errno"]:
            self.err(f"[RPC] Failed to send {t['rpc'][2]} {rpcs}: "
                     f"{strerror(t['rpc_errno'])}\n")
        if t["fwk_errno"]:
            self.err(f"[FWK] Failed to {fwk} {t['fwk'][1]} nodes: "
                     f"{strerror(t['fwk_errno'])}\n")

    async def ping(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        p = self.getopt("ping", argv, "g:b:n:t:sv", [
            Opt("session", False, "s"), Opt("server", False, "v"), Opt("batch", True, "b"),
            Opt("group", True, "g"), Opt("nodes", True, "n"), Opt("timeout", True, "t")])
        if p.error:
            return CMD_HELP
        kind, name, timeout, server = "", None, 5, False
        kinds = {"s": "session", "g": "group", "b": "batch", "n": "nodes"}
        for val, arg in p.opts:
            if val in kinds:
                kind, name = kinds[val], (arg if val != "s" else None)
            elif val == "t":
                timeout = atoi(arg or "")
            else:
                server = True
        if not kind or timeout <= 0 or p.operands:
            return CMD_HELP
        if kind == "batch" and server:
            kind = "batchsrv"
        got = await self.node_count(kind, name)
        if got is None:
            self.err(f"Failed to get count of nodes from {name or 'session'}: "
                     f"{strerror(self.errno)}\n")
            return -1
        count, nids = got
        if count == 0:
            self.out(f"Target {name or 'session'} is empty\n")
            return 0
        rc = await self.ioctl("debug", kind=kind, name=name if kind != "nodes" else None,
                              nids=nids or None, timeout=timeout)
        if rc == -1:
            self.print_error("debug", "Failed to ping %s: %s\n", name or "session",
                             strerror(self.errno))
            return -1
        for ent in self.reply.get("ents", [])[:count]:
            st = ent["state"]
            sess = "<NULL>"
            if st in (_ACTIVE, _BUSY):
                sess = ent.get("payload", "") if ent["rpc_errno"] == 0 else "Unknown"
            self.out(f"\t{ent['peer']}: {state2str(st)} [session: {sess} "
                     f"id: {NID.from_nid4(ent['sid_nid'])}]\n")
        return rc

    # ------------------------------------------------------------------ groups
    async def add_group(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        if len(argv) < 2:
            return CMD_HELP
        name = argv[0]
        if len(name.encode()) >= LST_NAME_SIZE:
            self.err(f"Name length is limited to {LST_NAME_SIZE - 1}\n")
            return -1
        if await self.ioctl("group_add", name=name) != 0:
            self.print_error("group", "Failed to add group %s: %s\n", name,
                             strerror(self.errno))
            return -1
        added, rc = False, 0
        for arg in argv[1:]:
            nids, msg = parse_nids(arg)
            if nids is None:
                self.err(f"{msg}\n")
                self.err(f"Ignore invalid id list {arg}\n")
                rc = -1
                continue
            if not nids:
                continue
            rc = await self.ioctl("nodes_add", name=name, nids=[str(n) for n in nids])
            if rc != 0:
                return await self._add_failed(name, arg, rc, added)
            self.out(f"{arg} are added to session\n")
            added = True
            feats = int(self.reply.get("feats", self.features))
            if feats & self.features != self.features:
                self.out("Warning, this session will run with compatible mode because some "
                         "test nodes might not understand these features: "
                         f"{~feats & self.features:x}\n")
        if not added:  # lst: an empty group makes no sense, so it goes again
            self.err(f"No nodes added successfully, deleting group {name}\n")
            rc = await self.del_group_named(name)
            if rc != 0:
                self.err(f"Failed to delete group {name}. Group is empty.\n")
        return rc

    async def _add_failed(self, name: str, arg: str, rc: int, added: bool) -> int:
        """The ``failed:`` path of ``jt_lst_add_group``."""
        if rc == -1:
            self.print_error("group", "Failed to add nodes %s: %s\n", arg,
                             strerror(self.errno))
        else:
            if self.trans["fwk_errno"] == EPROTO:
                self.err("test nodes might have different LST features, please disable "
                         "some features by setting LST_FEATURES\n")
            self.print_transerr(self.reply.get("ents", []), "create session")
        if not added:
            self.err(f"No nodes added successfully, deleting group {name}\n")
            if await self.del_group_named(name) != 0:
                self.err(f"Failed to delete group {name}. Group is empty.\n")
        return rc

    async def del_group_named(self, name: str) -> int:
        """``lst_del_group``."""
        rc = await self.ioctl("group_del", name=name)
        if rc == 0:
            self.out("Group is deleted\n")
            return 0
        if rc == -1:
            self.print_error("group", "Failed to delete group: %s\n", strerror(self.errno))
            return rc
        self.err("Group is deleted with some errors\n")
        self._trans_failures("end session RPCs", "end session on")
        return -1

    async def del_group(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        if len(argv) != 1:
            return CMD_HELP
        return await self.del_group_named(argv[0])

    async def update_group(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        p = self.getopt("update_group", argv, "fc:r:", [
            Opt("refresh", False, "f"), Opt("clean", True, "c"), Opt("remove", True, "r")])
        if p.error:
            return CMD_HELP
        opc, states, ids = "", 0, None
        for val, arg in p.opts:
            if opc:
                return CMD_HELP
            if val == "f":
                opc = "refresh"
            elif val == "r":
                opc, ids = "remove", arg
            else:
                states = str2state(arg or "")
                if states <= 0:
                    return CMD_HELP
                opc = "clean"
        if not opc or len(p.operands) != 1:
            return CMD_HELP
        grp = p.operands[0]
        nids: list[str] | None = None
        if opc in ("remove", "refresh"):
            got = await self.node_count("nodes" if opc == "remove" else "group",
                                        ids if opc == "remove" else grp)
            if got is None:
                self.err(f"Can't get count of nodes from {ids if opc == 'remove' else grp}:"
                         f" {strerror(self.errno)}\n")
                return -1
            nids = got[1] or None
        rc = await self.ioctl("group_update", name=grp, action=opc, states=states, nids=nids)
        if rc == 0:
            return 0
        if rc == -1:
            self.print_error("group", "Failed to update group: %s\n", strerror(self.errno))
            return rc
        self.print_transerr(self.reply.get("ents", []), "Updating group")
        return rc

    async def list_group(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        p = self.getopt("list_group", argv, "abdul", [
            Opt("active", False, "a"), Opt("busy", False, "b"), Opt("down", False, "d"),
            Opt("unknown", False, "u"), Opt("all", False, "l")])
        if p.error:
            return CMD_HELP
        verbose, every, want = False, False, 0
        bits = {"a": _ACTIVE, "b": _BUSY, "d": _DOWN, "u": _UNKNOWN}
        for val, _arg in p.opts:
            verbose = True
            if val == "l":
                every = True
            else:
                every, want = False, want | bits[val]
        if not p.operands:
            return await self._list_names("group_list", "group", "groups")
        if not verbose:
            self.out(LST_NODES_TITLE)
        rc = 0
        for name in p.operands:
            rc = await self.ioctl("group_info", name=name)
            if rc != 0:
                if self.errno == 2:  # ENOENT: lst stops listing here, silently
                    return 0
                self.print_error("group", "Failed to list group: %s\n", strerror(self.errno))
                return rc
            ndi = self.reply["ndinfo"]
            if not verbose:
                self.out(f"\t{ndi['nactive']}\t{ndi['nbusy']}\t{ndi['ndown']}\t"
                         f"{ndi['nunknown']}\t{ndi['nnode']}\t{name}\n")
                continue
            self.out(f"Group [ {name} ]\n")
            if ndi["nnode"] == 0:
                self.out(f"No nodes found [ {name} ]\n")
                continue
            shown = 0
            for peer, state in self.reply["nodes"]:
                if every or (state & want and state in (_ACTIVE, _BUSY, _DOWN, _UNKNOWN)):
                    self.out(f"\t{peer}: {state2str(state)}\n")
                    shown += 1
            self.out(f"Total {shown} nodes [ {name} ]\n")
        return rc
