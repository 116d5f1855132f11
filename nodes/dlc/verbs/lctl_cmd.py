"""``lctl`` network verbs served by the node daemon: ``list_nids``, ``ping``, fault rules.

``lctl ping NID [TIMEOUT]`` prints every entry of the peer's ping buffer as ``pid-nid``
(``12345-0@lo`` first), like lustre/utils/portals.c; ``list_nids`` prints the local NIDs.
``net_drop_add|del|list|reset`` and ``net_delay_add|del|list|reset`` (also spelt
``net_drop add`` ...) manage LNet's drop/delay rules with portals.c's options and output lines
(spec §8.1): "Added drop rule SRC->DST (1/RATE)", "Removed N drop rules", the list lines and
"found total N". Bad options print one line on stderr and exit 1, never a traceback.

Testbed-only verbs (real lctl has none of them, docs/differences.md): ``net_ni_down NID`` /
``net_ni_up NID``, the LND hooks that simulate an interface down/up event on a local NI
without touching the interface (hlth-dbg-sim-ni-down/up, ``rt.lnd_link``), and
``testbed_stats [NID]``, seed 003's DESIRED statistics as YAML (``views.testbed_stats``:
hlth-stt-ni-down/up-events, hlth-stt-avg-send-time, hlth-stt-avg-transaction-time).
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nodes.dlc.help import PARSER_COMMANDS, list_commands, usage
from nodes.dlc.output import exit_code
from nodes.dlc.tunables import c_int, parse_long
from nodes.dlc.verbs import lctl_net, lctl_param, lctl_uuid
from nodes.dlc.verbs.lnetctl_fault import kick, parse_add, parse_del
from nodes.dlc.verbs.lnetctl_ping import PING_DEFAULT_TIMEOUT
from nodes.echo import clip
from nodes.limits import argv_error
from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.faultrule import nid_str
from nodes.lnet.nid import LO_NID, NID
from nodes.lnet.ping import PingInfo
from nodes.tools.yamlfmt import dump

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

Result = tuple[int, str, str]


async def run(rt: NodeRuntime, argv: list[str]) -> Result:
    bad = argv_error("lctl", argv)
    if bad is not None:
        return exit_code(-7), "", bad + "\n"
    if not argv or argv[0] in ("help", "--help"):
        return _help(argv[1:])
    if argv[0] in ("--list-commands", "list-commands"):
        return 0, list_commands(PARSER_COMMANDS + COMMANDS), ""
    if argv[0] == "--net" and len(argv) >= 3:  # jt_opt_net: select a net, run the command
        if argv[2] in ("conn_list", "peer_list", "interface_list"):
            return lctl_net.lnd_list(rt, argv[2], argv[1])
        argv = argv[2:]
    cmd, args = argv[0], argv[1:]
    if cmd in _NET_CMDS:
        return await _NET_CMDS[cmd](rt, args)
    if cmd in ("net_drop", "net_delay") and args:
        cmd, args = f"{cmd}_{args[0]}", args[1:]
    if cmd in _FAULT_CMDS:
        return _fault(rt, cmd, args)
    if cmd == "list_nids":
        if not rt.engine.configured:
            return 1, "", "IOC_LIBCFS_GET_NI error 100: Network is down\n"
        return 0, "".join(f"{ni.nid}\n" for ni in rt.engine.local_nis()), ""
    if cmd == "ping":
        return await _ping(rt, args)
    if cmd in _TESTBED_CMDS:
        return _testbed(rt, cmd, args)
    return exit_code(-1), "", (f"lctl: '{clip(cmd)}' is not a valid command. See 'lctl "
                               "--list-commands'.\n")


_TESTBED_CMDS = ("net_ni_down", "net_ni_up", "testbed_stats")


async def _sync(fn: Any, rt: NodeRuntime, args: list[str]) -> Result:
    return fn(rt, args)  # type: ignore[no-any-return]


#: lctl.c ``cmdlist`` network commands beyond list_nids/ping and the fault rules
_NET_CMDS: dict[str, Callable[[NodeRuntime, list[str]], Awaitable[Result]]] = {
    "show_route": lambda rt, a: _sync(lctl_net.show_route, rt, a),
    "route_list": lambda rt, a: _sync(lctl_net.show_route, rt, a),
    "which_nid": lambda rt, a: _sync(lctl_net.which_nid, rt, a),
    "net": lctl_net.network, "network": lctl_net.network,
    "dk": lambda rt, a: _sync(lctl_net.debug_kernel, rt, a),
    "debug_kernel": lambda rt, a: _sync(lctl_net.debug_kernel, rt, a),
    "get_param": lambda rt, a: _sync(lctl_param.get_param, rt, a),
    "set_param": lambda rt, a: _sync(lctl_param.set_param, rt, a),
    **{cmd: (lambda rt, a, c=cmd: _sync(lambda r, x: lctl_net.lnd_list(r, c, None), rt, a))
       for cmd in ("conn_list", "peer_list", "interface_list")},
    "add_uuid": lambda rt, a: _sync(lctl_uuid.add_uuid, rt, a),
    "del_uuid": lambda rt, a: _sync(lctl_uuid.del_uuid, rt, a),
    "set_route": lambda rt, a: _sync(lctl_net.set_route, rt, a),
}
#: the commands ``lctl --list-commands`` shows (lctl.c ``cmdlist``, network subset)
COMMANDS = ("network", "net", "list_nids", "which_nid", "peer_list", "conn_list",
            "interface_list",
            "route_list", "show_route", "ping", "net_drop_add", "net_drop_del",
            "net_drop_reset", "net_drop_list", "net_drop", "net_delay_add", "net_delay_del",
            "net_delay_reset", "net_delay_list", "net_delay", "get_param", "set_param",
            "debug_kernel", "dk", "add_uuid", "del_uuid", "set_route", *_TESTBED_CMDS)
_HELP = {
    "network": "network up|down|NET: configure LNet, or select NET for the next command",
    "list_nids": "list_nids [all]: the local NIDs",
    "which_nid": "which_nid NID [NID...]: the NID LNet would reach first",
    "show_route": "show_route: the routes, one a line",
    "route_list": "route_list: the routes, one a line",
    "ping": "ping [PID-]NID [timeout (secs)]: check LNet connectivity",
    "get_param": "get_param [-n|-N] NAME...: read LNet parameters (peers nis stats routes "
                 "routers buffers ...)",
    "set_param": "set_param [-n] NAME=VALUE...: set LNet parameters",
    "dk": "dk [FILE]: dump and clear the debug log",
    "conn_list": "conn_list: print all the remote LNet connections (after --net NET)",
    "peer_list": "peer_list: print the LND's peers, one a line (after --net NET)",
    "interface_list": "interface_list: print the socklnd's interface (after --net NET)",
    "add_uuid": "associate a UUID with a NID\nusage: add_uuid <uuid> <nid>",
    "del_uuid": "delete a UUID association\nusage: del_uuid <uuid>",
    "set_route": "mark a gateway NID alive or dead, as an LND notice would\n"
                 "usage: set_route <gateway> <up/down> [<time>]",
}


def _help(words: list[str]) -> Result:
    """parser.c ``cfs_parser_help`` for lctl's commands."""
    if not words:
        return 0, usage("lctl"), ""
    name = words[0]
    if name in _HELP:
        return 0, "", f"{name}: {_HELP[name]}\n"
    if name in COMMANDS:
        return 0, "", f"{name}: see the command's usage line\n"
    return 0, "", f"lctl: '{clip(name)}' is not a valid command. See 'lctl --list-commands'.\n"


