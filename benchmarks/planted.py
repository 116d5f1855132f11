"""The three planted bugs (``nodes/planted.py``): found on the simulator, reproduced on Mininet.

Issue 30's acceptance: each planted bug is found by ``testbed explore`` within 200 seeds on
the simulator, and the regression it emitted (``tests/lutf/suite_explore/test_explore_*``)
fails with the bug and passes without it 5 of 5 times on Mininet. Two parts:

* ``--seeds N`` (default 200; 0 skips it): for each bug, the seeds of ``mr-routers`` in
  order, ``--batch`` at a time on the local process pool (``--workers``), until the first
  seed that fails with the bug and passes without it; prints it and its invariant, or "not
  found in N";
* ``--mininet N`` (default 0; root): each emitted file, N runs with
  ``LNET_TESTBED_PLANTED_BUG`` set to the bug it names and N without, ``--parallel`` pytest
  processes at a time; prints failing runs with the bug / passing runs without.

Exits 1 when a bug is not found or a count is not N of N. Not a CI test (minutes of sim time,
half an hour of Mininet)::

    .venv/bin/python benchmarks/planted.py --seeds 200 --mininet 5
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nodes.planted import PLANTED, PLANTED_ENV  # noqa: E402
from testbed.explore.driver import explore  # noqa: E402

SUITE = ROOT / "tests" / "lutf" / "suite_explore"
MR = ROOT / "topologies" / "mr-routers.yaml"


def first_failure(bug: str, seeds: int, batch: int, workers: int,
                  time_s: float) -> tuple[int, str] | None:
    """The first seed (and its invariant) of ``0..seeds-1`` that fails with ``bug``."""
    for start in range(0, seeds, batch):
        rep = explore(str(MR), range(start, min(seeds, start + batch)), time_s=time_s,
                      planted=bug, cluster=f"pool:{workers}", quiet=True, say=lambda _l: None)
        failed = sorted(s for s, r in rep.results.items() if r.get("violation"))
        if not failed:
            continue
        clean = explore(str(MR), failed, time_s=time_s, cluster=f"pool:{workers}",
                        quiet=True, say=lambda _l: None)
        own = [s for s in failed if not clean.results[s].get("violation")
               and not clean.results[s].get("error")]  # the bug's, not the product's
        if own:
            return own[0], str(rep.results[own[0]]["violation"]["invariant"])
        raise SystemExit(f"{bug}: seeds {failed} fail without the bug too")
    return None


def planted_of(path: Path) -> str:
    m = re.search(r"--planted-bug ([a-z-]+)", path.read_text())
    if m is None or m.group(1) not in PLANTED:
        raise SystemExit(f"{path.name}: names no planted bug")
    return m.group(1)


def one_run(path: Path, bug: str | None) -> tuple[bool, float]:
    """One pytest run of ``path`` on Mininet; (passed, seconds)."""
    env = {k: v for k, v in os.environ.items() if k != PLANTED_ENV}
    if bug:
        env[PLANTED_ENV] = bug
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(path)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=1800)
    return res.returncode == 0, time.monotonic() - t0


def mininet(runs: int, parallel: int) -> bool:
    files = sorted(SUITE.glob("test_explore_*.py"))
    jobs = [(f, b) for f in files for b in (planted_of(f), None) for _ in range(runs)]
    with ThreadPoolExecutor(parallel) as pool:
        results = list(pool.map(lambda j: one_run(*j), jobs))
    ok = True
    for f in files:
        mine = [(b, r) for (ff, b), r in zip(jobs, results, strict=True) if ff == f]
        failed_with = sum(1 for b, (passed, _t) in mine if b and not passed)
        passed_without = sum(1 for b, (passed, _t) in mine if not b and passed)
        secs = [t for _b, (_p, t) in mine]
        print(f"mininet {f.name} ({planted_of(f)}): fails with the bug {failed_with}/{runs}, "
              f"passes without {passed_without}/{runs} "
              f"({min(secs):.0f}-{max(secs):.0f} s a run)", flush=True)
        ok = ok and failed_with == passed_without == runs
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=200, help="seeds to try per bug (0: skip)")
    p.add_argument("--batch", type=int, default=10, help="seeds per explore call")
    p.add_argument("--workers", type=int, default=2, help="local pool processes")
    p.add_argument("--time", type=float, default=600.0, help="safety phase (virtual s)")
    p.add_argument("--mininet", type=int, default=0, help="runs per file and arm (root)")
    p.add_argument("--parallel", type=int, default=2, help="pytest processes at a time")
    p.add_argument("--bugs", default=",".join(PLANTED), help="planted bugs to look for")
    args = p.parse_args()
    ok = True
    for bug in (b for b in args.bugs.split(",") if b and args.seeds):
        t0 = time.monotonic()
        found = first_failure(bug, args.seeds, args.batch, args.workers, args.time)
        took = time.monotonic() - t0
        if found is None:
            ok = False
            print(f"sim {bug}: not found in {args.seeds} seeds ({took:.0f} s)", flush=True)
        else:
            print(f"sim {bug}: found at seed {found[0]} ({found[1]}; {found[0] + 1} seeds, "
                  f"{took:.0f} s)", flush=True)
    if args.mininet:
        ok = mininet(args.mininet, args.parallel) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
