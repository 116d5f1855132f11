"""``lnetctl route add|del|show`` and ``lnetctl routing show`` (spec §6.1, §9.1-9.3).

Theory of operation: the options of lnetctl.c ``jt_add_route``/``jt_del_route``/
``jt_show_route`` (``--net --gateway --hop|--hop-count --priority -v``) are parsed here; numbers
that do not parse are refused with a one-line error (lnetctl's ``parse_long``); the checks and
errnos of the kernel's ``lnet_add_route``/``lnet_del_route`` live in ``nodes/lnet/router.py``.
Errors are lnetctl's error YAML (``add: - route: errno, descr``) on stderr. ``set routing``
and ``set *_buffers`` go through the generic ``set`` verb (engine tunables -> router).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from nodes.daemon.lnetctl_cmd import UsageError, _exit, _fail, _Parser, _verbosity
from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.nid import NID, Net
from nodes.tools.yamlfmt import dump

if TYPE_CHECKING:
    from nodes.driver import Runtime as NodeRuntime

Result = tuple[int, str, str]


def _num(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        raise LNetConfigError(-EINVAL, f"invalid {what} value '{text}'") from None


def _parser(verb: str) -> argparse.ArgumentParser:
    p = _Parser(prog=f"lnetctl route {verb}", add_help=False, exit_on_error=False)
    p.add_argument("--net")
    p.add_argument("--gateway")
    if verb != "del":
        p.add_argument("--hop", "--hop-count", "--hop_count", dest="hop")
        p.add_argument("--priority")
    if verb == "show":
        p.add_argument("-v", "--verbose", nargs="?", const=1, default=None, type=int)
    return p


async def _add(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    try:
        if not ns.net or not ns.gateway:
            raise LNetConfigError(-EINVAL, "missing mandatory parameter(s): "
                                  + ", ".join(o for o, v in (("--net", ns.net),
                                                             ("--gateway", ns.gateway)) if not v))
        net, gw = Net.parse(ns.net), NID.parse(ns.gateway)
        hop, prio = _num(ns.hop, "hop"), _num(ns.priority, "priority")
        if hop == -1:
            hop = None  # lnetctl's "undefined" hop count
        rt.execute(rt.engine.router.add(net, gw, hop, prio or 0, rt.now()))
    except LNetConfigError as e:
        return _fail("add", "route", e)
    return 0, "", ""


async def _del(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    try:
        if not ns.gateway and not ns.net:
            raise LNetConfigError(-EINVAL, "missing mandatory parameter(s): --net, --gateway")
        net = Net.parse(ns.net) if ns.net else None
        gw = NID.parse(ns.gateway) if ns.gateway else None
        rt.engine.router.delete(net, gw)
    except LNetConfigError as e:
        return _fail("del", "route", e)
    return 0, "", ""


async def _show(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    try:
        doc = rt.engine.router.route_show(ns.net, ns.gateway, _num(ns.hop, "hop"),
                                          _num(ns.priority, "priority"), _verbosity(ns))
    except LNetConfigError as e:
        return _fail("show", "route", e)
    return 0, dump(doc) if doc["route"] else "", ""


_VERBS = {"add": _add, "del": _del, "show": _show}


async def run(rt: NodeRuntime, obj: str, argv: list[str]) -> Result:
    """``lnetctl route <verb> ...`` or ``lnetctl routing show``."""
    import errno as errno_mod

    from nodes.tools.yamlfmt import error_doc

    if obj == "routing":
        if argv[:1] != ["show"]:
            return 255, "", "lnetctl routing: unknown command (valid: show)\n"
        if not rt.engine.configured:
            return _exit(-errno_mod.ENETDOWN), "", error_doc(
                "show", "routing", -errno_mod.ENETDOWN, "LNet is not configured: Network is down")
        doc = rt.engine.router.routing_show()
        return 0, dump(doc) if doc else "", ""
    if not argv or argv[0] not in _VERBS:
        return 255, "", "lnetctl route: unknown command (valid: add, del, show)\n"
    verb = argv[0]
    try:
        ns = _parser(verb).parse_args(argv[1:])
    except (UsageError, argparse.ArgumentError) as e:
        return 255, "", f"{e}\n"
    if not rt.engine.configured:
        return _exit(-errno_mod.ENETDOWN), "", error_doc(
            verb, "route", -errno_mod.ENETDOWN, "LNet is not configured: Network is down")
    return await _VERBS[verb](rt, ns)
