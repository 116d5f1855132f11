"""Hand-made one-line behavioural mutants of the engine and the LUTF tests that kill them
(issue 33 item 2: the five behaviours the LUTF layer did not notice).

Each mutant is one exact text replacement in one engine module; the runner copies the working
tree (tracked and untracked files, ``git ls-files -co --exclude-standard``) into a temporary
directory, runs the named tests there on the simulator unmutated (they must pass), then with
each mutant applied alone (they must fail), and prints one ``key=value`` line per mutant.
Exit status 1 when a mutant survives or the unmutated run fails.

    .venv/bin/python benchmarks/mutation_hand.py [--only NAME ...] [--tests PATH ...]

``--tests`` runs other tests against every mutant instead of each mutant's own (e.g.
``tests/lutf`` to see whether the whole LUTF layer notices it; ``--ignore`` leaves files out,
e.g. the new tests themselves, to see what the layer noticed before them).
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class HandMutant:
    name: str
    path: str  # engine module, from the repository root
    old: str  # exact text, found once
    new: str
    tests: tuple[str, ...]  # the LUTF tests that must kill it
    what: str


_MR = "tests/lutf/suite_multirail/test_mr_round_robin.py"
_REC = "tests/lutf/suite_recovery/test_recovery_arithmetic.py"
_RTE = "tests/lutf/suite_routing/test_route_choice.py"

HAND: tuple[HandMutant, ...] = (
    HandMutant(
        "ni-round-robin", "nodes/lnet/select.py",
        "        return a.tx_credits > b.tx_credits\n    return a.seq < b.seq\n\n\ndef lpni_key",
        "        return a.tx_credits > b.tx_credits\n    return False\n\n\ndef lpni_key",
        (f"{_MR}::test_single_puts_alternate_over_equal_nis_and_peer_nis",),
        "lnet_get_best_ni ignores ni_seq: equal NIs no longer round-robin"),
    HandMutant(
        "recovery-reply-no-health", "nodes/lnet/recovery.py",
        '        self.health.inc_ni(ni, "recovery")\n        return self.nistate.log_status(',
        "        return self.nistate.log_status(",
        (f"{_REC}::test_local_ni_recovery_ping_adds_twice_the_sensitivity",),
        "lnet_handle_recovery_reply adds no health for a local NI's recovery REPLY"),
    HandMutant(
        "seed-recovery-no-health", "nodes/lnet/recovery.py",
        '        if ok:\n            self.health.inc_ni(ni, "recovery")\n',
        "        if ok:\n",
        (f"{_REC}::test_seed_recovery_interval_adds_the_sensitivity_once_a_ping",),
        "seed 004's recovery ping (recovery_interval > 1) adds no health"),
    HandMutant(
        "route-ignores-hops", "nodes/lnet/routesel.py",
        "key = (pref, route.priority, route.hops_cmp,",
        "key = (pref, route.priority, 0,",
        (f"{_RTE}::test_route_with_fewer_hops_carries_every_put",),
        "lnet_find_route_locked ignores lr_hops"),
    HandMutant(
        "gateway-never-dead", "nodes/lnet/rtrcheck.py",
        "        if nxt == DEAD:\n            gw.alive = False\n",
        "        if nxt == DEAD:\n            pass\n",
        (f"{_RTE}::test_gateway_marked_dead_by_a_failed_ping_stays_dead_when_its_nids_are_said_alive",),
        "a failed router ping never clears the gateway's lp_alive"),
    HandMutant(
        "route-flag-ignored", "nodes/lnet/route.py",
        "no viable peer NI on the remote net\n        return route.alive\n",
        "no viable peer NI on the remote net\n        return True\n",
        (f"{_RTE}::test_route_down_by_a_failed_ping_waits_for_the_next_ping_after_an_lnd_revival",),
        "lnet_is_route_alive ignores the route's own lr_alive (discovery on)"),
)


def copy_tree(dst: Path) -> None:
    """The working tree as git sees it (no venv, no build output), mtimes kept."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                         check=True, capture_output=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src = ROOT / rel
        if rel.startswith("build/") or not src.is_file():
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float,
              ignore: tuple[str, ...] = ()) -> tuple[int, float]:
    """pytest on the simulator in ``tree`` (its sources first on sys.path: ``python -m``)."""
    env = dict(os.environ, LNET_TESTBED_PURE_PYTHON="1")
    argv = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
            "--lnet-backend=sim", *tests, *(f"--ignore={p}" for p in ignore)]
    t0 = time.monotonic()
    try:
        rc = subprocess.run(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = -1
    return rc, time.monotonic() - t0


def apply(tree: Path, m: HandMutant) -> str:
    """Apply ``m`` in ``tree``; returns the original text to restore."""
    path = tree / m.path
    text = path.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutation_hand: {m.name}: the text to mutate is found "
                         f"{text.count(m.old)} times in {m.path} (the engine changed: update HAND)")
    path.write_text(text.replace(m.old, m.new))
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, metavar="NAME", help="mutants to run")
    ap.add_argument("--tests", nargs="*", default=None, metavar="PATH",
                    help="run these tests against every mutant instead of its own")
    ap.add_argument("--ignore", nargs="*", default=(), metavar="PATH",
                    help="test files left out (pytest --ignore), e.g. the five tests' own")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per pytest run")
    ap.add_argument("--jobs", type=int, default=2, help="pytest runs at once, each in its "
                    "own copy of the tree (make mutation-ci: two, the box's cores)")
    args = ap.parse_args(argv)
    chosen = [m for m in HAND if args.only is None or m.name in args.only]
    if args.only and len(chosen) != len(args.only):
        unknown = sorted(set(args.only) - {m.name for m in HAND})
        print(f"mutation_hand: unknown mutant(s) {', '.join(unknown)}; known: "
              f"{', '.join(m.name for m in HAND)}", file=sys.stderr)
        return 2
    tests_of = {m.name: tuple(args.tests or m.tests) for m in chosen}
    every = tuple(dict.fromkeys(t for m in chosen for t in tests_of[m.name]))
    ignore = tuple(args.ignore)
    with tempfile.TemporaryDirectory(prefix="mutation-hand-") as tmp:
        trees: queue.Queue[Path] = queue.Queue()
        for i in range(max(1, args.jobs)):  # one copy of the tree per job: a mutant each
            copy_tree(Path(tmp, str(i)))
            trees.put(Path(tmp, str(i)))

        def one(m: HandMutant | None) -> tuple[int, float]:
            tree = trees.get()
            try:
                if m is None:
                    return run_tests(tree, every, args.timeout, ignore)
                original = apply(tree, m)
                try:
                    return run_tests(tree, tests_of[m.name], args.timeout, ignore)
                finally:
                    (tree / m.path).write_text(original)
            finally:
                trees.put(tree)

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            results = list(pool.map(one, [None, *chosen]))
    (rc, secs), rest = results[0], results[1:]
    print(f"scenario=unmutated tests={len(every)} rc={rc} passed={rc == 0} s={secs:.1f}")
    failed = rc != 0
    for m, (rc, secs) in zip(chosen, rest, strict=True):
        killed = rc not in (0, -1)
        status = "killed" if killed else ("timeout" if rc == -1 else "survived")
        print(f"mutant={m.name} module={m.path} status={status} rc={rc} s={secs:.1f} "
              f"what=\"{m.what}\"")
        failed |= not killed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
