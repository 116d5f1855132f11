"""Mutation testing of the engine's decision modules with mutmut (issue 33 items 1 and 3).

mutmut (pyproject's ``mutation`` extra says why that tool) rewrites every function of the
modules in ``DECISION_MODULES`` into a trampoline that runs the original or one of its
mutants, learns once which tests call which function, and runs only those tests against each
mutant, a fork per mutant. A mutant is *killed* when a test fails, *survived* when they all
pass, *timeout* past its CPU limit, *no tests* when no selected test calls the function.

Each suite (``SUITES``: ``lutf`` is ``tests/lutf --lnet-backend=sim`` alone, ``unit+lutf``
adds the unit tests that import the engine, less two that read the code's shape) has its own
staging copy of the working tree, ``build/mutation/SUITE``, whose ``mutants/`` is the cache:
a rerun regenerates only the modules that changed and retests only the functions whose
source hash moved (mutmut's per-function hashes); results of the others stand. ``--budget``
stops the run after that many seconds (SIGINT: mutmut keeps every result it has); the next
run goes on where it stopped.

    .venv/bin/python benchmarks/mutation.py --suite lutf --budget 1800 --report R.md
    .venv/bin/python benchmarks/mutation.py --suite ci --modules select.py route.py ...
    .venv/bin/python benchmarks/mutation.py --suite ci --pick 12 --seed 33   # the CI sample
    .venv/bin/python benchmarks/mutation.py --sample benchmarks/mutation_sample.txt   # CI

``--pick`` draws the CI sample, by seed, from the mutants the last run of the suite killed
(``--suite ci``: the ``CI_TESTS``, so CI's stats pass takes seconds), and writes it to
``benchmarks/mutation_sample.txt``; ``--sample`` runs just those against the same tests (in
``build/mutation/ci-sample``, a fresh cache) and exits 1 if one survives: test strength
cannot drop silently. A sampled name whose function changed since no longer exists: it is reported
and skipped (re-pick the sample then). ``benchmarks/mutation_equivalent.txt`` lists the
mutants that cannot be killed (equivalent to the original), each with its reason; the scores
leave them out. One ``key=value`` line per module and one for the total on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutation_stats
from mutation_hand import ROOT, copy_tree

#: the engine's decision modules (nodes/lnet): selection, health, recovery, resend, routing and
#: router checks, discovery, UDSP, credits, fault rules
DECISION_MODULES = (
    "select.py", "decisions.py", "health.py", "hstatus.py", "recovery.py", "finalizer.py",
    "send.py", "route.py", "router.py", "rtrcheck.py", "rtralive.py", "rtrstate.py",
    "rtrpool.py", "discovery.py", "dc_state.py", "dc_merge.py", "udsp.py", "nidrange.py",
    "fault.py",
    # split out of send.py, route.py, dc_merge.py, fault.py and the peer (issue 29)
    "routesel.py", "dc_send.py", "faultrule.py", "lpstate.py",
)
#: the CI sample's tests: the five behaviours' LUTF tests and the suites next to them (a
#: stats pass of seconds, where all of tests/lutf takes a minute or more)
CI_TESTS = ("tests/lutf/suite_multirail/test_mr_round_robin.py",
            "tests/lutf/suite_multirail/test_mr_selection.py",
            "tests/lutf/suite_recovery/test_recovery_arithmetic.py",
            "tests/lutf/suite_recovery/test_recovery.py",
            "tests/lutf/suite_routing/test_route_choice.py",
            "tests/lutf/suite_routing/test_routes.py")
#: unit tests that look at the code rather than run it, so fail under mutmut's trampolines
#: (every function wrapped: more lines, more frames): left out of ``unit+lutf``
INTROSPECTIVE = ("tests/unit/test_layout.py::test_no_module_over_400_lines",
                 "tests/unit/test_components.py::test_one_puts_walk_enters_no_module_twice")
#: unit tests of a daemon's responsiveness on the wall clock ("status answers within 1 s"):
#: no engine decision in them, and under trampolines on a loaded box they miss their bound
#: (mutmut's own clean run stopped there: "status waited 1.15 s"), which would count as a kill
WALL_CLOCK = ("tests/unit/test_lnetctl_fairness.py", "tests/unit/test_sim_fairness.py")


def engine_unit_tests() -> tuple[str, ...]:
    """The unit tests that import the engine or the simulator (the Makefile's PURE_TESTS):
    the others cannot kill a mutant of nodes/lnet."""
    pat = re.compile(r"from (nodes\.(lnet|lnd|selftest|driver)|testbed\.sim)")
    return tuple(str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests" / "unit").glob(
        "test_*.py")) if pat.search(p.read_text()) and str(p.relative_to(ROOT)) not in WALL_CLOCK)


SUITES = {"lutf": ("tests/lutf",),
          "unit+lutf": (*engine_unit_tests(), "tests/lutf",
                        *(f"--deselect={t}" for t in INTROSPECTIVE)),
          "ci": CI_TESTS}
#: mutmut's exit codes (mutmut/stats.py) folded into what the report counts
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests",
          34: "skipped", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout",
          255: "timeout", 37: "killed", None: "not run"}
MUTMUT = Path(sys.executable).with_name("mutmut")
SAMPLE = ROOT / "benchmarks" / "mutation_sample.txt"
EQUIVALENT = ROOT / "benchmarks" / "mutation_equivalent.txt"


def mutmut_config(tests: tuple[str, ...], modules: tuple[str, ...],
                  timeout_multiplier: float = 15.0) -> str:
    only = ", ".join(f'"nodes/lnet/{m}"' for m in modules)
    sel = ", ".join(f'"{t}"' for t in tests)
    return ("\n[tool.mutmut]\nsource_paths = [\"nodes\"]\n"
            f"only_mutate = [{only}]\n"
            'also_copy = ["docs", "testbed", "faults", "topologies", "tools", "setup.py"]\n'
            'pytest_add_cli_args = ["--lnet-backend=sim", "-p", "no:cacheprovider"]\n'
            f"pytest_add_cli_args_test_selection = [{sel}]\n"
            "use_git_change_detection = false\n"
            + (f"timeout_multiplier = {timeout_multiplier}\n"
               if timeout_multiplier != 15.0 else ""))


def stage(name: str, tests: tuple[str, ...], modules: tuple[str, ...],
          timeout_multiplier: float = 15.0) -> Path:
    """``build/mutation/NAME``: the working tree (mtimes kept, so unchanged modules keep their
    mutants) and a pyproject with the mutmut section."""
    where = ROOT / "build" / "mutation" / name
    where.mkdir(parents=True, exist_ok=True)
    copy_tree(where)
    config = mutmut_config(tests, modules, timeout_multiplier)
    seen = where / "mutmut-config.toml"
    if seen.is_file() and seen.read_text() != config:
        # mutmut reuses a module it copied unmutated (its copy is newer than the source):
        # another module list or test selection needs a fresh cache
        shutil.rmtree(where / "mutants", ignore_errors=True)
    seen.write_text(config)
    pyproject = where / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + config)
    return where


#: ``mutmut run`` without its own clean run (``run_clean_tests``): ``parallel_pass`` ran the
#: same tests unmutated just before, on every worker there is
_MUTMUT_RUN = (
    "import sys\nfrom mutmut.workers import isolation\n"
    "for c in list(vars(isolation).values()):\n"
    "    if isinstance(c, type) and 'run_clean_tests' in vars(c):\n"
    "        c.run_clean_tests = lambda self, tests: 0\n"
    "from mutmut.__main__ import cli\nsys.argv[0] = 'mutmut'\ncli()\n")
_GENERATE = (
    "import os\nfrom mutmut.__main__ import create_mutants, store_lines_covered_by_tests\n"
    "from mutmut.mutation.trampoline import set_mutant_under_test\n"
    "from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, "
    "setup_source_paths\nos.makedirs('mutants', exist_ok=True)\n"
    "set_mutant_under_test('mutant_generation')\ncopy_src_dir()\ncopy_also_copy_files()\n"
    "setup_source_paths()\nstore_lines_covered_by_tests()\ncreate_mutants(2)\n")


def parallel_pass(where: Path, tests: tuple[str, ...], workers: int,
                  budget: float) -> tuple[int, str]:
    """Generate the mutants (mutmut's own code), then run ``tests`` once over them with
    ``pytest -n workers`` in mutmut's stats mode (``mutation_stats``); the first time, that
    is mutmut's stats file. Returns (rc, one summary line); rc 0 when mutmut may go on."""
    env = dict(os.environ, LNET_TESTBED_PURE_PYTHON="1", MUTANT_UNDER_TEST="stats",
               PY_IGNORE_IMPORTMISMATCH="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "benchmarks"),
                                                        os.environ.get("PYTHONPATH")])))
    gen = subprocess.run([sys.executable, "-c", _GENERATE], cwd=where, env=env,
                         capture_output=True, text=True, check=False)
    if gen.returncode != 0:
        return 2, f"mutation: generating mutants failed: {gen.stderr.strip()[-300:]}"
    parts = where / "stats-parts"
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir()
    env["MUTATION_STATS_OUT"] = str(parts)
    args = [sys.executable, "-m", "pytest", "--rootdir=.", "--tb=line", "-q", "-p",
            "no:randomly", "-p", "mutation_stats", "-n", str(workers), *tests,
            "--lnet-backend=sim", "-p", "no:cacheprovider"]
    t0 = time.monotonic()
    with open(where / "pass.log", "wb") as log:
        try:
            subprocess.run(args, cwd=where / "mutants", env=env, stdout=log,
                           stderr=subprocess.STDOUT, timeout=budget, check=False)
        except subprocess.TimeoutExpired:
            return 1, f"mutation: the parallel pass took over {budget:.0f} s"
    stats = where / "mutants" / "mutmut-stats.json"
    fresh = not stats.is_file()
    n_tests, n_funcs, failed = mutation_stats.merge(parts, stats if fresh else parts / "x")
    line = (f"pass=parallel workers={workers} tests={n_tests} functions_called={n_funcs} "
            f"failed_unmutated={len(failed)} stats={'new' if fresh else 'kept'} "
            f"s={time.monotonic() - t0:.0f}")
    for t in failed:
        print(f"mutation: fails unmutated, never run against a mutant: {t}", file=sys.stderr)
    return (0 if n_tests else 2), line


