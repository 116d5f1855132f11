"""``testbed sim``: the one-shot sim backend (a topology in this process, a script)."""

from __future__ import annotations

import argparse
import sys

from testbed.commands.common import Named


def cmd_sim(args: argparse.Namespace) -> int:
    """The sim backend, one-shot: it lives only in this process (testbed/sim/script.py)."""
    from testbed.sim import script

    return script.oneshot(args.topology, name=args.name, seed=args.seed, script=args.script,
                          out=sys.stdout, err=sys.stderr)


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = named("sim", "one-shot sim backend: bring a topology up in-process, run a script")
    sp.epilog = ("script lines: NODE lnetctl ARGS... | NODE lctl ARGS... | NODE put|get DST "
                 "[COUNT [SIZE]] | link NODE IFACE up|down | run SECONDS | events")
    sp.add_argument("topology", nargs="?", help="topology YAML file")
    sp.add_argument("--script", metavar="FILE", help="sim commands, one per line "
                    "('-' for stdin; see README, Backends)")
    sp.add_argument("--seed", type=int, default=0, help="sim RNG seed (default 0)")
    sp.set_defaults(func=cmd_sim)
