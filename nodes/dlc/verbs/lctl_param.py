"""``lctl get_param`` / ``set_param`` of LNet's debugfs files (lnet/lnet/lnet_debugfs.c).

Theory of operation: each file is a pure function of engine state printing what the kernel's
``proc_lnet_*`` handler prints, column for column (``peers``, ``nis``, ``stats``, ``routes``,
``routers``, ``buffers``, ``cpu_partition_table``, ``lnet_lnd_timeout``); ``get_param`` shows
``name=value`` -- a multi-line value on the line after ``name=`` -- or the value alone with
``-n``, the name alone with ``-N`` (lustre/utils/lustre_param.c ``print_param_internal``).
Names may be globs (``get_param *``). ``set_param stats=0`` resets the counters (a write to the
stats file); ``debug`` and ``subsystem_debug`` are stored and shown back; ``fail_loc`` and
``fail_val`` are the engine's ``FailLoc``, written and read as libcfs does (``lctl_failloc``).
"""

from __future__ import annotations

import errno as E
import fnmatch
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from nodes.dlc.cmdline import Stop, options
from nodes.dlc.output import Result, exit_code
from nodes.dlc.verbs import lctl_failloc

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

_DEFAULTS = {"debug": "ioctl neterror warning error emerg ha config console lfsck",
             "subsystem_debug": "all"}


def _stats(rt: NodeRuntime) -> str:
    """``proc_lnet_stats``: 7 counters and 4 byte counts on one line."""
    c = rt.engine.view("stats")["statistics"]
    keys = ("msgs_alloc", "msgs_max", "errors", "send_count", "recv_count", "route_count",
            "drop_count", "send_length", "recv_length", "route_length", "drop_length")
    return " ".join(str(c.get(k, 0)) for k in keys)


def _routes(rt: NodeRuntime) -> str:
    """``proc_lnet_routes``."""
    routing = rt.engine.router.routing_show()
    enabled = any(i.get("enable") == 1 for i in routing.get("routing", [])
                  if isinstance(i, dict))
    lines = ["Routing enabled" if enabled else "Routing disabled",
             f"{'net':<8} {'hops':>4} {'priority':>8} {'state':>7} router"]
    for r in rt.engine.router.route_show(None, None, None, None, 1)["route"]:
        lines.append(f"{r['net']:<8} {r['hop']:>4} {r['priority']:>8} {r['state']:>7} "
                     f"{r['gateway']}")
    return "\n".join(lines)


def _routers(rt: NodeRuntime) -> str:
    """``proc_lnet_routers``: one line per gateway peer, ``alive`` as ``lnet_is_gateway_alive``
    (the gateway's own ``lp_alive`` and an alive peer NI on each of its nets), not its
    routes' state: a gateway a failed ping marked dead stays down when its NIs are said
    alive again (``lctl set_route``)."""
    lines = [f"{'ref':<4} {'rtr_ref':>7} {'alive':>5} router"]
    router = rt.engine.router
    for gw in router.table.gateways():
        alive = "up" if router.alive.gateway_alive(gw) else "down"
        lines.append(f"{1:<4} {gw.rtr_refcount:>7} {alive:>5} {gw.primary_nid}")
    return "\n".join(lines)


def _peers(rt: NodeRuntime) -> str:
    """``proc_lnet_peers``: one line per peer NI."""
    lines = [f"{'nid':<24} {'refs':>4} {'state':>5} {'last':>5} {'max':>5} {'rtr':>5} "
             f"{'min':>5} {'tx':>5} {'min':>5} queue"]
    for peer in rt.engine.view("peer", nid=None, verbose=1)["peer"]:
        for p in peer["peer ni"]:
            lines.append(f"{p['nid']:<24} {p['refcount']:>4} {p['state']:>5} {-1:>5} "
                         f"{p['max_ni_tx_credits']:>5} {p['available_rtr_credits']:>5} "
                         f"{p['min_rtr_credits']:>5} {p['available_tx_credits']:>5} "
                         f"{p['min_tx_credits']:>5} {p['tx_q_num_of_buf']}")
    return "\n".join(lines)


def _nis(rt: NodeRuntime) -> str:
    """``proc_lnet_nis``: one line per NI and CPT of its TX queues (``cpt.py``), ``0@lo``
    first (its queues have no credits)."""
    lines = [f"{'nid':<24} {'status':>6} {'alive':>5} {'refs':>4} {'peer':>4} {'rtr':>4} "
             f"{'max':>5} {'tx':>5} {'min':>5}"]
    routing = bool(rt.engine.router.routing_show())
    for ni in rt.engine.local_nis(include_lo=True):
        t = ni.net.tunables
        alive = 0 if ni.is_lo else (0 if routing else -1)
        cpts = range(rt.engine.local.cpt_table.ncpts) if ni.is_lo else ni.cpts
        for cpt in cpts:
            tq = ni.tx_queues.get(cpt)
            credits = (0, 0, 0) if tq is None else (tq.max_credits, tq.credits, tq.min_credits)
            lines.append(f"{ni.nid!s:<24} {ni.status_str:>6} {alive:>5} {0:>4} "
                         f"{t.peer_credits:>4} {t.peer_buffer_credits:>4} "
                         f"{credits[0]:>5} {credits[1]:>5} {credits[2]:>5}")
    return "\n".join(lines)


