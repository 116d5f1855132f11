"""``testbed lst NODE ARGS...``: lnet_selftest's console on one node of a testbed.

On Mininet this is ``testbed exec NODE lst ARGS...``: the ``lst`` program runs in the node's
namespace with this environment (``LST_SESSION``, ``LST_FEATURES``) and streams its output.
On the simulator the node runs lst in-process (the ``lst`` verb) on virtual time and the
output comes when it is done (a ``stat`` without ``--count`` is refused there).
``--watch BATCH`` shows a running batch's progress instead (``nodes/selftest/lstwatch.py``),
every ``--every`` seconds (virtual ones on the simulator), until it stops.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from nodes.dlc.verbs.lst_verb import EPOCH
from nodes.selftest.getopt import atoi
from nodes.selftest.lstwatch import watch
from nodes.tools.lst import DaemonIO
from testbed import backends, sh
from testbed.commands.common import CliError, Named, pick

ENV = ("LST_SESSION", "LST_FEATURES")


class SimCtlIO:
    """``LstIO`` on a node of a sim server: ioctls through its control socket, time as the
    server's clock, sleeping as advancing it."""

    def __init__(self, tb: Any, node: str) -> None:
        self.tb, self.node = tb, node

    async def ioctl(self, opc: str, key: int, args: dict[str, Any]) -> dict[str, Any]:
        reply: dict[str, Any] = self.tb._ctl({"cmd": "lstio", "node": self.node, "opc": opc,
                                              "key": key, "args": args}, timeout=600.0)
        if not reply.get("ok"):
            raise CliError(f"lst on {self.node}: {reply.get('error', reply)}")
        return reply

    async def sleep(self, seconds: float) -> None:
        self.tb.advance(seconds)

    def time(self) -> int:
        return EPOCH + int(self.tb.now)


def cmd_lst(args: argparse.Namespace) -> int:
    tb = pick(args.name)
    node = tb.node(args.node)
    mininet = backends.of(getattr(tb, "backend", "")).local_netns
    if args.watch:
        io: Any = DaemonIO(node.sock) if mininet else SimCtlIO(tb, args.node)
        key = atoi(os.environ.get("LST_SESSION", "0"))

        def out(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()

        return asyncio.run(watch(io, key, args.watch, args.every, out, sys.stderr.write,
                                 sys.stdout.isatty())) & 0xFF
    if mininet:  # the lst program itself, in the node's namespace: output streams
        full = sh.ns_argv(["lst", *args.args], node.host_pid)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.execvpe(full[0], full, node.exec_env())
        except OSError as exc:
            raise CliError(f"cannot run {full[0]}: {exc.strerror or exc}") from exc
    env = [f"{k}={os.environ[k]}" for k in ENV if k in os.environ]
    result = node.verb("lst", [*env, *args.args])
    sys.stdout.write(result.out)
    sys.stderr.write(result.err)
    return int(result.rc)


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = named("lst", "run lnet_selftest's lst on a node (LST_SESSION from the environment)")
    sp.add_argument("--watch", metavar="BATCH",
                    help="show BATCH's progress (rates, errors) until it stops")
    sp.add_argument("--every", type=float, default=2.0, metavar="SECONDS",
                    help="--watch sampling interval (default 2)")
    sp.add_argument("node")
    sp.add_argument("args", nargs=argparse.REMAINDER, help="lst's command and arguments")
    sp.set_defaults(func=cmd_lst)
