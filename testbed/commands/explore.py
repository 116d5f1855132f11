"""``testbed explore TOPOLOGY [--seeds N | --seed S] [--time T] [--workers K | --cluster ADDR]
[--check-determinism] [--out DIR]``: seeded fault swarms on the simulator (issue 17).

The work is ``testbed.explore.driver.explore``; this module checks the arguments (one line per
mistake, no traceback) and sets the exit status: 0 when every seed ran to the end and passed
(and, with ``--check-determinism``, every pair of runs matched), 1 on any failure, error or
mismatch (``testbed/explore/verdicts.py``). TOPOLOGY is a file or a built-in topology's name,
as ``testbed up`` takes it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from testbed.commands.common import CliError, Named


def cmd_explore(args: argparse.Namespace) -> int:
    from nodes.planted import check_name
    from testbed.explore.cluster import ClusterError
    from testbed.explore.driver import explore
    from testbed.explore.topo import load

    if args.seed is not None and args.seeds is not None:
        raise CliError("explore: give --seeds N or --seed S, not both")
    if args.seeds is not None and args.seeds < 1:
        raise CliError(f"explore: --seeds must be at least 1, not {args.seeds}")
    if not 10.0 <= args.time <= 86400.0:
        raise CliError(f"explore: --time must be 10..86400 virtual seconds, not {args.time:g}")
    if args.workers is not None and not 0 <= args.workers <= 64:
        raise CliError(f"explore: --workers must be 0..64, not {args.workers}")
    spec = _cluster(args)
    try:
        planted = check_name(args.planted_bug)
    except ValueError as exc:
        raise CliError(f"explore: --planted-bug: {exc}") from None
    load(args.topology)  # a bad file: one line naming file, line and field
    if args.seed is not None:
        seeds = [args.seed]
    else:
        seeds = list(range(args.first, args.first + (args.seeds or 100)))
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise CliError(f"explore: --out {out}: not a directory")
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    try:
        rep = explore(args.topology, seeds, time_s=args.time, workers=workers,
                      check_determinism=args.check_determinism, planted=planted, out_dir=out,
                      quiet=args.quiet, say=lambda line: print(line, flush=True),
                      cluster=spec, progress=True)
    except ClusterError as exc:
        raise CliError(f"explore: {exc}") from None
    return rep.exit_status()


def _cluster(args: argparse.Namespace) -> str | None:
    """``--cluster`` checked: an address, ``local:N`` or ``pool:N`` (N 1..64)."""
    from testbed.explore.cluster import LOCAL, POOL

    spec: str | None = args.cluster
    if spec is None:
        return None
    if args.workers is not None:
        raise CliError("explore: give --workers K or --cluster, not both (--cluster "
                       "local:K is --workers K on dask)")
    for prefix in (LOCAL, POOL):
        if spec.startswith(prefix):
            n = spec[len(prefix):]
            if not n.isdigit() or not 1 <= int(n) <= 64:
                raise CliError(f"explore: --cluster {spec}: {prefix}N wants N in 1..64")
            return spec
    if "://" not in spec:
        raise CliError(f"explore: --cluster {spec}: a scheduler address "
                       "(tcp://HOST:8786), local:N or pool:N")
    return spec


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = sub.add_parser("explore", help="seeded fault swarms on the simulator: find, shrink, "
                        "replay", description="Run seeded fault swarms against the engine on "
                        "the in-process simulator; check LNet's invariants while the faults "
                        "are on (safety) and its recovery once they are gone (liveness); "
                        "shrink a failure to a minimal pytest file (--out).")
    sp.add_argument("topology", help="topology YAML file or built-in name (default, routed, ...)")
    sp.add_argument("--seeds", type=int, default=None, metavar="N",
                    help="run N seeds (default 100), starting at --first")
    sp.add_argument("--first", type=int, default=0, metavar="S0", help="first seed (default 0)")
    sp.add_argument("--seed", type=int, default=None, metavar="S", help="run seed S only")
    sp.add_argument("--time", type=float, default=600.0, metavar="T",
                    help="virtual seconds of the safety phase (default 600); the liveness "
                         "phase adds the bound its tunables give")
    sp.add_argument("--workers", type=int, default=None, metavar="K",
                    help="worker processes on this machine (default: one per CPU; 0: in "
                         "this process): --cluster local:K with dask installed")
    sp.add_argument("--cluster", metavar="ADDR", default=None,
                    help="run the seeds as tasks of a dask.distributed scheduler at ADDR "
                         "(tcp://HOST:8786; docs/explore.md), or local:N (a LocalCluster "
                         "of N processes here), or pool:N (N processes here, no dask)")
    sp.add_argument("--check-determinism", action="store_true",
                    help="run each seed twice, in workers with different PYTHONHASHSEED, "
                         "and compare the event logs")
    sp.add_argument("--out", metavar="DIR", help="shrink the first failure of each invariant "
                    "and write it as a pytest file under DIR, with the failing seed's event "
                    "log (on the cluster with --cluster)")
    sp.add_argument("-q", "--quiet", action="store_true", help="print failures and the "
                    "summary only")
    sp.add_argument("--planted-bug", metavar="NAME", default=None,
                    help="test-only: build every engine with a planted wrong decision "
                         "(nodes/planted.py) to check that explore finds it")
    sp.set_defaults(func=cmd_explore)
