"""``testbed explore``'s verdicts are honest (issue 30 item 1): built-in topology names work
as they do for ``up``; a seed that errors is an error, counted apart from failures; any
error or failure exits non-zero; "0 mismatches" is printed only over seeds that ran twice to
the end; the rates count completed seeds only."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import pytest

from testbed import cli
from testbed.explore import driver, pool, verdicts


class InlinePool:
    """``pool.Pool`` run in this process (so a monkeypatched ``run_task`` is what runs):
    each task runs when submitted; its result waits in a queue for ``results_iter``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pending = 0
        self.done: collections.deque[tuple[int, dict[str, Any]]] = collections.deque()
        self.next = 0

    def submit(self, task: dict[str, Any], avoid: int | None = None) -> int:
        w = self.next % self.size
        if w == avoid:
            w = (w + 1) % self.size
        self.next += 1
        self.submit_to(w, task)
        return w

    def submit_to(self, w: int, task: dict[str, Any]) -> None:
        self.pending += 1
        self.done.append((w, pool.safe_run_task(task)))

    def results_iter(self, timeout: float = 0.0) -> Iterator[tuple[int, dict[str, Any]]]:
        while self.pending:
            self.pending -= 1
            yield self.done.popleft()

    def close(self) -> None:
        pass


def _crash(monkeypatch: pytest.MonkeyPatch, when: Any) -> None:
    real = pool.run_task

    def run_task(task: dict[str, Any]) -> dict[str, Any]:
        if when(task):
            raise RuntimeError(f"injected crash of seed {task['seed']} run {task['run']}")
        return real(task)

    monkeypatch.setattr(pool, "run_task", run_task)


def test_explore_takes_a_builtin_topology_name_as_up_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The user's first try: `testbed explore default --seeds 20` (every seed draws tunables,
    so the topology file is rewritten with them: a name that is not a path used to be an
    error per seed, FileNotFoundError 'default')."""
    assert cli.main(["explore", "default", "--seeds", "20", "--time", "20", "--workers",
                     "0", "-q"]) == 0
    out = capsys.readouterr().out
    assert "ERROR" not in out
    assert "summary: 20 seeds, 20 ok, 0 failed, 0 errored (no verdict)" in out


def test_a_run_whose_seeds_all_error_exits_non_zero_and_says_so(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _crash(monkeypatch, lambda task: True)
    assert cli.main(["explore", "default", "--seeds", "3", "--time", "20",
                     "--workers", "0"]) == 1
    out = capsys.readouterr().out
    assert out.count("ERROR RuntimeError: injected crash") == 3
    assert "summary: 3 seeds, 0 ok, 0 failed, 2 errored" not in out
    assert "summary: 3 seeds, 0 ok, 0 failed, 3 errored (no verdict)" in out
    assert "ERROR: every seed errored before a verdict: nothing was explored" in out
    assert "seeds/hour" not in out and "speed: no seed ran to the end" in out


def test_one_error_among_passing_seeds_is_counted_apart_and_fails_the_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _crash(monkeypatch, lambda task: task["seed"] == 1)
    lines: list[str] = []
    rep = driver.explore("default", [0, 1, 2], time_s=20.0, workers=0, say=lines.append)
    assert [r["seed"] for r in rep.errors] == [1] and rep.failures == []
    assert len(rep.completed) == 2 and rep.exit_status() == 1
    assert "summary: 3 seeds, 2 ok, 0 failed, 1 errored (no verdict)" in lines
    assert any("2 completed seeds" in line for line in lines)


def test_determinism_is_claimed_only_over_seeds_that_ran_twice_to_the_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 1's second run errors: seed 1 is an error, not compared; seed 0 is compared.
    With every second run erroring nothing is compared and no "0 mismatches" is printed."""
    monkeypatch.setattr(pool, "Pool", InlinePool)
    _crash(monkeypatch, lambda task: task["seed"] == 1 and task["run"] == 1)
    lines: list[str] = []
    rep = driver.explore("default", [0, 1], time_s=20.0, check_determinism=True,
                         cluster="pool:2", say=lines.append)
    assert rep.compared == {0} and [r["seed"] for r in rep.errors] == [1]
    assert "seed 1: run 1 errored, the other ran to the end: not compared" in lines
    assert ("determinism: 1 seeds x 2 runs on different workers, 0 under different str "
            "hashes (PYTHONHASHSEED) (WARNING: every pair ran under one str hash: give the "
            "workers different PYTHONHASHSEED), 0 mismatches; 1 seed(s) not compared (a run "
            "errored)") in lines
    assert rep.exit_status() == 1

    _crash(monkeypatch, lambda task: task["run"] == 1)
    lines.clear()
    rep = driver.explore("default", [0, 1], time_s=20.0, check_determinism=True,
                         cluster="pool:2", say=lines.append)
    assert rep.compared == set() and len(rep.errors) == 2
    assert "determinism: NOT CHECKED: no seed ran twice to the end" in lines
    assert not any("mismatches" in line for line in lines)


