"""What keeps an interposer's verdicts on time, and how late they came.

Theory of operation: netem delays a packet in softirq context; the interposer is a process,
so a held packet is released when the process wakes. Every interposer runs at :data:`NICE`;
the kinds whose effect is a time (:data:`TIMED_KINDS`) run SCHED_FIFO at the lowest
real-time priority (:func:`prioritise`). :func:`lateness` turns the release latenesses the
interposer kept into its ``late_us_*`` counters (flat integers: the supervisor passes, and
sums over activations, integer counters only).
"""

from __future__ import annotations

import contextlib
import os

#: Niceness of every interposer (root): it must release held packets on time.
NICE = -10
#: Kinds whose effect is a time: their interposer runs SCHED_FIFO.
TIMED_KINDS = frozenset({"delay", "reorder", "stall"})
#: SCHED_FIFO priority of a timed interposer: the lowest, above every normal task.
RT_PRIORITY = 1


def prioritise(kind: str) -> bool:
    """Nice the process; for a timed kind also try SCHED_FIFO (True when it is).

    Why real-time: on a loaded host the timer wake-up of a normal task waits for the CPU's
    current task whatever its niceness (EEVDF); a real-time task preempts it. Measured on 2
    cores at 14 runnable tasks (benchmarks/README.md, ``fault_delay.py``): a 21 ms sleep
    overslept p50 217 / p95 11,639 us at nice -10, 75 / 270 us SCHED_FIFO. Only the timed
    kinds: a real-time interposer busy with bulk traffic would take its core (the kernel's
    RT throttling leaves others 5 %). Where not permitted, nice alone (counter ``realtime``
    0): a task in a cpu cgroup with no real-time budget gets EPERM whatever its capabilities
    (``CONFIG_RT_GROUP_SCHED``, cgroup v1: every group but the root starts at
    ``cpu.rt_runtime_us`` 0). LXC guests get a budget from their config
    (testbed/vagrant/rtbudget.py); measured there before it: 7.3 ms p95 lateness."""
    with contextlib.suppress(OSError):
        os.nice(NICE)
    if kind not in TIMED_KINDS:
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
    except (OSError, AttributeError):
        return False
    return True


def lateness(late: list[float]) -> dict[str, int]:
    """``late_us_p50``/``p95``/``max`` (microseconds) of release latenesses in seconds."""
    if not late:
        return {}
    ranked = sorted(late)
    return {f"late_us_{q}": round(ranked[min(len(ranked) - 1, int(len(ranked) * f))] * 1e6)
            for q, f in (("p50", .5), ("p95", .95), ("max", 1.0))}