def _testbed(rt: NodeRuntime, cmd: str, args: list[str]) -> Result:
    """The testbed-only verbs: simulated NI link events and the testbed statistics."""
    if not rt.engine.configured:
        return 1, "", f"{cmd}: LNet is not configured: Network is down\n"
    usage = "usage: testbed_stats [NID]" if cmd == "testbed_stats" else f"usage: {cmd} NID"
    if len(args) > 1 or (cmd != "testbed_stats" and not args):
        return 1, "", usage + "\n"
    try:
        if cmd == "testbed_stats":
            return 0, dump(rt.engine.view("testbed", nid=args[0] if args else None)), ""
        nid = NID.parse(args[0])
        up = cmd == "net_ni_up"
        changed = rt.lnd_link(nid, up)
    except LNetConfigError as e:
        return 1, "", f"{cmd}: {e.descr}\n"
    state = "up" if up else "down"
    return 0, (f"{nid}: link {state} event reported\n" if changed
               else f"{nid}: link already {state}\n"), ""


async def _ping(rt: NodeRuntime, args: list[str]) -> Result:
    """portals.c ``jt_ptl_ping``: ``ping [PID-]NID [TIMEOUT]``. The timeout is ``1000 *
    atol(T)`` ms, refused above 120 s; unless that is 1000 (the default) the *text* T goes to
    the kernel, which reads it as milliseconds and keeps it when 0 < T < 180000, else waits
    180 s (api-ni.c ``lnet_genl_ping_prerun``) -- so ``lctl ping NID 2`` waits 2 ms, as the
    real tool does. Failures print ``failed to ping ID: why`` on stdout."""
    if not args:
        return exit_code(-EINVAL), "", "usage: ping id [timeout (secs)]\n"
    word = args[0]
    pid_part, dash, rest = word.partition("-")
    with_pid = bool(dash and pid_part.lstrip("uU").isdigit())
    try:
        nid = NID.parse(rest if with_pid else word)
    except LNetConfigError:  # portals.c lnet_parse_nid / jt_ptl_ping's own check
        what = "PID" if with_pid else "NID"
        return exit_code(-EINVAL), "", f'Invalid {what} argument "{clip(word)}"\n'
    timeout = float(PING_DEFAULT_TIMEOUT)
    if len(args) > 1:
        m = re.match(r"\s*([+-]?\d+)", args[1])
        ms = c_int(1000 * int(m.group(1))) if m else 0
        if ms > 120 * 1000:
            return exit_code(-EINVAL), "", f"Timeout {args[1]} is to large\n"
        if ms != 1000:
            value = parse_long(args[1])
            if value is not None and 0 < value < PING_DEFAULT_TIMEOUT * 1000:
                timeout = value / 1000
    events = await rt.wait_final(lambda: rt.engine.ping(rt.now(), nid, timeout=timeout))
    final = events[-1]
    if final.kind != "REPLY" or final.status != 0:
        status = final.status or -5
        return exit_code(status), f"failed to ping {word}: {os.strerror(-status)}\n", ""
    info = PingInfo.unpack(final.payload)
    lines = [f"{info.pid}-{LO_NID}"] + [f"{info.pid}-{n}" for n, _ in info.nis]
    return 0, "\n".join(lines) + "\n", ""


