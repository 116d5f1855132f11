"""What ``testbed explore`` concludes from its seeds: results, verdicts, the summary lines.

Theory of operation (issue 30 item 1, "honest verdicts"): a seed ends in one of three ways.
It *passed* (ran to the end, no invariant violated), it *failed* (ran to the end and an
invariant, a liveness problem or a livelock was proved: a finding about LNet or the
checker), or it *errored* (an exception stopped it before a verdict: a bad topology, a
crash of the engine or the simulator, a worker lost). Errors are counted apart from failures
and never pass for either; any error or failure makes the run exit non-zero
(``Report.exit_status``; a Ctrl-C: 130, after the summary of the seeds that finished).
With ``--check-determinism`` only seeds whose two runs both ran to the end are compared,
and the determinism line says over how many: "0 mismatches" over no compared seed is never
printed. The speed figures (x real time, seeds per hour, virtual time
per seed) count completed seeds only: an error that took no time must not raise the rate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Say = Callable[[str], None]
#: the exit status of a run Ctrl-C stopped (128 + SIGINT, as a shell reports it)
INTERRUPTED = 130


@dataclass
class Report:
    """Every seed's result (the first run's, or the run that errored), the determinism
    mismatches, the seeds compared, the pytest files written and the wall time."""

    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    compared: set[int] = field(default_factory=set)
    #: compared seeds whose two runs hashed str differently (``pool.hash_probe``)
    hash_varied: int = 0
    written: list[Path] = field(default_factory=list)
    wall: float = 0.0
    workers: int = 1
    #: of ``wall``, the seconds the workers took to start (a LocalCluster's, a pool's)
    start: float = 0.0
    #: seeds left without a verdict by an interrupt (Ctrl-C)
    interrupted: int = 0

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Seeds that did not run to a verdict (an exception: ``error``)."""
        return [r for _s, r in sorted(self.results.items()) if r.get("error")]

    @property
    def failures(self) -> list[dict[str, Any]]:
        """Seeds that ran to the end and violated something."""
        return [r for _s, r in sorted(self.results.items())
                if not r["ok"] and not r.get("error")]

    @property
    def completed(self) -> list[dict[str, Any]]:
        return [r for r in self.results.values() if not r.get("error")]

    @property
    def virtual(self) -> float:
        return float(sum(r.get("virtual", 0.0) for r in self.completed))

    @property
    def worker_wall(self) -> float:
        return float(sum(r.get("wall", 0.0) for r in self.completed))

    def speed(self) -> dict[str, float]:
        """x real time (virtual s per wall s of one worker) and seeds per hour (this box),
        over completed seeds only."""
        n = len(self.completed)
        return {"x_real_time": self.virtual / self.worker_wall if self.worker_wall else 0.0,
                "seeds_per_hour": n * 3600.0 / self.wall if self.wall else 0.0,
                "virtual_per_seed": self.virtual / n if n else 0.0}

    def exit_status(self) -> int:
        """0 only when every seed ran to the end and passed (and matched, when compared);
        130 (a shell's SIGINT status) when Ctrl-C left seeds without a verdict."""
        if self.interrupted:
            return INTERRUPTED
        return 1 if self.errors or self.failures or self.mismatches else 0


def ranges(seeds: list[int]) -> str:
    """Sorted seeds as ``0-3, 5, 7-9``."""
    runs: list[list[int]] = []
    for s in seeds:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def show(res: dict[str, Any], topology: str, planted: str | None, quiet: bool,
         say: Say) -> None:
    """One seed's swarm and verdict (a failure: its proof and how to reproduce it)."""
    s = res["seed"]
    if res.get("error"):
        where = f" (run {res['run']}, PYTHONHASHSEED {res['hashseed']})" \
            if res.get("run") and res.get("hashseed") else ""
        say(f"seed {s}: ERROR{where} {res['error']}")
        return
    if res["ok"] and quiet:
        return
    for line in res["swarm"]:
        say(line)
    stats = (f"{res['events']} events, {res['sends']} messages, {res['virtual']:.0f} virtual s "
             f"in {res['wall']:.2f} s")
    if res["ok"]:
        say(f"  ok ({stats})")
        return
    say(f"  FAIL ({stats})")
    for line in res["violation"]["lines"]:
        say(f"  {line}")
    extra = f" --planted-bug {planted}" if planted else ""
    say(f"  reproduce with: testbed explore {topology} --seed {s}{extra}")


def mismatch(mm: dict[str, Any], say: Say) -> None:
    say(f"seed {mm['seed']}: DETERMINISM MISMATCH between PYTHONHASHSEED "
        f"{mm['hashseeds'][0]} and {mm['hashseeds'][1]} ({mm['events'][0]} vs "
        f"{mm['events'][1]} events); first differing event #{mm['index']}:")
    for h, ev in zip(mm["hashseeds"], mm["first"], strict=True):
        say(f"    [{h}] {json.dumps(ev, sort_keys=True) if ev is not None else '(none)'}")


def summary(rep: Report, det: bool, time_s: float, say: Say) -> None:
    """The closing lines: verdict counts, determinism (over compared seeds), speed."""
    n, fails, errs = len(rep.results), rep.failures, rep.errors
    kinds: dict[str, int] = {}
    for r in fails:
        key = r["violation"]["invariant"] if r.get("violation") else "unknown"
        kinds[key] = kinds.get(key, 0) + 1
    by = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    say(f"summary: {n} seeds, {n - len(fails) - len(errs)} ok, {len(fails)} failed"
        + (f" ({by})" if by else "")
        + f", {len(errs)} errored (no verdict)")
    if rep.interrupted:
        say(f"INTERRUPTED: {rep.interrupted} seed(s) left without a verdict; seeds with "
            f"one: {ranges(sorted(rep.results)) or 'none'}")
    if errs and len(errs) == n:
        say(f"ERROR: every seed errored before a verdict: nothing was explored (first: "
            f"{errs[0]['error']})")
    if det:
        k = len(rep.compared)
        if k == 0:
            say("determinism: NOT CHECKED: no seed ran twice to the end")
        else:
            left = f"; {n - k} seed(s) not compared (a run errored)" if k < n else ""
            same = "" if rep.hash_varied else (" (WARNING: every pair ran under one str hash: "
                                               "give the workers different PYTHONHASHSEED)")
            say(f"determinism: {k} seeds x 2 runs on different workers, {rep.hash_varied} "
                f"under different str hashes (PYTHONHASHSEED){same}, "
                f"{len(rep.mismatches)} mismatches{left}")
    done = len(rep.completed)
    if not done:
        say(f"speed: no seed ran to the end ({rep.wall:.1f} s on {rep.workers} worker(s))")
        return
    sp = rep.speed()
    say(f"speed: {rep.virtual:.0f} virtual s in {rep.worker_wall:.1f} s of worker time = "
        f"{sp['x_real_time']:.0f}x real time; {done} completed seeds ({time_s:g} s safety "
        f"phase, {sp['virtual_per_seed'] / 60:.1f} virtual min each with liveness) in "
        f"{rep.wall:.1f} s on {rep.workers} worker(s) = {sp['seeds_per_hour']:.0f} seeds/hour")
