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
from typing import TYPE_CHECKING

from nodes.daemon.lnetctl_fault import kick, parse_add, parse_del
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.fault import nid_str
from nodes.lnet.nid import LO_NID, NID
from nodes.lnet.ping import PingInfo
from nodes.tools.yamlfmt import dump

if TYPE_CHECKING:
    from nodes.driver import Runtime as NodeRuntime

Result = tuple[int, str, str]


async def run(rt: NodeRuntime, argv: list[str]) -> Result:
    if not argv:
        return 0, ("commands: list_nids ping " + " ".join(_FAULT_CMDS + _TESTBED_CMDS)
                   + "\n"), ""
    cmd, args = argv[0], argv[1:]
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
    return 1, "", f"lctl: unknown command '{cmd}'\n"


_TESTBED_CMDS = ("net_ni_down", "net_ni_up", "testbed_stats")


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
    if not args or len(args) > 3:
        return 1, "", "usage: ping nid [timeout] [pid]\n"
    try:
        nid = NID.parse(args[0])
        timeout = float(args[1]) if len(args) > 1 else 1.0
    except (LNetConfigError, ValueError) as e:
        return 1, "", f"failed to parse '{' '.join(args)}': {e}\n"
    events = await rt.wait_final(lambda: rt.engine.ping(rt.now(), nid, timeout=timeout))
    final = events[-1]
    if final.kind != "REPLY" or final.status != 0:
        status = final.status or -5
        return 1, "", f"failed to ping {nid}: {os.strerror(-status)}\n"
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