_FAULT_CMDS = tuple(f"net_{k}_{v}" for k in ("drop", "delay") for v in ("add", "del", "list",
                                                                         "reset"))


def _fault(rt: NodeRuntime, cmd: str, args: list[str]) -> Result:
    """portals.c ``fault_simul_rule_add|del|list|reset`` against the engine's rules."""
    _, kind, verb = cmd.split("_")
    if not rt.engine.configured:
        return 1, "", "IOC_LIBCFS_LNET_FAULT failed: Network is down\n"
    faults = rt.engine.faults
    try:
        if verb == "add":
            attr = parse_add(kind, args)
            faults.add(kind, attr, rt.now())
            return 0, (f"Added {kind} rule {nid_str(attr.src)}->{nid_str(attr.dst)} "
                       f"(1/{attr.rate})\n"), ""
        if verb == "del":
            src, dst = parse_del(args)
            n = faults.delete(kind, src, dst, rt.now())
            kick(rt)
            return 0, f"Removed {n} {kind} rules\n", ""
        if args:
            raise LNetConfigError(-22, f"{cmd}: unexpected argument '{args[0]}'")
    except LNetConfigError as e:
        return 1, "", f"{e.descr}\n"
    if verb == "reset":
        faults.reset(kind, rt.now())
        return 0, "", ""
    rules = faults.rules(kind)
    lines = [f"LNet {kind} rules:"] + [r.list_line() for r in rules]
    return 0, "\n".join([*lines, f"found total {len(rules)}"]) + "\n", ""
