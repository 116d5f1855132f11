"""``testbed fault``: faults of a testbed (``testbed events`` is in ``testbed.observe``)."""

from __future__ import annotations

import argparse

from testbed.commands.common import CliError, Named, pick


def cmd_fault(args: argparse.Namespace) -> int:
    from faults.spec import FaultError, parse_words

    tb = pick(args.name)
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


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = named("fault", "add, list, delete or clear faults (faults/README.md)")
    sp.add_argument("op", choices=("add", "list", "del", "clear"))
    sp.add_argument("words", nargs="*", metavar="KIND|ID key=value",
                    help="add: KIND then key=value (match.type=PUT); del: fault id or name")
    sp.set_defaults(func=cmd_fault)
