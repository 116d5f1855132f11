"""``testbed``: bring emulated LNet clusters up and down, look inside, break links.

Every error is one line on stderr (``testbed: error: ...``) and exit status 1 (2 for usage),
never a traceback. ``exec`` and ``lnetctl`` pass the command's exit status through unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

from testbed import api, runstate, sh
from testbed.observe import cli as observe_cli
from testbed.topology import TopologyError, load_topology
from testbed.trace import TraceError

PROG = "testbed"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{PROG}: error: {message}\n")


class CliError(Exception):
    """A one-line error for the user."""


def _err(text: str) -> None:
    print(f"{PROG}: error: {text}", file=sys.stderr)


def _running(root: str | None = None) -> list[str]:
    return [n for n in api.list_testbeds(root)
            if runstate.supervisor_alive(n, runstate.read_state(runstate.rundir(n, root)))]


def _pick(name: str | None) -> api.Testbed:
    """The testbed to act on: -n NAME, or the only one that is up."""
    if name is None:
        up = _running()
        if not up:
            raise CliError("no testbed is up (start one with `testbed up`)")
        if len(up) > 1:
            raise CliError(f"several testbeds are up ({', '.join(up)}): choose one with -n NAME")
        name = up[0]
    return api.Testbed.attach(name)


def cmd_sim(args: argparse.Namespace) -> int:
    """The sim backend, one-shot: it lives only in this process (testbed/sim.py)."""
    from testbed import sim

    return sim.oneshot(args.topology, name=args.name, seed=args.seed, script=args.script,
                       out=sys.stdout, err=sys.stderr)


def cmd_up(args: argparse.Namespace) -> int:
    if args.backend == "sim":
        return cmd_sim(args)
    if args.script is not None:
        raise CliError("--script needs --backend sim")
    plan = load_topology(args.topology, name=args.name)  # errors before anything starts
    started = time.monotonic()

    def progress(step: int, total: int, text: str) -> None:
        print(f"[{step}/{total}] {text}", file=sys.stderr, flush=True)

    tb = api.Testbed.up(args.topology, name=plan.name, progress=progress)
    elapsed = time.monotonic() - started
    status = tb.status()
    print(f"testbed {tb.name} is up ({elapsed:.1f}s), run directory {tb.rundir}")
    for node, info in status["nodes"].items():
        ifaces = " ".join(f"{i}={d['nid']}" for i, d in info["interfaces"].items())
        print(f"  {node:<12} pid {info['pid']:<8} {ifaces}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    tb = _pick(args.name)
    removed = tb.down()
    for item in removed:
        print(f"removed {item}", file=sys.stderr)
    print(f"testbed {tb.name} is down")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else api.list_testbeds()
    if not names:
        print("no testbed is up")
        return 0
    for name in names:
        tb = api.Testbed.attach(name)
        try:
            st = tb.status()
        except api.TestbedError:
            print(f"testbed {name}: supervisor not running (leftover: run `testbed clean`)")
            continue
        print(f"testbed {name}: {st['phase']}, topology {st['topology']}, "
              f"supervisor pid {st['supervisor_pid']}, up {time.time() - st['started']:.0f}s")
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


def cmd_lnetctl(args: argparse.Namespace) -> int:
    result = _pick(args.name).node(args.node).verb("lnetctl", args.args)
    sys.stdout.write(result.out)
    sys.stderr.write(result.err)
    return result.rc


def cmd_exec(args: argparse.Namespace) -> int:
    if not args.cmd:
        raise CliError("exec: no command given")
    node = _pick(args.name).node(args.node)
    argv = ["sh", "-c", args.cmd[0]] if len(args.cmd) == 1 else list(args.cmd)
    full = sh.ns_argv(argv, node.host_pid)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(full[0], full, node.exec_env())  # rc, stdin, stdout, stderr untouched
    except OSError as exc:
        raise CliError(f"cannot run {full[0]}: {exc.strerror or exc}") from exc


def cmd_link(args: argparse.Namespace) -> int:
    _pick(args.name).link(args.node, args.iface, args.state)
    print(f"{args.node} {args.iface} {args.state}")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    removed = api.clean_all()
    for item in removed:
        print(f"removed {item}")
    if not removed:
        print("nothing to clean")
    return 0


def cmd_traffic(args: argparse.Namespace) -> int:
    tb = _pick(args.name)
    dst = args.to
    if "@" not in dst:
        dst = tb.node(dst).nids[0]
    op = args.op  # "put" or "get" (argparse choices)
    reply = getattr(tb.node(args.node), op)(dst, count=args.count, size=args.size)
    if not reply.get("ok"):
        raise CliError(f"traffic from {args.node} to {dst}: {reply.get('error', reply)}")
    print(f"{args.node} -> {dst}: {op} sent {reply.get('sent')} completed {reply.get('completed')} "
          f"failed {reply.get('failed')}")
    for err, n in (reply.get("errors") or {}).items():
        print(f"  {err}: {n}")
    return 0 if not reply.get("failed") else 1


def cmd_trace(args: argparse.Namespace) -> int:
    """Requirement traceability of the last ``pytest --lnet-trace`` run (testbed.trace)."""
    from testbed import trace

    reqs = trace.load_requirements(args.requirements)
    data = trace.load_data(args.data)
    print(trace.render(reqs, data), end="")
    cov = trace.coverage(reqs, data)
    return 1 if any(trace.status_of(reqs.get(r), t) == "FAILING" for r, t in cov.items()) else 0


def cmd_fault(args: argparse.Namespace) -> int:
    from faults.spec import FaultError, parse_words

    tb = _pick(args.name)
    if args.op == "add":
        if not args.words:
            raise CliError("fault add: give KIND [key=value ...] (see faults/README.md)")
        try:
            raw = parse_words(args.words[1:])
        except FaultError as exc:
            raise CliError(f"fault add: {exc}") from None
        f = tb.fault.add(args.words[0], **raw)
        print(f"{f['id']} {f['kind']} {f['state']} seed {f['seed']}")
    elif args.op == "list":
        for f in tb.fault.list():
            counters = " ".join(f"{k}={v}" for k, v in sorted(f["counters"].items()) if v)
            spec = " ".join(f"{k}={v}" for k, v in f["spec"].items() if k != "kind")
            print(f"{f['id']:<4} {f['kind']:<10} {f['state']:<8} seed {f['seed']:<11} {spec}"
                  + (f"  [{counters}]" if counters else ""))
    elif args.op == "del":
        if len(args.words) != 1:
            raise CliError("fault del: give one fault id (or name)")
        f = tb.fault.delete(args.words[0])
        print(f"deleted {f['id']} {f['kind']}")
    else:
        for f in tb.fault.clear():
            print(f"deleted {f['id']} {f['kind']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Emulated Lustre LNet clusters on one Linux box.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def named(cmd: str, helptext: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(cmd, help=helptext, description=helptext)
        sp.add_argument("-n", "--name", help="testbed name (default: the only one up)")
        return sp

    sp = named("up", "bring a topology up (default: topologies/default.yaml)")
    sp.add_argument("topology", nargs="?", help="topology YAML file")
    sp.add_argument("--backend", choices=("mininet", "sim"), default="mininet",
                    help="sim: every engine in this process, virtual clock, one-shot")
    sp.set_defaults(func=cmd_up)
    up_parser = sp
    sp = named("sim", "one-shot sim backend: bring a topology up in-process, run a script")
    sp.epilog = ("script lines: NODE lnetctl ARGS... | NODE lctl ARGS... | NODE put|get DST "
                 "[COUNT [SIZE]] | link NODE IFACE up|down | run SECONDS | events")
    sp.add_argument("topology", nargs="?", help="topology YAML file")
    sp.set_defaults(func=cmd_sim)
    for sim_parser in (up_parser, sp):
        sim_parser.add_argument("--script", metavar="FILE", help="sim commands, one per line "
                                "('-' for stdin; see README, Backends)")
        sim_parser.add_argument("--seed", type=int, default=0, help="sim RNG seed (default 0)")
    named("down", "take a testbed down").set_defaults(func=cmd_down)
    named("status", "show testbeds, nodes, NIDs and links").set_defaults(func=cmd_status)
    sp = named("lnetctl", "run lnetctl on a node (arguments passed unchanged)")
    sp.add_argument("node")
    sp.add_argument("args", nargs=argparse.REMAINDER)
    sp.set_defaults(func=cmd_lnetctl)
    sp = named("exec", "run a command inside a node's network namespace")
    sp.add_argument("node")
    sp.add_argument("cmd", nargs=argparse.REMAINDER, help="one shell string, or argv")
    sp.set_defaults(func=cmd_exec)
    sp = named("link", "set a node's interface down or up")
    sp.add_argument("node")
    sp.add_argument("iface")
    sp.add_argument("state", choices=("down", "up"))
    sp.set_defaults(func=cmd_link)
    sub.add_parser("clean", help="remove every leftover of every testbed",
                   description="remove every leftover of every testbed").set_defaults(
                       func=cmd_clean)
    sp = named("traffic", "send a burst of LNet PUTs (or GETs) from a node")
    sp.add_argument("node")
    sp.add_argument("--op", choices=("put", "get"), default="put",
                    help="get: each GET reads SIZE bytes back in its REPLY")
    sp.add_argument("--to", required=True, metavar="NID|NODE")
    sp.add_argument("--count", type=int, default=100)
    sp.add_argument("--size", type=int, default=4096, metavar="BYTES")
    sp.set_defaults(func=cmd_traffic)
    sp = named("fault", "add, list, delete or clear faults (faults/README.md)")
    sp.add_argument("op", choices=("add", "list", "del", "clear"))
    sp.add_argument("words", nargs="*", metavar="KIND|ID key=value",
                    help="add: KIND then key=value (match.type=PUT); del: fault id or name")
    sp.set_defaults(func=cmd_fault)
    observe_cli.register(sub)  # events, check, capture, report (testbed/observe)
    sp = sub.add_parser("trace", help="requirement traceability of the last test run",
                        description="every requirement of docs/requirements.md with the tests "
                        "covering it and their last result (exit 1 if one is failing)")
    sp.add_argument("--data", metavar="JSON", help="trace data (default: reports/trace.json)")
    sp.add_argument("--requirements", metavar="MD",
                    help="requirement list (default: docs/requirements.md)")
    sp.set_defaults(func=cmd_trace)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except TopologyError as exc:
        _err(str(exc))
    except (api.TestbedError, CliError, sh.CommandError, TraceError) as exc:
        _err(str(exc))
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except OSError as exc:
        _err(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    return 1


if __name__ == "__main__":
    sys.exit(main())
