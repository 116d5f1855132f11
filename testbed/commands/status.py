"""``testbed status``: every testbed, its segments and nodes, and per NI its link, LNet status
and health, per node its routes and their state (issue 18).

Theory of operation: the control process (supervisor, sim server) answers ``status`` with
what it built (segments, nodes, interfaces, link states); the LNet state is each node's own
``lnetctl net show -v 3`` and ``route show -v``, asked here (two verbs per node, for at most
:data:`MAX_LNET` nodes unless ``--node`` names them: a sim testbed may have 10,000). A
testbed this user cannot ask is reported with why, never as "not running" when it runs
(another user's, or a run directory this user cannot read), and a dead one with what to do:
``testbed down -n NAME`` removes what is left of it, where ``testbed clean`` would also take
down every other testbed on the machine (issue 11 item 10). Tables by ``tabulate``;
``--json`` prints the same data.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import testbed
from nodes.echo import shown
from testbed import backends, runstate
from testbed.base import TestbedError
from testbed.commands.common import Named, json_option, print_json, table

#: nodes whose LNet state ``status`` asks for without ``--node``
MAX_LNET = 50


def cmd_status(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else runstate.list_testbeds()
    if not names:
        hint = runstate.unreadable_hint()
        if args.json:
            print_json({"testbeds": [], "note": hint.lstrip("; ")})
        else:
            print("no testbed is up" + hint)
        return 0
    reports = [describe(name, set(args.node or ()), strict=args.name is not None)
               for name in names]
    if args.json:
        print_json({"testbeds": reports})
        return 0
    for report in reports:
        print(render(report), end="")
    return 0


def describe(name: str, only: set[str], strict: bool) -> dict[str, Any]:
    """One testbed's status with its nodes' LNet state, or the one-line reason it has none.

    Raises:
        TestbedError: ``strict`` (asked by name) and there is no such testbed to ask.
    """
    try:
        tb = testbed.attach(name)
    except TestbedError as exc:
        if strict:
            raise
        return {"name": name, "problem": str(exc)}
    try:
        st = dict(tb.status())
    except TestbedError as exc:
        return {"name": name, "problem": str(exc)}
    st.pop("ok", None)
    unknown = only - set(st["nodes"])
    if unknown:
        raise TestbedError(f"testbed {name} has no node {shown(sorted(unknown)[0])}")
    wanted = [n for n in st["nodes"] if n in only] if only else list(st["nodes"])[:MAX_LNET]
    for node in wanted:
        if st["nodes"][node].get("alive", True):
            st["nodes"][node]["lnet"] = _lnet_state(tb, node)
    st["lnet_shown"] = len(wanted)
    return st


def _lnet_state(tb: Any, node: str) -> dict[str, Any]:
    """``{"nis": {nid: {"status", "health"}}, "routes": [...]}`` from the node's lnetctl."""
    try:
        handle = tb.node(node)
        nets = handle.lnetctl_yaml("net", "show", "-v", "3") or {}
        routes = handle.lnetctl_yaml("route", "show", "-v") or {}
    except TestbedError as exc:
        return {"error": str(exc)}
    nis = {}
    for net in nets.get("net", []):
        for ni in net.get("local NI(s)", []):
            health = (ni.get("health stats") or {}).get("health value")
            nis[ni["nid"]] = {"status": ni.get("status"), "health": health}
    keep = ("net", "gateway", "hop", "priority", "state")
    return {"nis": nis, "routes": [{k: r.get(k) for k in keep} for r in routes.get("route", [])]}


def render(st: dict[str, Any]) -> str:
    """One testbed as text: a headline, then its segments, NIs and routes as tables."""
    name = st["name"]
    if "problem" in st:
        return f"testbed {name}: {st['problem'].removeprefix(f'testbed {name}: ')}\n"
    kind = backends.of(st.get("backend"))
    if kind.virtual_time:
        head = (f"testbed {name}: {st['phase']}, backend sim, topology {st['topology']}, "
                f"server pid {st['supervisor_pid']}, seed {st.get('seed')}, speed "
                f"{st.get('speed')}, virtual time {st.get('now', 0.0):.6f}s")
    else:  # mininet, or vagrant (provider) / hosts: guests or machines over SSH (issue 15)
        backend = kind.name
        if kind.providers and st.get("provider"):
            backend += f"/{st['provider']}"
        if kind.remote and st.get("hosts"):
            backend += f" on {len(st['hosts'])} host{'s' if len(st['hosts']) != 1 else ''}"
        head = (f"testbed {name}: {st['phase']}, backend {backend}, topology {st['topology']}, "
                f"supervisor pid {st['supervisor_pid']}, "
                f"up {time.time() - st['started']:.0f}s")
    out = [head + "\n"]
    out.append(table(([seg, info["lnet"], info["subnet"], info["bridge"]]
                      for seg, info in st["segments"].items()),
                     ["segment", "net", "subnet", "bridge"], "  "))
    rows, routes = [], []
    for node, info in st["nodes"].items():
        lnet = info.get("lnet", {})
        daemon = f"{'running' if info['alive'] else 'DEAD'} {info['pid']}"
        for i, (iface, d) in enumerate(info["interfaces"].items()):
            ni = lnet.get("nis", {}).get(d["nid"], {})
            rows.append([node if i == 0 else "", daemon if i == 0 else "", iface, d["nid"],
                         d["segment"], d["state"], d["kernel"], ni.get("status"),
                         ni.get("health")])
        if "error" in lnet:
            rows.append(["", "", "", f"lnetctl: {lnet['error']}", "", "", "", "", ""])
        routes += [[node, r["net"], r["gateway"], r["hop"], r["priority"], r["state"]]
                   for r in lnet.get("routes", [])]
    out.append("\n" + table(rows, ["node", "daemon", "iface", "nid", "segment", "link",
                                   "kernel", "NI", "health"], "  "))
    if routes:
        out.append("\n" + table(routes, ["node", "route to", "gateway", "hop", "priority",
                                         "state"], "  "))
    if st.get("lnet_shown", 0) < len(st["nodes"]):
        out.append(f"  (NI status, health and routes shown for {st['lnet_shown']} of "
                   f"{len(st['nodes'])} nodes: --node NODE for others)\n")
    return "".join(out)


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = named("status", "show testbeds: segments, nodes, NIs with link, LNet status and "
               "health, routes")
    sp.add_argument("--node", action="append", metavar="NODE",
                    help="LNet state of this node (repeatable; default: the first "
                    f"{MAX_LNET})")
    json_option(sp)
    sp.set_defaults(func=cmd_status)
