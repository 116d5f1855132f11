"""``testbed lnetctl``, ``lctl``, ``exec``, ``link``, ``traffic``: acting on one node of a
testbed."""

from __future__ import annotations

import argparse
import os
import sys

from nodes.echo import clip
from testbed import sh
from testbed.commands.common import CliError, Named, json_option, needs_root, pick, print_json


def cmd_lnetctl(args: argparse.Namespace) -> int:
    """``testbed lnetctl`` and ``testbed lctl``: the node daemon's verb of that name."""
    result = pick(args.name).node(args.node).verb(args.tool, args.args)
    sys.stdout.write(result.out)
    sys.stderr.write(result.err)
    return result.rc


def cmd_exec(args: argparse.Namespace) -> int:
    if not args.cmd:
        raise CliError("exec: no command given")
    node = pick(args.name).node(args.node)
    argv = ["sh", "-c", args.cmd[0]] if len(args.cmd) == 1 else list(args.cmd)
    if hasattr(node, "exec_argv"):  # a node on a guest or host (testbed/vagrant/client.py)
        full, env = node.exec_argv(argv, tty=sys.stdin.isatty()), dict(os.environ)
    elif not hasattr(node, "host_pid"):  # the sim: one lnetctl/lctl command line, or refused
        result = node.exec(argv)
        sys.stdout.write(result.out)
        sys.stderr.write(result.err)
        return result.rc
    else:
        needs_root("exec on the mininet backend", "it enters the node's network namespace")
        full, env = sh.ns_argv(argv, node.host_pid, mount=True), node.exec_env()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(full[0], full, env)
    except OSError as exc:
        raise CliError(f"cannot run {full[0]}: {exc.strerror or exc}") from exc


def cmd_link(args: argparse.Namespace) -> int:
    pick(args.name).link(args.node, args.iface, args.state)
    print(f"{args.node} {args.iface} {args.state}")
    return 0


def cmd_traffic(args: argparse.Namespace) -> int:
    tb = pick(args.name)
    node = tb.node(args.node)
    dst = node.resolve_nid(args.to)  # type: ignore[attr-defined]
    op = args.op  # "put" or "get" (argparse choices)
    reply = getattr(node, op)(dst, count=args.count, size=args.size)
    if not reply.get("ok"):
        raise CliError(f"traffic from {args.node} to {clip(str(dst))}: "
                       f"{reply.get('error', reply)}")
    if args.json:
        print_json({"node": args.node, "dst": dst, "op": op,
                    **{k: reply.get(k) for k in ("sent", "completed", "failed", "errors")}})
        return 0 if not reply.get("failed") else 1
    print(f"{args.node} -> {dst}: {op} sent {reply.get('sent')} completed {reply.get('completed')} "
          f"failed {reply.get('failed')}")
    for err, n in (reply.get("errors") or {}).items():
        print(f"  {err}: {n}")
    return 0 if not reply.get("failed") else 1


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = named("lnetctl", "run lnetctl on a node (arguments passed unchanged)")
    sp.add_argument("node")
    sp.add_argument("args", nargs=argparse.REMAINDER)
    sp.set_defaults(func=cmd_lnetctl, tool="lnetctl")
    sp = named("lctl", "run lctl on a node (arguments passed unchanged: list_nids, ping, ...)")
    sp.add_argument("node")
    sp.add_argument("args", nargs=argparse.REMAINDER)
    sp.set_defaults(func=cmd_lnetctl, tool="lctl")
    sp = named("exec", "run a command inside a node (its network and mount "
                       "namespaces)")
    sp.add_argument("node")
    sp.add_argument("cmd", nargs=argparse.REMAINDER, help="one shell string, or argv")
    sp.set_defaults(func=cmd_exec)
    sp = named("link", "set a node's interface down or up")
    sp.add_argument("node")
    sp.add_argument("iface")
    sp.add_argument("state", choices=("down", "up"))
    sp.set_defaults(func=cmd_link)
    sp = named("traffic", "send a burst of LNet PUTs (or GETs) from a node")
    sp.add_argument("node")
    sp.add_argument("--op", choices=("put", "get"), default="put",
                    help="get: each GET reads SIZE bytes back in its REPLY")
    sp.add_argument("--to", required=True, metavar="NID|NODE")
    sp.add_argument("--count", type=int, default=100)
    sp.add_argument("--size", type=int, default=4096, metavar="BYTES")
    json_option(sp)
    sp.set_defaults(func=cmd_traffic)