def _buffers(rt: NodeRuntime) -> str:
    """``proc_lnet_buffers``: the header, then each pool of each CPT when routing."""
    lines = [f"{'pages':>5} {'count':>5} {'credits':>7} {'min':>7}"]
    routing = rt.engine.router.routing_show().get("routing", [])
    for item in routing:
        for pools in (item.values() if isinstance(item, dict) and "enable" not in item else []):
            for p in pools.values():
                lines.append(f"{p['npages']:>5} {p['nbuffers']:>5} {p['credits']:>7} "
                             f"{p['mincredits']:>7}")
    return "\n".join(lines)


def _stored(name: str) -> Callable[[NodeRuntime], str]:
    return lambda rt: _stored_of(rt).get(name, _DEFAULTS[name])


def _stored_of(rt: NodeRuntime) -> dict[str, str]:
    """The node's values of the libcfs parameters set_param stores (``Runtime.dlc_state``)."""
    stored: dict[str, str] = rt.dlc_state.setdefault("params", {})
    return stored


#: readable parameters, in the order ``get_param *`` lists them
PARAMS: dict[str, Callable[[NodeRuntime], str]] = {
    "buffers": _buffers,
    # libcfs cfs_cpt_table_print / cfs_cpt_distance_print (nodes/lnet/cpt.py)
    "cpu_partition_distance": lambda rt: rt.engine.local.cpt_table.distance_text().rstrip("\n"),
    "cpu_partition_table": lambda rt: rt.engine.local.cpt_table.table_text().rstrip("\n"),
    "debug": _stored("debug"),
    "fail_loc": lambda rt: lctl_failloc.read(rt, "fail_loc"),
    "fail_val": lambda rt: lctl_failloc.read(rt, "fail_val"),
    "lnet_lnd_timeout": lambda rt: str(rt.engine.tunables.lnd_timeout),
    "nis": _nis,
    "peers": _peers,
    "routers": _routers,
    "routes": _routes,
    "stats": _stats,
    "subsystem_debug": _stored("subsystem_debug"),
}


def get_param(rt: NodeRuntime, args: list[str]) -> Result:
    try:
        opts, names = options("get_param", args, "nN", (), fail=(exit_code(-E.EINVAL), "", ""))
    except Stop as stop:
        return stop.result
    flags = {o for o, _ in opts}
    if not names:
        return exit_code(-E.EINVAL), "", "usage: get_param [-n|-N] NAME ...\n"
    out, err, rc = [], [], 0
    for pattern in names:
        matched = [n for n in PARAMS if fnmatch.fnmatchcase(n, pattern.replace(".", "/"))]
        if not matched:
            err.append(f"error: get_param: param_path '{pattern}': "
                       f"{os.strerror(E.ENOENT)}\n")
            rc = exit_code(-E.ENOENT)
            continue
        for name in matched:
            value = PARAMS[name](rt)
            if "N" in flags:
                out.append(f"{name}\n")
            elif "n" in flags:
                out.append(f"{value}\n")
            else:
                out.append(f"{name}=\n{value}\n" if "\n" in value else f"{name}={value}\n")
    return rc, "".join(out), "".join(err)


def set_param(rt: NodeRuntime, args: list[str]) -> Result:
    try:
        opts, pairs = options("set_param", args, "n", (), fail=(exit_code(-E.EINVAL), "", ""))
    except Stop as stop:
        return stop.result
    quiet = any(o == "n" for o, _ in opts)
    out, err, rc = [], [], 0
    for pair in pairs:
        name, eq, value = pair.partition("=")
        why = None
        if not eq:
            why = "no value given"
        elif name == "stats":
            rt.engine.stats_reset()
        elif name in lctl_failloc.NAMES:
            try:
                lctl_failloc.write(rt, name, value)
            except lctl_failloc.ParamError as bad:
                why = str(bad)
        elif name in ("debug", "subsystem_debug"):
            stored = _stored_of(rt)
            stored[name] = _merge(stored.get(name, _DEFAULTS[name]), value)
        else:
            why = os.strerror(E.ENOENT)
        if why is not None:
            err.append(f"error: set_param: setting {name}={value}: {why}\n")
            rc = exit_code(-E.EINVAL)
        elif not quiet:
            out.append(f"{name}={value}\n")
    return rc, "".join(out), "".join(err)


def _merge(old: str, change: str) -> str:
    """libcfs debug masks: ``+net`` adds, ``-net`` removes, a plain list replaces."""
    words = old.split()
    for tok in change.split():
        if tok.startswith("+"):
            words += [tok[1:]] if tok[1:] not in words else []
        elif tok.startswith("-"):
            words = [w for w in words if w != tok[1:]] if tok != "-1" else ["-1"]
        else:
            words = change.split()
            break
    return " ".join(words)