def test_a_determinism_mismatch_names_the_first_differing_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The second worker's log of seed 0 differs from event #5 on: the seed's two hashes
    differ, the first differing chunk is run again on each worker and its event #5 of both
    is printed; other seeds' results keep coming meanwhile (seed 1 is not lost)."""
    monkeypatch.setattr(pool, "Pool", InlinePool)
    real = pool.run_task

    def run_task(task: dict[str, Any]) -> dict[str, Any]:
        res = real(task)
        if task["seed"] == 0 and task["run"] == 1:
            res["digest"], res["chunks"] = "other", ["other", *res["chunks"][1:]]
        if task["seed"] == 0 and task["run"] == 3:
            res["chunk_events"][5] = {"t": -1.0, "kind": "elsewhere"}
        return res

    monkeypatch.setattr(pool, "run_task", run_task)
    lines: list[str] = []
    rep = driver.explore("default", [0, 1], time_s=20.0, check_determinism=True,
                         cluster="pool:2", say=lines.append)
    assert sorted(rep.results) == [0, 1] and rep.compared == {0, 1}
    assert [m["seed"] for m in rep.mismatches] == [0] and rep.mismatches[0]["index"] == 5
    assert any(line.startswith("seed 0: DETERMINISM MISMATCH") and
               line.endswith("first differing event #5:") for line in lines)
    assert any('"kind": "elsewhere"' in line for line in lines)
    assert rep.exit_status() == 1
    assert any(line.endswith(", 1 mismatches") for line in lines)


def test_an_interrupt_still_prints_what_finished_and_fails_the_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during seed 2 of 0..3: the verdicts that came, the summary over them, the
    seeds left without one counted, a non-zero exit."""
    monkeypatch.setattr(pool, "Pool", InlinePool)
    real = pool.run_task

    def run_task(task: dict[str, Any]) -> dict[str, Any]:
        if task["seed"] == 2:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(pool, "run_task", run_task)
    lines: list[str] = []
    rep = driver.explore("default", range(4), time_s=20.0, cluster="pool:1",
                         say=lines.append)
    # (InlinePool runs a task when it is queued: seed 2's, queued after seed 0's verdict,
    # interrupts before seed 1's result is taken)
    assert sorted(rep.results) == [0] and rep.interrupted == 3
    assert "summary: 1 seeds, 1 ok, 0 failed, 0 errored (no verdict)" in lines
    assert "INTERRUPTED: 3 seed(s) left without a verdict; seeds with one: 0" in lines
    assert rep.exit_status() == 130


def test_seed_ranges_are_compact() -> None:
    assert verdicts.ranges([0, 1, 2, 3, 5, 7, 8, 9]) == "0-3, 5, 7-9"
    assert verdicts.ranges([]) == ""


def test_rates_count_completed_seeds_only() -> None:
    rep = verdicts.Report(wall=3.6)
    rep.results = {
        0: {"seed": 0, "ok": True, "virtual": 100.0, "wall": 1.0},
        1: {"seed": 1, "ok": False, "error": "RuntimeError: x", "virtual": 0.0, "wall": 0.0},
        2: {"seed": 2, "ok": False, "violation": {"invariant": "completion"},
            "virtual": 300.0, "wall": 1.0}}
    sp = rep.speed()
    assert sp["seeds_per_hour"] == pytest.approx(2 * 1000.0)  # 2 completed in 3.6 s
    assert sp["virtual_per_seed"] == pytest.approx(200.0)
    lines: list[str] = []
    verdicts.summary(rep, False, 600.0, lines.append)
    assert lines[0] == "summary: 3 seeds, 1 ok, 1 failed (completion 1), 1 errored (no verdict)"
    assert "2 completed seeds" in lines[1] and "= 2000 seeds/hour" in lines[1]
