"""``testbed up``, ``down``, ``clean``: a testbed's life, on any backend (``status`` is
``testbed.commands.status``)."""

from __future__ import annotations

import argparse
import sys
import time

from testbed import backends, clean, runstate
from testbed.base import TestbedError
from testbed.commands.common import (
    CliError,
    Named,
    json_option,
    pick,
    print_json,
    table,
)
from testbed.ctlclient import CtlTestbed
from testbed.plan import load_topology

PROG_WARN = "testbed: warning: "
#: ``testbed up`` traces messages unless ``--no-trace`` (issue 31 item 5: ``check`` checks
#: every invariant of a default testbed; the cost is in benchmarks/README.md, trace_cost.py)
TRACE_BY_DEFAULT = True
#: ``testbed up`` lists this many nodes (a sim testbed may have 10,000)
MAX_LISTED = 50


def cmd_up(args: argparse.Namespace) -> int:
    """Mininet, or a long-lived sim server (``--backend sim``; with ``--script`` the one-shot
    form, ``testbed sim``)."""
    kind = backends.get(args.backend)
    if args.script is not None:
        if not kind.virtual_time:
            raise CliError("--script needs --backend sim")
        from testbed.commands.sim import cmd_sim

        return cmd_sim(args)
    if not kind.virtual_time and (args.speed is not None or args.seed is not None):
        raise CliError("--seed and --speed need --backend sim")
    if not 0 <= args.record_period <= 3_600_000:
        raise CliError(f"--record-period: must be 0..3600000 ms (0: off), not "
                       f"{args.record_period:g}")
    observe = {"record_period": args.record_period / 1000.0,
               "trace_messages": args.trace_messages}
    if kind.cli_up is not None:  # its own output (vagrant, hosts: testbed/vagrant/cli.py)
        return int(backends.load(kind.cli_up)(args))
    if args.provider is not None and not kind.providers:
        raise CliError("--provider needs --backend vagrant")
    # errors before anything starts: the topology, its node count for this backend, root
    plan = load_topology(args.topology, name=args.name, backend=args.backend)
    started = time.monotonic()

    def progress(step: int, total: int, text: str) -> None:
        print(f"[{step}/{total}] {text}", file=sys.stderr, flush=True)

    if kind.virtual_time:
        from testbed.sim.pacer import parse_speed

        speed = args.speed or "1"
        try:
            parse_speed(speed)
        except ValueError as exc:
            raise CliError(f"--speed: {exc}") from None
        observe.update(seed=args.seed or 0, speed=speed)
    tb: CtlTestbed = kind.client_class().up(args.topology, name=plan.name, progress=progress,
                                            **observe)
    elapsed = time.monotonic() - started
    for line in tb.warnings:
        print(f"{PROG_WARN}{line}", file=sys.stderr)
    status = tb.status()
    if args.json:
        print_json({"name": tb.name, "backend": args.backend, "rundir": str(tb.rundir),
                    "seconds": round(elapsed, 3), "warnings": tb.warnings,
                    "seed": status.get("seed"), "speed": status.get("speed"),
                    "nodes": {n: {i: d["nid"] for i, d in info["interfaces"].items()}
                              for n, info in status["nodes"].items()}})
        return 0
    extra = (f", seed {status.get('seed')}, speed {status.get('speed')}"
             if kind.virtual_time else "")
    print(f"testbed {tb.name} is up ({elapsed:.1f}s{extra}), run directory {tb.rundir}")
    nodes = list(status["nodes"].items())
    print(table(([node, info["pid"], " ".join(f"{i}={d['nid']}"
                                              for i, d in info["interfaces"].items())]
                 for node, info in nodes[:MAX_LISTED]), ["node", "pid", "NIs"], "  "), end="")
    if len(nodes) > MAX_LISTED:
        print(f"  ... and {len(nodes) - MAX_LISTED} more (testbed status)")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Take a testbed down and say what was removed, each thing proven gone; a testbed whose
    run directory is gone already but left something (interfaces after a crash) too."""
    try:
        tb = pick(args.name)
    except TestbedError:
        if args.name is None or not clean.leftovers(args.name):
            raise
        name, removed = args.name, clean.clean_testbed(args.name)
        left = clean.leftovers(name)
        if left:
            raise TestbedError(f"testbed {name}: still present: {', '.join(left)}") from None
    else:
        name, removed = tb.name, tb.down()
    if args.json:
        print_json({"name": name, "removed": removed, "left": []})
        return 0
    for item in removed:
        print(f"removed {item}")
    print(f"testbed {name} is down: nothing of it is left")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    removed = clean.clean_all()
    if args.json:
        print_json({"removed": removed})
        return 0
    for item in removed:
        print(f"removed {item}")
    if not removed:
        print("nothing to clean" + runstate.unreadable_hint())
    return 0


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = named("up", "bring a topology up (a file, or a built-in one by name; default: "
               "default)")
    arg = sp.add_argument("topology", nargs="?", help="topology YAML file, or the name of a "
                          "built-in one (default, routed, multihop, ...)")
    arg.complete = {"bash": "_shtab_testbed_topologies", "zsh": "_files"}  # type: ignore[attr-defined]
    sp.add_argument("--backend", choices=backends.NAMES, default="mininet",
                    help="sim: every engine in one server process on an in-memory fabric")
    sp.add_argument("--seed", type=int, default=None, help="sim RNG seed (default 0)")
    sp.add_argument("--speed", default=None, metavar="X|max",
                    help="sim: virtual seconds per wall second (default 1; 0: only "
                    "`testbed clock advance` and blocking verbs move time; max: run ahead)")
    sp.add_argument("--script", metavar="FILE", help="sim one-shot: run these commands in "
                    "this process and exit (as `testbed sim`; '-' for stdin)")
    sp.add_argument("--provider", choices=("lxc", "libvirt"), default=None,
                    help="vagrant: LXC system containers (default) or libvirt VMs")
    sp.add_argument("--record-period", type=float, default=100.0, metavar="MS",
                    help="sample every node's LNet state into RUNDIR/nodes/NODE.rec every MS "
                    "milliseconds (default 100; 0: no recorder; sim: virtual time)")
    trace = sp.add_mutually_exclusive_group()
    trace.add_argument("--no-trace", dest="trace_messages", action="store_false",
                       help="do not log every message send, resend and completion (on by "
                       "default: what `testbed check` needs for its message invariants; "
                       "benchmarks/trace_cost.py measures what it costs)")
    trace.add_argument("--trace-messages", dest="trace_messages", action="store_true",
                       help="trace messages (the default; kept for scripts)")
    sp.set_defaults(trace_messages=TRACE_BY_DEFAULT)
    json_option(sp)
    sp.set_defaults(func=cmd_up)
    sp = named("down", "take a testbed down; print what was removed")
    json_option(sp)
    sp.set_defaults(func=cmd_down)
    sp = sub.add_parser("clean", help="remove every leftover of every testbed (also others' "
                        "live ones: `testbed down -n NAME` takes one)",
                        description="remove every leftover of every testbed")
    json_option(sp)
    sp.set_defaults(func=cmd_clean)
