"""``lnetctl`` verbs, served by the node daemon (spec §9.1).

Theory of operation: the ``lnetctl`` console script sends its argv unchanged; this module parses
it, calls the DLC API of the engine (through ``NodeRuntime`` where the LND is involved), and
returns ``(rc, stdout, stderr)`` exactly as lnetctl would print them: YAML documents on stdout,
cYAML error blocks (errno + descr) on stderr, and a non-zero exit status on failure
(the negative errno truncated to 8 bits, as a C ``main`` returning it would give).
"""

from __future__ import annotations

import argparse
import errno as errno_mod
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.nid import NID, Net
from nodes.lnet.ping import PingInfo
from nodes.lnet.tunables import TUNABLE_NAMES
from nodes.tools.yamlfmt import dump, error_doc

if TYPE_CHECKING:
    from nodes.driver import Runtime as NodeRuntime

Result = tuple[int, str, str]
Handler = Callable[["NodeRuntime", argparse.Namespace], Awaitable[Result]]

#: DEFAULT_PEER_TIMEOUT: `lnetctl ping` without --timeout waits up to this long (spec §3.4)
PING_DEFAULT_TIMEOUT = 180


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _exit(err: int) -> int:
    return (256 + err) % 256 or 1


def _fail(cmd: str, entity: str, e: LNetConfigError) -> Result:
    return _exit(e.errno), "", error_doc(cmd, entity, e.errno, e.descr)


def _verbosity(ns: argparse.Namespace) -> int:
    v = ns.verbose
    return 0 if v is None else int(v)


def _nid_list(text: str | None) -> list[NID]:
    if not text:
        return []
    return [NID.parse(t) for t in text.split(",") if t.strip()]


