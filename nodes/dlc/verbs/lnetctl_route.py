"""``lnetctl route show`` and ``lnetctl routing show`` (spec §6.1, §9.1-9.3).

Theory of operation: ``route add|del`` are typed DLC commands (``nodes/dlc``); ``route show``
reads its options as lnetctl.c ``jt_show_route`` does (``-n -g -c -p -v``, ``--hop|--hop-count``;
a number that does not parse is ignored, as ``parse_long`` failures are) and prints the
engine's route table; ``routing show`` (``jt_show_routing``) takes no options.
"""

from __future__ import annotations

import errno as E
from typing import TYPE_CHECKING

from nodes.dlc.cmdline import NO, REQ, LongOpt, Stop, check_cmd, long_or, options
from nodes.dlc.output import Result, error
from nodes.lnet.errors import LNetConfigError
from nodes.tools.yamlfmt import dump

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

_SHOW = (LongOpt("net", REQ, "n"), LongOpt("gateway", REQ, "g"), LongOpt("hop-count", REQ, "c"),
         LongOpt("hop", REQ, "c"), LongOpt("priority", REQ, "p"),
         LongOpt("verbose", NO, "v"))


async def route_show(rt: NodeRuntime, args: list[str]) -> Result:
    try:
        check_cmd("route", "show", args, 0)
        opts, _ = options("show", args, "c:n:g:p:v", _SHOW, help_of=("route", "show"))
    except Stop as stop:
        return stop.result
    got = {o: v for o, v in opts}
    hop, prio = long_or(got.get("c")), long_or(got.get("p"))
    try:
        doc = rt.engine.router.route_show(got.get("n"), got.get("g"),
                                          None if hop == -1 else hop,
                                          None if prio == -1 else prio, int("v" in got))
    except LNetConfigError as e:
        return error("show", "route", e.errno, e.descr)
    return 0, dump(doc) if doc["route"] else "", ""


async def routing_show(rt: NodeRuntime, args: list[str]) -> Result:
    try:
        check_cmd("routing", "show", args, 0)
    except Stop as stop:
        return stop.result
    if not rt.engine.configured:
        return error("show", "routing", -E.ENETDOWN, "LNet is not configured: Network is down")
    doc = rt.engine.router.routing_show()
    return 0, dump(doc) if doc else "", ""
