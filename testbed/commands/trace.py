"""``testbed trace``: requirement traceability of the last ``pytest --lnet-trace`` run."""

from __future__ import annotations

import argparse

from testbed.commands.common import Named


def cmd_trace(args: argparse.Namespace) -> int:
    from testbed.pytest import trace

    reqs = trace.load_requirements(args.requirements)
    data = trace.load_data(args.data)
    print(trace.render(reqs, data), end="")
    cov = trace.coverage(reqs, data)
    return 1 if any(trace.status_of(reqs.get(r), t) == "FAILING" for r, t in cov.items()) else 0


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = sub.add_parser("trace", help="requirement traceability of the last test run",
                        description="every requirement of docs/requirements.md with the tests "
                        "covering it and their last result (exit 1 if one is failing)")
    sp.add_argument("--data", metavar="JSON", help="trace data (default: reports/trace.json)")
    sp.add_argument("--requirements", metavar="MD",
                    help="requirement list (default: docs/requirements.md)")
    sp.set_defaults(func=cmd_trace)