# ---------------------------------------------------------------------------- handlers
async def _lnet_configure(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    rt.engine.configure()
    return 0, "", ""


async def _lnet_unconfigure(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    await rt.unconfigure()
    return 0, "", ""


async def _net_add(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    try:
        net = Net.parse(ns.net)
        if not ns.interface:
            raise LNetConfigError(-EINVAL, "cannot add network: no interface given")
        for iface in ns.interface.split(","):
            kw = {} if ns.numa is None else {"numa": ns.numa}  # testbed extension
            await rt.net_add(net, iface.strip(), peer_credits=ns.peer_credits,
                             credits=ns.credits, peer_timeout=ns.peer_timeout, **kw)
    except LNetConfigError as e:
        return _fail("add", "net", e)
    return 0, "", ""


async def _net_del(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    try:
        await rt.net_del(Net.parse(ns.net), ns.interface)
    except LNetConfigError as e:
        return _fail("del", "net", e)
    return 0, "", ""


def _lnd_timeout_set(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    """``lnetctl net set --net N --lnd-timeout S``: the LND timeout of that net's NIs (socklnd
    connect/stale/progress timeout and message deadline; seed 003 hlth-lnd-tx-timeout-from-lnet)."""
    try:
        if ns.lnd_timeout < 0:
            raise LNetConfigError(-EINVAL, f"Invalid LND timeout value '{ns.lnd_timeout}', "
                                           "must be >= 0")
        if not ns.net:
            raise LNetConfigError(-EINVAL, "Specified --lnd-timeout without --net option")
        if not rt.set_lnd_timeout(Net.parse(ns.net), ns.lnd_timeout):
            raise LNetConfigError(-errno_mod.ENOENT, f"no NI on net {ns.net}")
    except LNetConfigError as e:
        return _fail("set", "net", e)
    return 0, "", ""


async def _net_show(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    try:
        doc = rt.engine.view("net", net=ns.net, verbose=_verbosity(ns))
    except LNetConfigError as e:
        return _fail("show", "net", e)
    return 0, dump(doc) if doc["net"] else "", ""


async def _peer_add(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    try:
        rt.engine.peer_add(NID.parse(ns.prim_nid), _nid_list(ns.nid), non_mr=ns.non_mr,
                           lock_prim=ns.lock_prim)
    except LNetConfigError as e:
        return _fail("add", "peer", e)
    return 0, "", ""


async def _peer_del(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    try:
        rt.engine.peer_del(NID.parse(ns.prim_nid), _nid_list(ns.nid), force=ns.force)
    except LNetConfigError as e:
        return _fail("del", "peer", e)
    return 0, "", ""


async def _peer_show(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    try:
        doc = rt.engine.view("peer", nid=ns.nid, verbose=_verbosity(ns))
    except LNetConfigError as e:
        return _fail("show", "peer", e)
    return 0, dump(doc) if doc["peer"] else "", ""


async def _global_show(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    return 0, dump(rt.engine.view("global")), ""


async def _stats_show(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    return 0, dump(rt.engine.view("stats")), ""


async def _stats_reset(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    rt.engine.stats_reset()  # spec §4.5: health counters are kept
    return 0, "", ""


async def _set(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    if ns.param == "multi_rail":  # testbed only: a downrev node (discovery.py, differences)
        return _set_multi_rail(rt, ns.value)
    if ns.param not in TUNABLE_NAMES:
        return 255, "", f"lnetctl set: unknown parameter '{ns.param}'\n"
    from nodes.daemon import lnetctl_set  # lnetctl/liblnetconfig errors, byte for byte

    return lnetctl_set.set_tunable(rt, ns.param, ns.value)


def _set_multi_rail(rt: NodeRuntime, value: str) -> Result:
    """``lnetctl set multi_rail 0|1`` (testbed only): 0 makes this node a non-Multi-Rail
    ("downrev") node: no MULTI_RAIL/DISCOVERY feature bits, pushes dropped, never initiates
    discovery, one NI per net (seed 000 Backwards Compatibility). Only before any NI exists."""
    if value not in ("0", "1"):
        return 255, "", error_doc("parser", "set", -1, "multi_rail must be 0 or 1")
    if rt.engine.local_nis():
        e = LNetConfigError(-errno_mod.EBUSY, "multi_rail can only be set before any NI is "
                                              "added")
        return _fail("add", "multi_rail", e)
    rt.engine.multi_rail = value == "1"
    return 0, "", ""


async def _discover(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    """``lnetctl discover [--force] NID[,NID]`` (spec §5.3, §9.3): blocking discovery, then
    the peer's NIDs under ``discover:`` (errors under ``manage: - discover:``)."""
    from nodes.lnet import discovery

    targets = [t for arg in ns.nids for t in arg.split(",") if t.strip()]
    if not targets:
        return 255, "", "lnetctl discover: no NID given\n"
    ok: list[dict[str, Any]] = []
    errors: list[str] = []
    rc = 0
    for target in targets:
        try:
            nid = NID.parse(target)
        except LNetConfigError as e:
            errors.append(_ping_error(target, e.errno, e.descr, "discover"))
            rc = e.errno
            continue
        final = (await rt.wait_final(lambda n=nid: discovery.discover(
            rt.engine, n, rt.now(), force=ns.force)))[-1]
        peer = rt.engine.peers.find_peer(nid)
        if final.status or peer is None:
            status = final.status or -errno_mod.ENOENT
            errors.append(_ping_error(target, status, os.strerror(-status), "discover"))
            rc = status
            continue
        ok.append({"primary nid": str(peer.primary_nid), "Multi-Rail": peer.multi_rail,
                   "peer_ni": [{"nid": str(lpni.nid)} for lpni in peer.lpnis]})
    out = dump({"discover": ok}) if ok else ""
    return (_exit(rc) if rc else 0), out, "".join(errors)


async def _ping(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    timeout = PING_DEFAULT_TIMEOUT if ns.timeout is None else min(ns.timeout,
                                                                   PING_DEFAULT_TIMEOUT)
    targets = [t for arg in ns.nids for t in arg.split(",") if t.strip()]
    if not targets:
        return 255, "", "lnetctl ping: no NID given\n"
    ok: list[dict[str, Any]] = []
    errors: list[str] = []
    rc = 0
    for target in targets:
        try:
            nid = NID.parse(target)
            src = NID.parse(ns.source) if ns.source else None
        except LNetConfigError as e:
            errors.append(_ping_error(target, e.errno, e.descr))
            rc = e.errno
            continue
        events = await rt.wait_final(lambda n=nid, s=src: rt.engine.ping(
            rt.now(), n, timeout=float(timeout), src=s, numa=ns.numa))
        final = events[-1]
        if final.kind == "REPLY" and final.status == 0:
            try:
                info = PingInfo.unpack(final.payload)
            except Exception as e:
                errors.append(_ping_error(target, -errno_mod.EPROTO, str(e)))
                rc = -errno_mod.EPROTO
                continue
            nids = [str(n) for n, _st in info.nis]
            ok.append({"primary nid": nids[0] if nids else str(nid),
                       "Multi-Rail": bool(info.features & 0x8),
                       "peer_ni": [{"nid": n} for n in nids]})
        else:
            status = final.status or -errno_mod.EIO
            errors.append(_ping_error(target, status, os.strerror(-status)))
            rc = status
    out = dump({"ping": ok}) if ok else ""
    return (_exit(rc) if rc else 0), out, "".join(errors)


def _ping_error(target: str, err: int, why: str, verb: str = "ping") -> str:
    return (f"manage:\n    - {verb}:\n      errno: {err}\n"
            f"      descr: failed to {verb} {target}: {why}\n")


async def _health_set(rt: NodeRuntime, ns: argparse.Namespace, obj: str) -> Result:
    """``lnetctl net|peer set (--nid NID | --all) --health V`` (spec §3.6)."""
    try:
        if not ns.all and not ns.nid:
            raise LNetConfigError(-EINVAL, "missing --nid or --all")
        nid = None if ns.all else NID.parse(ns.nid)
        if ns.health is not None:
            try:
                value = int(ns.health, 0)
            except ValueError:
                value = -1  # lnetctl parse_long failure -> -1 -> kernel uses 1000
            setter = rt.engine.net_set_health if obj == "net" else rt.engine.peer_set_health
            setter(nid, value, rt.now())
            rt.execute([])  # re-arm the timer: recovery may now be due
    except LNetConfigError as e:
        return _fail("set", obj, e)
    return 0, "", ""


async def _net_set(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    if ns.lnd_timeout is not None:
        result = _lnd_timeout_set(rt, ns)
        if result[0] or (ns.health is None and not ns.nid and not ns.all):
            return result
    return await _health_set(rt, ns, "net")


async def _peer_set(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    return await _health_set(rt, ns, "peer")


async def _debug_recovery(rt: NodeRuntime, ns: argparse.Namespace) -> Result:
    """``lnetctl debug recovery --local|--peer`` (spec §9.3); nothing when the queue is empty."""
    if ns.local == ns.peer:
        return 255, "", "lnetctl debug recovery: give exactly one of --local, --peer\n"
    doc = rt.engine.view("recovery", local=ns.local)
    return 0, dump(doc) if doc else "", ""


# ---------------------------------------------------------------------------- parsers
def numa_node(text: str) -> int:
    """``--numa N`` (testbed extension, docs/differences.md NUMA row): a node number >= 0."""
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _verbose_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", nargs="?", const=1, default=None, type=int)


def _build() -> dict[tuple[str, str], tuple[argparse.ArgumentParser, Handler]]:
    table: dict[tuple[str, str], tuple[argparse.ArgumentParser, Handler]] = {}

    def add(obj: str, verb: str, handler: Handler) -> argparse.ArgumentParser:
        p = _Parser(prog=f"lnetctl {obj} {verb}".strip(), add_help=False, exit_on_error=False)
        table[(obj, verb)] = (p, handler)
        return p

    add("lnet", "configure", _lnet_configure).add_argument("--all", action="store_true")
    add("lnet", "unconfigure", _lnet_unconfigure)
    p = add("net", "add", _net_add)
    p.add_argument("--net", required=True)
    p.add_argument("--if", dest="interface")
    p.add_argument("--peer-credits", "--peer_credits", dest="peer_credits", type=int)
    p.add_argument("--credits", type=int)
    p.add_argument("--peer-timeout", "--peer_timeout", dest="peer_timeout", type=int)
    p.add_argument("--cpt")
    p.add_argument("--numa", type=int)  # testbed extension: NUMA node of the device
    p = add("net", "set", _net_set)
    for q in (p, add("peer", "set", _peer_set)):
        q.add_argument("--nid")
        q.add_argument("--all", action="store_true")
        q.add_argument("--health")
    p.add_argument("--net")
    p.add_argument("--lnd-timeout", "--lnd_timeout", dest="lnd_timeout", type=int)
    p = add("debug", "recovery", _debug_recovery)
    p.add_argument("--local", action="store_true")
    p.add_argument("--peer", action="store_true")
    p = add("net", "del", _net_del)
    p.add_argument("--net", required=True)
    p.add_argument("--if", dest="interface")
    p = add("net", "show", _net_show)
    p.add_argument("--net")
    _verbose_opt(p)
    p = add("peer", "add", _peer_add)
    p.add_argument("--prim_nid", "--prim-nid", dest="prim_nid", required=True)
    p.add_argument("--nid")
    p.add_argument("--non_mr", "--non-mr", dest="non_mr", action="store_true")
    p.add_argument("--lock_prim", "--lock-prim", dest="lock_prim", action="store_true")
    p = add("peer", "del", _peer_del)
    p.add_argument("--prim_nid", "--prim-nid", dest="prim_nid", required=True)
    p.add_argument("--nid")
    p.add_argument("--force", action="store_true")
    p = add("peer", "show", _peer_show)
    p.add_argument("--nid")
    _verbose_opt(p)
    add("global", "show", _global_show)
    add("stats", "show", _stats_show)
    add("stats", "reset", _stats_reset)
    p = add("set", "", _set)
    p.add_argument("param")
    p.add_argument("value")
    p = add("discover", "", _discover)
    p.add_argument("--force", action="store_true")
    p.add_argument("nids", nargs="*")
    p = add("ping", "", _ping)
    p.add_argument("--source")
    p.add_argument("--timeout", type=int)
    p.add_argument("--numa", type=numa_node)  # testbed extension: NUMA node of the memory
    p.add_argument("nids", nargs="*")
    return table


_TABLE = _build()
_OBJECTS = sorted({obj for obj, _ in _TABLE})


async def run(rt: NodeRuntime, argv: list[str]) -> Result:
    """Execute one lnetctl command line (without the program name)."""
    if not argv or argv[0] in ("help", "--help", "--list-commands"):
        return 0, "commands: " + " ".join(_OBJECTS) + "\n", ""
    obj = argv[0]
    if obj == "fault":  # lnetctl fault drop|delay ... (nodes/daemon/lnetctl_fault.py, spec §8.1)
        from nodes.daemon import lnetctl_fault

        if not rt.engine.configured:
            return _exit(-errno_mod.ENETDOWN), "", error_doc(
                "manage", "fault", -errno_mod.ENETDOWN, "LNet is not configured: Network is down")
        return await lnetctl_fault.run(rt, argv[1:])
    if obj in ("route", "routing"):  # nodes/daemon/lnetctl_route.py (spec §6.1, §9.3)
        from nodes.daemon import lnetctl_route

        return await lnetctl_route.run(rt, obj, argv[1:])
    if obj in ("udsp", "export", "import"):  # nodes/daemon/lnetctl_config.py (spec §7, §9.4)
        from nodes.daemon import lnetctl_config

        return await lnetctl_config.run(rt, obj, argv[1:])
    if (obj, "") in _TABLE:
        parser, handler = _TABLE[(obj, "")]
        rest = argv[1:]
    elif len(argv) >= 2 and (obj, argv[1]) in _TABLE:
        parser, handler = _TABLE[(obj, argv[1])]
        rest = argv[2:]
    elif any(o == obj for o, _ in _TABLE):
        verbs = ", ".join(v for o, v in _TABLE if o == obj)
        return 255, "", f"lnetctl {obj}: unknown command (valid: {verbs})\n"
    else:
        return 255, "", (f"lnetctl: '{obj}' is not a valid command. "
                         "See 'lnetctl --list-commands'.\n")
    try:
        ns = parser.parse_args(rest)
    except (UsageError, argparse.ArgumentError) as e:
        return 255, "", f"{e}\n"
    if obj not in ("lnet", "set", "global") and not rt.engine.configured:
        return _exit(-errno_mod.ENETDOWN), "", error_doc(
            argv[1] if len(argv) > 1 and (obj, "") not in _TABLE else "manage", obj,
            -errno_mod.ENETDOWN, "LNet is not configured: Network is down")
    return await handler(rt, ns)
