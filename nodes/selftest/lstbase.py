"""What every ``lst`` command shares: the ioctl, errors as lst prints them, node counts.

Theory of operation: ``lst`` is a client of its node's console, as the real one is of the
kernel (lnet/utils/lst.c ``lst_ioctl``): ``LstIO.ioctl`` carries one console operation (the
node daemon's ``lst`` verb, or an in-process call on the simulator) and ``ioctl`` turns the
answer into lst's return codes: -1 for a local error (``errno`` set), -2 when an RPC failed,
-3 for a framework error, 0. ``print_error`` and ``print_transerr`` are lst's messages for
those, word for word. Output goes through ``out``/``err`` as it is produced, so a long
``lst stat`` streams.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from nodes.selftest.contypes import ACTIVE, BUSY, DOWN, UNKNOWN
from nodes.selftest.getopt import Opt, Parsed, atoi, getopt_long
from nodes.selftest.nidlist import parse_nids
from nodes.selftest.wire import LST_FEATS_MASK

CMD_HELP = 4  # libcfs/util/parser.h
LST_NODES_TITLE = "\tACTIVE\tBUSY\tDOWN\tUNKNOWN\tTOTAL\n"
#: lst_cmdlist's help texts (lst.c), printed on a usage error
USAGE = {
    "new_session": "Usage: lst new_session [--timeout TIME] [--force] [NAME]",
    "end_session": "Usage: lst end_session",
    "show_session": "Usage: lst show_session",
    "ping": "Usage: lst ping  [--group NAME] [--batch NAME] [--session]  [--nodes IDS]",
    "add_group": "Usage: lst group NAME IDs [IDs]...",
    "del_group": "Usage: lst del_group NAME",
    "update_group": "Usage: lst update_group NAME [--clean] [--refresh] [--remove IDs]",
    "list_group": "Usage: lst list_group [--active] [--busy] [--down] [--unknown] GROUP ...",
    "stat": "Usage: lst stat [--bw] [--rate] [--read] [--write] [--max] [--min]  [--avg] "
            "[--mbs] [--timeout #] [--delay #] [--count #] GROUP [GROUP]",
    "show_error": "Usage: lst show_error NAME | IDS ...",
    "add_batch": "Usage: lst add_batch NAME",
    "run": "Usage: lst run [--timeout TIME] [NAME]",
    "stop": "Usage: lst stop [--force] BATCH_NAME",
    "list_batch": "Usage: lst list_batch NAME [--test ID] [--server]",
    "query": "Usage: lst query [--test ID] [--server] [--timeout TIME] NAME",
    "add_test": "Usage: lst add_test [--batch BATCH] [--loop #] [--concurrency #]  "
                "[--distribute #:#] [--from GROUP] [--to GROUP] TEST...",
}
STATES = {ACTIVE: "Active", BUSY: "Busy", DOWN: "Down"}
_ERRNO_TEXT = {3: "No session exists\n", 108: "Session is shutting down\n",
               13: "Unmatched session key or not root\n",
               22: "Invalid parameters list in command line\n", 14: "Bad parameter address\n"}


def state2str(state: int) -> str:
    """``lst_node_state2str``."""
    return STATES.get(state, "Unknown")


def str2state(text: str) -> int:
    """``lst_node_str2state``."""
    return {"active": ACTIVE, "busy": BUSY, "down": DOWN, "unknown": UNKNOWN,
            "invalid": UNKNOWN | DOWN | BUSY}.get(text.lower(), -1)


def strerror(e: int) -> str:
    """C ``strerror`` (a negative value gives glibc's "Unknown error -N")."""
    return os.strerror(e)


class LstIO(Protocol):
    """Where lst's console operations go, and its clock."""

    async def ioctl(self, opc: str, key: int, args: dict[str, Any]) -> dict[str, Any]: ...
    async def sleep(self, seconds: float) -> None: ...
    def time(self) -> int: ...


class LstBase:
    """State of one ``lst`` run: the session key, the last ioctl's errno and stats."""

    def __init__(self, io: LstIO, env: Mapping[str, str], out: Callable[[str], None],
                 err: Callable[[str], None], user: str = "root", host: str = "localhost"
                 ) -> None:
        self.io = io
        self.out = out
        self.err = err
        self.user, self.host = user, host
        self.session_key = _atoi_env(env.get("LST_SESSION"))
        self.features = LST_FEATS_MASK
        feats = env.get("LST_FEATURES")
        if feats is not None:
            try:
                self.features = int(feats, 16)
            except ValueError:
                self.features = 0
        self.errno = 0
        #: False where output is returned at the end (a verb): no run-until-interrupted
        self.endless_ok = True
        self.trans: dict[str, Any] = {"rpc": [0] * 4, "rpc_errno": 0, "fwk": [0] * 8,
                                      "fwk_errno": 0}
        self.reply: dict[str, Any] = {}

    # ------------------------------------------------------------------ ioctl
    async def ioctl(self, opc: str, **args: Any) -> int:
        """``lst_ioctl``: -1 (``errno`` set), -2 (RPC error), -3 (framework error), 0."""
        reply = await self.io.ioctl(opc, self.session_key, args)
        self.reply = reply
        self.trans = reply.get("trans") or self.trans
        rc = int(reply.get("rc", 0))
        if rc != 0:
            self.errno = -rc
            return -1
        if self.trans.get("rpc_errno"):
            return -2
        if self.trans.get("fwk_errno"):
            return -3
        return 0

    def no_session_key(self) -> int | None:
        """The check every command but new/show_session starts with."""
        if self.session_key == 0:
            self.err("Can't find env LST_SESSION or value is not valid\n")
            return -1
        return None

    def print_error(self, sub: str, fmt: str, *args: Any) -> None:
        """``lst_print_error``: lst's text for the errno, else ``fmt``."""
        e = self.errno
        if e in _ERRNO_TEXT:
            self.err(_ERRNO_TEXT[e])
        elif e == 2:  # ENOENT
            self.err(f"Can't find {sub} in current session\n")
        elif e == 17:  # EEXIST
            self.err(f"{sub} already exists\n")
        else:
            self.err(fmt % args)

    def print_transerr(self, ents: list[dict[str, Any]], optstr: str) -> None:
        """``lst_print_transerr``: one line per node whose RPC or operation failed."""
        for ent in ents:
            if ent.get("rpc_errno"):
                self.err(f"{optstr} RPC failed on {ent['peer']}: "
                         f"{strerror(ent['rpc_errno'])}\n")
            elif ent.get("fwk_errno"):
                self.err(f"operation {optstr} failed on {ent['peer']}: "
                         f"{strerror(ent['fwk_errno'])}\n")

    def getopt(self, cmd: str, argv: list[str], short: str, longs: list[Opt]) -> Parsed:
        parsed = getopt_long(cmd, argv, short, longs)
        if parsed.error is not None:
            self.err(parsed.error + "\n")
        return parsed

    async def _list_names(self, opc: str, sub: str, plural: str) -> int:
        """``lst_list_group_all`` / ``lst_list_batch_all``."""
        i = 0
        while True:
            if await self.ioctl(opc, idx=i) != 0:
                if self.errno == 2:
                    break
                self.print_error(sub, f"Failed to list {sub}: %s\n", strerror(self.errno))
                return -1
            self.out(f"{i + 1}) {self.reply['name']}\n")
            i += 1
        self.out(f"Total {i} {plural}\n")
        return 0

    # ------------------------------------------------------------------ node counts
    async def node_count(self, kind: str, name: str | None) -> tuple[int, list[str]] | None:
        """``lst_get_node_count``: (count, NIDs for a list) or None (``errno`` set)."""
        if kind == "session":
            rc = await self.ioctl("session_info")
            return (self.reply["ndinfo"]["nnode"], []) if rc == 0 else None
        if kind in ("batch", "batchsrv"):
            rc = await self.ioctl("batch_info", name=name, server=kind == "batchsrv")
            side = "srv" if kind == "batchsrv" else "cli"
            return (self.reply[side]["nnode"], []) if rc == 0 else None
        if kind == "group":
            rc = await self.ioctl("group_info", name=name)
            return (self.reply["ndinfo"]["nnode"], []) if rc == 0 else None
        nids, msg = parse_nids(name or "")
        if nids is None:  # errno stays what it was, as after lst_parse_nids
            self.err((msg or "") + "\n")
            return None
        return len(nids), [str(n) for n in nids]


def _atoi_env(value: str | None) -> int:
    return 0 if value is None else atoi(value)
