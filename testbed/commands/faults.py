"""``testbed fault``: faults of a testbed (``testbed events`` is in ``testbed.observe``)."""

from __future__ import annotations

import argparse
import sys

from testbed.commands.common import CliError, Named, json_option, pick, print_json, table


def _words(spec: dict[str, object]) -> str:
    """A fault spec as the ``key=value`` words ``fault add`` takes (``match.type=PUT``)."""
    def word(key: str, value: object) -> str:
        if isinstance(value, list):
            return f"{key}={','.join(str(v) for v in value)}"
        return f"{key}={value}"

    out = []
    for key, value in spec.items():
        if key == "kind":
            continue
        if isinstance(value, dict):
            out += [word(f"{key}.{k}", v) for k, v in value.items()]
        else:
            out.append(word(key, value))
    return " ".join(out)


def cmd_fault(args: argparse.Namespace) -> int:
    from faults.spec import FaultError, parse_words

    if args.op == "kinds":  # no testbed needed
        if args.words:
            raise CliError("fault kinds takes no argument")
        from faults.kinds import describe

        sys.stdout.write(describe())
        return 0
    tb = pick(args.name)
    if args.op == "add":
        if not args.words:
            raise CliError("fault add: give KIND [key=value ...] (see faults/README.md)")
        try:
            raw = parse_words(args.words[1:])
        except FaultError as exc:
            raise CliError(f"fault add: {exc}") from None
        f = tb.fault.add(args.words[0], **raw)
        if args.json:
            print_json(f)
        else:
            print(f"{f['id']} {f['kind']} {f['state']} seed {f['seed']}")
    elif args.op == "list":
        if args.words:
            raise CliError("fault list takes no argument")
        listed = tb.fault.list()
        if args.json:
            print_json(listed)
            return 0
        print(table(([f["id"], f["kind"], f["state"], f["seed"], f["activations"],
                      _words(f["spec"]),
                      " ".join(f"{k}={v}" for k, v in sorted(f["counters"].items()) if v),
                      f.get("error")]
                     for f in listed),
                    ["id", "kind", "state", "seed", "applied", "spec", "counters", "error"]),
              end="")
        if not listed:
            print("no fault")
    elif args.op == "del":
        if len(args.words) != 1:
            raise CliError("fault del: give one fault id (or name)")
        f = tb.fault.delete(args.words[0])
        if args.json:
            print_json(f)
        else:
            print(f"deleted {f['id']} {f['kind']}")
    else:
        gone = tb.fault.clear()
        if args.json:
            print_json(gone)
        for f in [] if args.json else gone:
            print(f"deleted {f['id']} {f['kind']}")
    return 0


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    from faults.kinds import describe

    sp = named("fault", "add, list, delete or clear faults; kinds: what each kind takes "
               "(faults/README.md)")
    sp.formatter_class = argparse.RawDescriptionHelpFormatter
    sp.epilog = describe()  # `fault add --help` lists every kind with its keys and defaults
    sp.add_argument("op", choices=("add", "list", "del", "clear", "kinds"))
    sp.add_argument("words", nargs="*", metavar="KIND|ID key=value",
                    help="add: KIND then key=value (match.type=PUT); del: fault id or name")
    json_option(sp)
    sp.set_defaults(func=cmd_fault)
