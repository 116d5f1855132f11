"""``testbed up``, ``down``, ``status``, ``clean``: a testbed's life, on any backend."""

from __future__ import annotations

import argparse
import sys
import time

import testbed
from testbed import clean, runstate
from testbed.base import TestbedError
from testbed.commands.common import CliError, Named, pick
from testbed.ctlclient import CtlTestbed
from testbed.plan import load_topology

PROG_WARN = "testbed: warning: "
#: ``testbed up`` lists this many nodes (a sim testbed may have 10,000)
MAX_LISTED = 50


def cmd_up(args: argparse.Namespace) -> int:
    """Mininet, or a long-lived sim server (``--backend sim``; with ``--script`` the one-shot
    form, ``testbed sim``)."""
    if args.backend == "sim" and args.script is not None:
        from testbed.commands.sim import cmd_sim

        return cmd_sim(args)
    if args.script is not None:
        raise CliError("--script needs --backend sim")
    if args.backend != "sim" and (args.speed is not None or args.seed is not None):
        raise CliError("--seed and --speed need --backend sim")
    if not 0 <= args.record_period <= 3_600_000:
        raise CliError(f"--record-period: must be 0..3600000 ms (0: off), not "
                       f"{args.record_period:g}")
    observe = {"record_period": args.record_period / 1000.0,
               "trace_messages": args.trace_messages}
    if args.backend in ("vagrant", "hosts"):
        from testbed.vagrant.cli import cmd_up as vagrant_up

        return vagrant_up(args)
    if args.provider is not None:
        raise CliError("--provider needs --backend vagrant")
    plan = load_topology(args.topology, name=args.name)  # errors before anything starts
    started = time.monotonic()

    def progress(step: int, total: int, text: str) -> None:
        print(f"[{step}/{total}] {text}", file=sys.stderr, flush=True)

    if args.backend == "sim":
        from testbed.sim.client import SimClient
        from testbed.sim.pacer import parse_speed

        speed = args.speed or "1"
        try:
            parse_speed(speed)
        except ValueError as exc:
            raise CliError(f"--speed: {exc}") from None
        tb: CtlTestbed = SimClient.up(args.topology, name=plan.name, progress=progress,
                                      seed=args.seed or 0, speed=speed, **observe)
    else:
        from testbed.mininet import MininetTestbed

        tb = MininetTestbed.up(args.topology, name=plan.name, progress=progress, **observe)
    elapsed = time.monotonic() - started
    for line in tb.warnings:
        print(f"{PROG_WARN}{line}", file=sys.stderr)
    status = tb.status()
    extra = (f", seed {status.get('seed')}, speed {status.get('speed')}"
             if args.backend == "sim" else "")
    print(f"testbed {tb.name} is up ({elapsed:.1f}s{extra}), run directory {tb.rundir}")
    for i, (node, info) in enumerate(status["nodes"].items()):
        if i == MAX_LISTED:
            print(f"  ... and {len(status['nodes']) - MAX_LISTED} more (testbed status)")
            break
        ifaces = " ".join(f"{i}={d['nid']}" for i, d in info["interfaces"].items())
        print(f"  {node:<12} pid {info['pid']:<8} {ifaces}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    tb = pick(args.name)
    removed = tb.down()
    for item in removed:
        print(f"removed {item}", file=sys.stderr)
    print(f"testbed {tb.name} is down")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else runstate.list_testbeds()
    if not names:
        print("no testbed is up")
        return 0
    for name in names:
        tb = testbed.attach(name)
        try:
            st = tb.status()
        except TestbedError:
            print(f"testbed {name}: supervisor not running (leftover: run `testbed clean`)")
            continue
        if st.get("backend") == "sim":
            print(f"testbed {name}: {st['phase']}, backend sim, topology {st['topology']}, "
                  f"server pid {st['supervisor_pid']}, seed {st.get('seed')}, speed "
                  f"{st.get('speed')}, virtual time {st.get('now', 0.0):.6f}s")
        else:
            print(f"testbed {name}: {st['phase']}, topology {st['topology']}, "
                  f"supervisor pid {st['supervisor_pid']}, "
                  f"up {time.time() - st['started']:.0f}s")
        for seg, info in st["segments"].items():
            print(f"  segment {seg:<10} {info['lnet']:<8} {info['subnet']:<18} "
                  f"bridge {info['bridge']}")
        for node, info in st["nodes"].items():
            alive = "running" if info["alive"] else "DEAD"
            print(f"  node {node:<12} {alive:<8} pid {info['pid']}")
            for iface, d in info["interfaces"].items():
                print(f"    {iface:<6} {d['nid']:<22} {d['segment']:<10} link {d['state']:<5}"
                      f" ({d['kernel']})")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    removed = clean.clean_all()
    for item in removed:
        print(f"removed {item}")
    if not removed:
        print("nothing to clean")
    return 0


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = named("up", "bring a topology up (default: topologies/default.yaml)")
    sp.add_argument("topology", nargs="?", help="topology YAML file")
    sp.add_argument("--backend", choices=testbed.BACKENDS, default="mininet",
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
    sp.add_argument("--trace-messages", action="store_true",
                    help="log every message send, resend and completion (what `testbed "
                    "check` needs for its message invariants; costs CPU under load)")
    sp.set_defaults(func=cmd_up)
    named("down", "take a testbed down").set_defaults(func=cmd_down)
    named("status", "show testbeds, nodes, NIDs and links").set_defaults(func=cmd_status)
    sub.add_parser("clean", help="remove every leftover of every testbed",
                   description="remove every leftover of every testbed").set_defaults(
                       func=cmd_clean)