def run_mutmut(where: Path, names: list[str], budget: float, children: int) -> int:
    """``mutmut run`` in ``where`` for at most ``budget`` seconds (then SIGINT, then kill)."""
    env = dict(os.environ, LNET_TESTBED_PURE_PYTHON="1")
    with open(where / "mutmut.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", _MUTMUT_RUN, "run", "--max-children",
                                 str(children), *names],
                                cwd=where, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            return proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return -1


def results(where: Path, modules: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """module -> mutant name -> status, from mutmut's per-module ``.meta`` files."""
    out: dict[str, dict[str, str]] = {}
    for m in modules:
        meta = where / "mutants" / "nodes" / "lnet" / f"{m}.meta"
        if not meta.is_file():
            continue
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        out[m] = {k: STATUS.get(v, "suspicious") for k, v in codes.items()}
    return out


def equivalent() -> dict[str, str]:
    """``NAME REASON`` lines of mutation_equivalent.txt (``#`` comments)."""
    if not EQUIVALENT.is_file():
        return {}
    pairs = (line.split(None, 1) for line in EQUIVALENT.read_text().splitlines()
             if line.strip() and not line.startswith("#"))
    return {p[0]: p[1] if len(p) > 1 else "" for p in pairs}


def diffs(where: Path, names: list[str]) -> dict[str, str]:
    """The one-function diff of each mutant (mutmut's own ``show``), read in ``where``."""
    if not names:
        return {}
    code = ("import json, sys\nfrom mutmut.mutation.diff_apply import get_diff_for_mutant\n"
            "out = {}\nfor n in json.load(sys.stdin):\n    try:\n"
            "        out[n] = get_diff_for_mutant(n)\n    except Exception as e:\n"
            "        out[n] = f'(no diff: {e})'\nprint(json.dumps(out))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=where, input=json.dumps(names),
                         capture_output=True, text=True, check=False)
    return json.loads(res.stdout) if res.returncode == 0 else {n: "(no diff)" for n in names}


def _changed_lines(diff: str) -> str:
    """The changed lines of a unified diff, ``-old`` / ``+new``, on one line."""
    keep = [ln.strip() for ln in diff.splitlines()
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return " / ".join(re.sub(r"\s+", " ", ln) for ln in keep)[:300]


def summarize(res: dict[str, dict[str, str]], equiv: dict[str, str]
              ) -> list[tuple[str, dict[str, int]]]:
    rows = []
    for m, by in res.items():
        counts = {s: 0 for s in ("killed", "survived", "timeout", "no tests", "equivalent",
                                 "not run", "other")}
        for name, status in by.items():
            key = "equivalent" if name in equiv else status
            counts[key if key in counts else "other"] += 1
        rows.append((m, counts))
    return rows


def score(c: dict[str, int]) -> float | None:
    """Killed (timeouts count as killed: the mutant hangs the engine) of the non-equivalent
    mutants that ran (no-tests mutants count: nothing noticed them)."""
    ran = c["killed"] + c["timeout"] + c["survived"] + c["no tests"]
    return None if ran == 0 else (c["killed"] + c["timeout"]) / ran


def report(where: Path, suite: str, res: dict[str, dict[str, str]],
           equiv: dict[str, str], secs: float) -> str:
    rows = summarize(res, equiv)
    total = {k: sum(c[k] for _, c in rows) for k in rows[0][1]} if rows else {}
    lines = [f"# Mutation report: `{suite}` ({len(SUITES[suite])} pytest arguments, sim)", "",
             f"mutmut over nodes/lnet decision modules; this run {secs:.0f} s; cache "
             f"`{where.relative_to(ROOT)}`.", "",
             "| module | killed | survived | timeout | no tests | equivalent | not run | score |",
             "|---|---|---|---|---|---|---|---|"]
    for m, c in [*rows, ("**total**", total)] if rows else []:
        s = score(c)
        lines.append(f"| {m} | {c['killed']} | {c['survived']} | {c['timeout']} | "
                     f"{c['no tests']} | {c['equivalent']} | {c['not run']} | "
                     f"{'-' if s is None else f'{100 * s:.1f} %'} |")
    alive = [n for by in res.values() for n, st in by.items()
             if st in ("survived", "no tests") and n not in equiv]
    lines += ["", f"## Survivors ({len(alive)}: survived, then no tests)", ""]
    shown = diffs(where, alive)
    for n in sorted(alive, key=lambda n: (res_status(res, n) != "survived", n)):
        lines.append(f"* `{n}` ({res_status(res, n)}): `{_changed_lines(shown.get(n, ''))}`")
    return "\n".join(lines) + "\n"


def res_status(res: dict[str, dict[str, str]], name: str) -> str:
    return next(by[name] for by in res.values() if name in by)


def pick(suite: str, n: int, seed: int, modules: tuple[str, ...]) -> int:
    where = ROOT / "build" / "mutation" / suite
    killed = sorted(name for by in results(where, modules).values()
                    for name, st in by.items() if st == "killed")
    if len(killed) < n:
        print(f"mutation: only {len(killed)} killed mutants in {where}: run the suite first",
              file=sys.stderr)
        return 2
    chosen = sorted(random.Random(seed).sample(killed, n))
    SAMPLE.write_text(f"# mutation.py --pick {n} --seed {seed} from {len(killed)} mutants "
                      f"`{suite}` killed; CI (make mutation-ci) fails if one survives\n"
                      + "".join(f"{c}\n" for c in chosen))
    print(f"picked={n} seed={seed} of_killed={len(killed)} file={SAMPLE.relative_to(ROOT)}")
    return 0


def run_sample(path: Path, budget: float, children: int) -> int:
    names = [ln.strip() for ln in path.read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    modules = tuple(sorted({n.split(".")[2] + ".py" for n in names}))
    # a CPU limit of 2 x 4 x the tests' time, not mutmut's 2 x 15: a sampled mutant that
    # loops (route.delete's) is still a kill, 4x sooner
    where = stage("ci-sample", CI_TESTS, modules, timeout_multiplier=4.0)
    t0 = time.monotonic()
    rc, line = parallel_pass(where, CI_TESTS, children, budget)
    print(line)
    if rc:
        return rc
    rc = run_mutmut(where, names, max(30.0, budget - (time.monotonic() - t0)), children)
    res = results(where, modules)
    status = {n: next((by[n] for by in res.values() if n in by), "gone") for n in names}
    for n, st in status.items():
        print(f"mutant={n} status={st}")
    bad = [n for n, st in status.items() if st not in ("killed", "timeout", "gone")]
    gone = [n for n, st in status.items() if st == "gone"]
    print(f"scenario=ci-sample mutants={len(names)} killed={len(names) - len(bad) - len(gone)}"
          f" survived={len(bad)} gone={len(gone)} mutmut_rc={rc} "
          f"s={time.monotonic() - t0:.0f}")
    if gone:
        print("mutation: functions changed since the sample was picked; re-pick it "
              "(mutation.py --pick)", file=sys.stderr)
    return 1 if bad or rc == -1 else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", choices=sorted(SUITES), default="lutf")
    ap.add_argument("--modules", nargs="*", default=list(DECISION_MODULES), metavar="FILE",
                    help="nodes/lnet modules to mutate (default: the decision modules)")
    ap.add_argument("--budget", type=float, default=1800.0, help="seconds, then stop")
    ap.add_argument("--max-children", type=int, default=2, help="mutants run at once")
    ap.add_argument("--workers", type=int, default=2,
                    help="xdist workers of the parallel stats/clean pass")
    ap.add_argument("--report", type=Path, default=None, help="write the Markdown report")
    ap.add_argument("--pick", type=int, default=None, metavar="N", help="draw the CI sample")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--sample", type=Path, default=None, help="run a sample file (CI)")
    args = ap.parse_args(argv)
    bad = [m for m in args.modules if not (ROOT / "nodes" / "lnet" / m).is_file()]
    if bad:
        print(f"mutation: no such module nodes/lnet/{bad[0]}", file=sys.stderr)
        return 2
    if not MUTMUT.exists():
        print(f"mutation: {MUTMUT} missing: pip install -e '.[mutation]'", file=sys.stderr)
        return 2
    modules = tuple(args.modules)
    if args.sample is not None and not args.sample.is_file():
        print(f"mutation: no sample file {args.sample}", file=sys.stderr)
        return 2
    if args.sample is not None:
        return run_sample(args.sample, args.budget, args.max_children)
    if args.pick is not None:
        return pick(args.suite, args.pick, args.seed, modules)
    # a module subset has its own cache: another list would reset the whole suite's
    name = args.suite if set(modules) == set(DECISION_MODULES) else args.suite + "-" + "-".join(
        sorted(m.removesuffix(".py") for m in modules))[:80]
    where = stage(name, SUITES[args.suite], modules)
    t0 = time.monotonic()
    rc, line = parallel_pass(where, SUITES[args.suite], args.workers, args.budget)
    print(f"suite={args.suite} {line}")
    if rc:
        return rc
    rc = run_mutmut(where, [], max(30.0, args.budget - (time.monotonic() - t0)),
                    args.max_children)
    secs = time.monotonic() - t0
    res = results(where, modules)
    rows = summarize(res, equivalent())
    for m, c in rows:
        s = score(c)
        print(f"suite={args.suite} module={m} " + " ".join(
            f"{k.replace(' ', '_')}={v}" for k, v in c.items())
            + f" score={'-' if s is None else f'{s:.3f}'}")
    total = {k: sum(c[k] for _, c in rows) for k in rows[0][1]} if rows else {}
    s = score(total) if total else None
    print(f"suite={args.suite} module=total " + " ".join(
        f"{k.replace(' ', '_')}={v}" for k, v in total.items())
        + f" score={'-' if s is None else f'{s:.3f}'} mutmut_rc={rc} s={secs:.0f}")
    if args.report is not None:
        args.report.write_text(report(where, args.suite, res, equivalent(), secs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
