"""The node daemon's lnet_selftest verbs: the lst console's ioctls, and ``lst`` itself.

Theory of operation: real ``lst`` reaches its node's console through ioctls; here the ``lst``
console script sends each one as a ``lstio`` request on the daemon's control socket
(``{"cmd": "lstio", "opc": ..., "key": LST_SESSION, "args": {...}}``), checked here field by
field before it reaches the console (``nodes/selftest/console.py``), whose answer is
returned as is. The ``lst`` verb runs the whole tool in the node (``argv``, with leading
``NAME=VALUE`` words as its environment, e.g. ``LST_SESSION=1``) and returns rc, out, err
when it is done -- what the Python API and the simulator use; a ``stat`` that would run
until interrupted is refused there (the console script streams it). Both work on any
runtime with ``driver``, ``now`` and ``wait_final`` (the daemon's, the simulator's): a wait is
an operation's completion event, on that runtime's clock.
"""

from __future__ import annotations

import asyncio
import io
import socket
from typing import TYPE_CHECKING, Any

from nodes.limits import argv_refusal
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID
from nodes.selftest import nidlist
from nodes.selftest.lstcli import LstTool
from nodes.selftest.node import Selftest

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime

_NAME = (str, type(None))
_INT = (int,)
_BOOL = (bool,)
_LIST = (list, type(None))
#: every console ioctl and its arguments' types (``lstio_*_args``)
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "session_new": {"name": (str,), "timeout": _INT, "force": _BOOL, "feats": _INT},
    "session_info": {}, "session_end": {},
    "debug": {"kind": (str,), "name": _NAME, "nids": _LIST, "timeout": _INT},
    "group_add": {"name": (str,)}, "group_del": {"name": (str,)},
    "nodes_add": {"name": (str,), "nids": (list,)},
    "group_update": {"name": (str,), "action": (str,), "states": _INT, "nids": _LIST},
    "group_list": {"idx": _INT}, "group_info": {"name": (str,)},
    "batch_add": {"name": (str,)}, "batch_start": {"name": (str,), "timeout": _INT},
    "batch_stop": {"name": (str,), "force": _BOOL},
    "batch_query": {"name": (str,), "testidx": _INT, "client": _BOOL, "timeout": _INT},
    "batch_list": {"idx": _INT},
    "batch_info": {"name": (str,), "testidx": _INT, "server": _BOOL},
    "test_add": {"batch": (str,), "type": _INT, "loop": _INT, "concur": _INT, "dist": _INT,
                 "span": _INT, "from": (str,), "to": (str,), "param": (dict,)},
    "stat": {"name": _NAME, "nids": _LIST, "timeout": _INT},
}
MAX_NIDS = nidlist.MAX_NIDS  # one number for lst's lists and the ioctls that carry them
EPOCH = 1_000_000_000  # a wall-clock-like base for the runtimes' clocks (``time``)


def check(req: dict[str, Any]) -> tuple[str, int, dict[str, Any]] | str:
    """(opc, key, args) of a ``lstio`` request, or a one-line error naming the field."""
    opc, key, args = req.get("opc"), req.get("key", 0), req.get("args", {})
    if not isinstance(opc, str) or opc not in SCHEMA:
        return f"lstio: unknown opc {opc!r}"
    if isinstance(key, bool) or not isinstance(key, int) or not -2**31 <= key < 2**31:
        return f"lstio: key must be an int, not {key!r}"
    if not isinstance(args, dict):
        return "lstio: 'args' must be an object"
    schema = SCHEMA[opc]
    for name, value in args.items():
        types = schema.get(name)
        if types is None:
            return f"lstio {opc}: unknown argument {name!r}"
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"lstio {opc}: bad {name} {value!r}"
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**31:
            return f"lstio {opc}: {name} out of range: {value}"
    for field in ("nids",):
        nids = args.get(field)
        if nids is not None:
            if len(nids) > MAX_NIDS or not all(isinstance(n, str) for n in nids):
                return f"lstio {opc}: {field} must be a list of at most {MAX_NIDS} NIDs"
            try:
                for n in nids:
                    NID.parse(n)
            except LNetConfigError as e:
                return f"lstio {opc}: {e.descr}"
    param = args.get("param")
    if param is not None and not all(isinstance(k, str) and isinstance(v, int)
                                     and not isinstance(v, bool) for k, v in param.items()):
        return f"lstio {opc}: param must map names to ints"
    return opc, key, args


class RuntimeIO:
    """``LstIO`` on a node runtime: the console in-process, the runtime's clock."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.st: Selftest = rt.selftest

    async def ioctl(self, opc: str, key: int, args: dict[str, Any]) -> dict[str, Any]:
        await self.rt.share()  # lst's own work before (a NID list expanded) was one step
        checked = check({"opc": opc, "key": key, "args": args})
        if isinstance(checked, str):
            return {"rc": -22, "error": checked}
        started: list[int] = []

        def start() -> tuple[int, list[Any]]:
            handle, actions = self.st.ioctl(self.rt.now(), opc, key, args)
            started.append(handle)
            return handle, actions

        try:
            events = await self.rt.wait_final(start)
        except asyncio.CancelledError:  # the client went away: lst was killed (issue 27)
            if started:
                self.rt.execute(self.st.interrupt(self.rt.now(), started[0]))
                self.st.result(started[0])  # (an answer nobody reads)
            raise
        return self.st.result(events[-1].handle)

    async def sleep(self, seconds: float) -> None:
        await self.rt.wait_final(lambda: self.st.sleep(self.rt.now(), seconds))

    def time(self) -> int:
        """``time(NULL)``: the runtime's clock (virtual seconds from 0 on the sim) moved to
        the epoch's range, so lst's "a delay since the last sample at 0" holds as with a
        real clock."""
        return EPOCH + int(self.rt.now())


async def ioctl(rt: Runtime, req: dict[str, Any]) -> dict[str, Any]:
    """The ``lstio`` verb: one console ioctl."""
    checked = check(req)
    if isinstance(checked, str):
        return {"ok": False, "error": checked}
    opc, key, args = checked
    return {"ok": True, **await RuntimeIO(rt).ioctl(opc, key, args)}


async def run(rt: Runtime, argv: list[str]) -> tuple[int, str, str]:
    """The ``lst`` verb: ``[NAME=VALUE...] COMMAND ARGS...``; (rc, out, err) when done."""
    refused = argv_refusal("lst", argv)  # what execve would refuse (nodes/limits.py)
    if refused is not None:
        return refused
    env: dict[str, str] = {}
    while argv and "=" in argv[0] and argv[0].split("=", 1)[0].isidentifier():
        name, value = argv[0].split("=", 1)
        env[name] = value
        argv = argv[1:]
    out, err = io.StringIO(), io.StringIO()
    tool = LstTool(RuntimeIO(rt), env, out.write, err.write, user="root",
                   host=socket.gethostname())
    tool.endless_ok = False
    rc = await tool.main(list(argv))
    return rc & 0xFF, out.getvalue(), err.getvalue()


VERBS = ("lst", "lstio")


async def dispatch(rt: Runtime, req: dict[str, Any]) -> dict[str, Any]:
    """A control-socket request for one of ``VERBS``.

    Raises:
        ValueError: ``argv`` is not a list of strings (the control server's "bad request").
    """
    if req["cmd"] == "lstio":
        return await ioctl(rt, req)
    argv = req.get("argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError("'argv' must be a list of strings")
    rc, out, err = await run(rt, argv)
    return {"rc": rc, "out": out, "err": err}


__all__ = ["SCHEMA", "VERBS", "RuntimeIO", "check", "dispatch", "ioctl", "run"]
