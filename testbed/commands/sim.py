"""``testbed sim`` (the one-shot sim backend: a topology in this process, a script) and
``testbed clock`` (a sim testbed's virtual clock)."""

from __future__ import annotations

import argparse
import sys

from testbed.commands.common import CliError, Named, pick


def cmd_sim(args: argparse.Namespace) -> int:
    """The sim backend, one-shot: it lives only in this process (testbed/sim/script.py)."""
    from testbed import backends

    kind = backends.get("sim")
    if kind.oneshot is None:
        raise CliError(f"backend {kind.name} has no one-shot form")
    oneshot = backends.load(kind.oneshot)
    return int(oneshot(args.topology, name=args.name, seed=args.seed or 0,
                       script=args.script, out=sys.stdout, err=sys.stderr))


def cmd_clock(args: argparse.Namespace) -> int:
    """``clock show``: the testbed's time; ``clock advance S``: S virtual seconds now."""
    from testbed import backends
    from testbed.base import unsupported

    tb = pick(args.name)
    kind = backends.of(getattr(tb, "backend", ""))
    if not kind.virtual_time:
        if args.op == "advance":
            raise unsupported(kind.name, "clock advance", "its clock is the wall clock")
        print(f"{tb.now:.6f} (wall clock)")
        return 0
    if args.op == "advance":
        if args.seconds is None:
            raise CliError("clock advance: give SECONDS")
        reply = tb.clock(advance=args.seconds)
    else:
        if args.seconds is not None:
            raise CliError("clock show takes no argument")
        reply = tb.clock()
    print(f"{reply['now']:.6f} (virtual, speed {reply['speed']})")
    return 0


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = named("sim", "one-shot sim backend: bring a topology up in-process, run a script")
    sp.epilog = ("script lines: NODE lnetctl ARGS... | NODE lctl ARGS... | NODE put|get DST "
                 "[COUNT [SIZE]] | link NODE IFACE up|down | run SECONDS | events")
    sp.add_argument("topology", nargs="?", help="topology YAML file")
    sp.add_argument("--script", metavar="FILE", help="sim commands, one per line "
                    "('-' for stdin; see README, Backends)")
    sp.add_argument("--seed", type=int, default=0, help="sim RNG seed (default 0)")
    sp.set_defaults(func=cmd_sim)
    sp = named("clock", "show a testbed's clock, or advance a sim testbed's virtual clock")
    sp.add_argument("op", choices=("show", "advance"))
    sp.add_argument("seconds", nargs="?", type=float, help="advance: virtual seconds")
    sp.set_defaults(func=cmd_clock)
