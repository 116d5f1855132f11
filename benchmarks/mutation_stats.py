"""mutmut's stats pass, in parallel (issue 33; benchmarks/mutation.py).

Why: before its first mutant, ``mutmut run`` runs the whole selection twice in one process
(the stats pass, which learns which tests call which mutated function, then a clean run), and
stops at the first failure of either. For ``unit+lutf`` that is ~1,100 tests twice, serially,
each call of a mutated function through a trampoline: more than 15 minutes on the shared box
before the first mutant. This module does both in one ``pytest -n WORKERS`` pass over the
staging copy's ``mutants/`` (the trampolines in mutmut's "stats" mode, which run the
original code, so a passing test here is mutmut's clean run too): each xdist worker records,
per test, the mutated functions it called (mutmut's own ``record_trampoline_hit`` state) and
its call duration, and ``merge`` writes them as ``mutants/mutmut-stats.json``, which
``mutmut run`` loads instead of collecting its own. A test that fails unmutated is reported
and never associated with a mutant (it would kill every one).

As a pytest plugin (``-p mutation_stats``, loaded in every worker), with
``MUTATION_STATS_OUT`` naming the directory for the per-worker parts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_OUT = "MUTATION_STATS_OUT"
_hits: dict[str, set[str]] = {}
_durations: dict[str, float] = {}
_failed: set[str] = set()


def _state() -> Any:
    from mutmut.state import state
    return state()


def pytest_configure(config: Any) -> None:
    from mutmut.mutation.trampoline import set_mutant_under_test
    set_mutant_under_test("stats")


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _durations.setdefault(nodeid, 0.0)
    _state()._stats.clear()


def pytest_runtest_logreport(report: Any) -> None:
    if report.when == "call":
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration
    if report.failed:
        _failed.add(report.nodeid)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    for function in _state()._stats:
        _hits.setdefault(function, set()).add(nodeid)
    _state()._stats.clear()


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    out = os.environ.get(_OUT)
    if not out:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(out, f"part-{worker}.json").write_text(json.dumps(
        {"hits": {k: sorted(v) for k, v in _hits.items()}, "durations": _durations,
         "failed": sorted(_failed)}))


def merge(parts_dir: Path, stats_file: Path) -> tuple[int, int, list[str]]:
    """Write mutmut's stats file from the parts: (tests, functions called, failed tests).

    Only the fields mutmut needs to pick tests and time mutants; empty function hashes,
    dependencies, config fingerprint and watched-file hashes are what mutmut reads as "no
    baseline yet" (it fills them in when it saves)."""
    hits: dict[str, set[str]] = {}
    durations: dict[str, float] = {}
    failed: set[str] = set()
    for part in sorted(parts_dir.glob("part-*.json")):
        data = json.loads(part.read_text())
        for k, v in data["hits"].items():
            hits.setdefault(k, set()).update(v)
        durations.update(data["durations"])
        failed.update(data["failed"])
    tests = {k: sorted(set(v) - failed) for k, v in hits.items()}
    stats_file.write_text(json.dumps({
        "tests_by_mangled_function_name": tests, "duration_by_test": durations,
        "stats_time": sum(durations.values()), "function_hashes": {},
        "function_dependencies": {}, "config_fingerprint": {}, "watched_file_hashes": {},
        "git_commit": None}, indent=1))
    return len(durations), len(tests), sorted(failed)
