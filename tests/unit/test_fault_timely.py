"""faults/timely.py: a timed kind's interposer runs SCHED_FIFO (its verdicts on time on a
loaded host, issue 32's ±1 ms delay), others only niced; ``late_us_*`` are the release
latenesses' percentiles as flat integer counters."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from faults import timely

PROBE = ("import os, sys; from faults import timely; ok = timely.prioritise(sys.argv[1]); "
         "print(ok, os.sched_getscheduler(0) == os.SCHED_FIFO, os.nice(0))")


def _policy(kind: str) -> str:
    return subprocess.run([sys.executable, "-c", PROBE, kind], check=True, text=True,
                          capture_output=True, cwd=os.getcwd()).stdout.split()


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO and negative nice need root")
def test_timed_kinds_run_real_time_others_niced() -> None:
    for kind in sorted(timely.TIMED_KINDS):
        assert _policy(kind) == ["True", "True", str(timely.NICE)], kind
    for kind in ("loss", "duplicate", "corrupt", "rst"):
        assert _policy(kind) == ["False", "False", str(timely.NICE)], kind


def test_lateness_percentiles_are_integer_microseconds() -> None:
    late = [i / 1e6 for i in range(1, 101)]  # 1 .. 100 us
    assert timely.lateness(late) == {"late_us_p50": 51, "late_us_p95": 96, "late_us_max": 100}
    assert timely.lateness([]) == {}
    assert all(isinstance(v, int) for v in timely.lateness([0.0012]).values())
