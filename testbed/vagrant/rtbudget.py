"""The real-time budget each LXC guest's cpu cgroup gets, so a timed fault's interposer can
run SCHED_FIFO inside it (faults/timely.py; issue 32: the delay fault within 1 ms).

Theory of operation: on a host whose kernel has ``CONFIG_RT_GROUP_SCHED`` and a cgroup v1
``cpu`` hierarchy (this box: kernel 6.18, hybrid hierarchy), every cpu cgroup but the root
starts with ``cpu.rt_runtime_us`` 0, and ``sched_setscheduler(SCHED_FIFO)`` of a task in it
fails with EPERM whatever its capabilities. An LXC container's tasks sit in its own cgroup
(``/sys/fs/cgroup/cpu/lxc.payload.<name>``; the guest's systemd makes no cpu sub-groups), so
the interposer ran niced only (counter ``realtime`` 0, 7.3 ms p95 lateness measured). The
fix is the container's config: ``lxc.cgroup.cpu.rt_runtime_us`` (vagrantfile.py), sized here.

The kernel refuses a group budget that, with its siblings', exceeds its parent's
(``runtime/period`` summed, ``sched_rt_runtime_us`` 950,000 of 1,000,000 at the root): a
container asking more than is free would not start. So each guest gets at most
:data:`GUEST_US` per second, and only what the budgets already handed out leave, less
:data:`RESERVE_US` for other testbeds starting meanwhile; under :data:`MIN_US` none (the
interposer then runs niced, counted ``realtime`` 0). Budgets belong to the containers' cgroups
and go with them at ``down``.
"""

from __future__ import annotations

from pathlib import Path

#: The host's cgroup v1 cpu hierarchy.
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
#: Real-time microseconds per second a guest may use: a delay interposer's wake-ups take a few
#: ms per second; this leaves room for one following a bulk stream (~34 us per packet, about
#: 3,000 packets/s at 4 KiB PUTs) without being throttled.
GUEST_US = 100_000
#: Below this a guest gets no budget (an interposer throttled for most of each second would be
#: later than a niced one).
MIN_US = 20_000
#: Left free for other testbeds' guests.
RESERVE_US = 100_000


def _budget(group: Path) -> tuple[int, int] | None:
    """(runtime, period) microseconds of one cpu cgroup, None when it has no RT files."""
    try:
        return (int((group / "cpu.rt_runtime_us").read_text()),
                int((group / "cpu.rt_period_us").read_text()))
    except (OSError, ValueError):
        return None


def guest_rt_us(guests: int, root: Path = CPU_ROOT) -> int:
    """Real-time microseconds per second for each of ``guests`` new LXC guests; 0 when the
    host has no RT group scheduling (then LXC needs no setting: SCHED_FIFO is not limited by
    group) or too little is free."""
    top = _budget(root)
    if top is None or guests <= 0:
        return 0
    runtime, period = top
    if runtime < 0:  # unlimited at the root: nothing to share out
        return GUEST_US
    used = 0.0
    for child in root.iterdir():
        b = _budget(child) if child.is_dir() else None
        if b is not None and b[0] > 0 and b[1] > 0:
            used += b[0] / b[1] * period
    free = runtime - used - RESERVE_US
    each = min(GUEST_US, int(free // guests) // 1000 * 1000)
    return each if each >= MIN_US else 0
