"""Delay accuracy of the NFQUEUE interposer on LNet pings (issue 32: "delay median within
±1 ms"), on the packets and on the round trips, with the figure that bounds the round trips on
this host, measured in the same run.

Run as root: ``.venv/bin/python benchmarks/fault_delay.py [--n 200] [--name NAME]
[--backend mininet|lxc]``. It brings one_rail.yaml (tests/lutf/suite_faults) up on Mininet
(or two LXC guests) under NAME, then, as the LUTF delay tests do, puts a ``delay`` on c1's
GETs (``match.type=GET``: the ping's request) of 1 ms (the reference) and of 21 ms, in
alternating blocks of 50 LNet pings until each has ``n`` round trips, and prints:

1. **held**: how long each GET spent between c1's egress hooks and its wire, on kernel
   stamps (faults/wiretime.py): median, p5, p95 per setting, in ms (goal: the median within
   1 ms of the delay asked, whatever the load: the LUTF ``delay`` kind's check);
2. **added**: each 21 ms round trip less the median 1 ms one, in ms: median, p5, p95 (the
   idle-host ``delay_round_trip`` check: within 20 -1/+3);
3. **late**: how long after its due time the interposer gave each held GET its verdict
   (its ``late_us_p50/p95/max`` counters, µs, per block) and whether it ran SCHED_FIFO
   (``realtime``);
4. **bound**: what a process is held to here: a bare program (no NFQUEUE, no Python work)
   sleeping 1 ms and 21 ms, ``n`` times each, at nice -10 (as the daemons' wake-ups are: a
   normal task) and SCHED_FIFO (as a timed interposer); its oversleep in µs (p50/p95);
5. the tasks runnable at start and end (``/proc/loadavg``), the load the figures were
   measured under.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from faults import wiretime  # noqa: E402
from faults.timely import NICE, RT_PRIORITY  # noqa: E402

S1 = "10.10.0.2@tcp"
BLOCK = 50
TOPOLOGY = PROJECT_ROOT / "tests/lutf/suite_faults/one_rail.yaml"

#: The bare sleeper: oversleep (µs) of ``n`` sleeps of ``ms``, one a line, at niceness NICE
#: (argv[3] "nice") or SCHED_FIFO at RT_PRIORITY ("fifo"), as ``faults/timely.py`` sets.
BARE = """
import os, sys, time
if sys.argv[3] == "fifo":
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(sys.argv[5])))
os.nice(int(sys.argv[4]))
ms, n = float(sys.argv[1]), int(sys.argv[2])
for _ in range(n):
    t0 = time.monotonic()
    time.sleep(ms / 1e3)
    print(round((time.monotonic() - t0 - ms / 1e3) * 1e6))
"""


def runnable() -> int:
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[0]) - 1


def pct(xs: list[float], f: float) -> float:
    ranked = sorted(xs)
    return ranked[min(len(ranked) - 1, int(len(ranked) * f))]


def bare(ms: float, n: int, policy: str) -> list[float]:
    out = subprocess.run([sys.executable, "-c", BARE, str(ms), str(n), policy, str(NICE),
                          str(RT_PRIORITY)],
                         check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def block(tb: Any, ms: float, n: int,
          python: str) -> tuple[list[float], list[float], dict[str, Any]]:
    """``n`` ping round trips (s) under a ``delay ms`` on GETs, each GET's hold (ms, on the
    packets) and the fault's counters."""
    c1 = tb.node("c1")
    out = f"/tmp/{tb.name}-wiretime.json"
    pid = wiretime.start(c1, S1.split("@")[0], out, python)
    f = tb.fault.delay(node="c1", delay=ms, match={"type": "GET"})
    rtts = []
    for _ in range(n):
        t0 = time.monotonic()
        if c1.ping(S1).rc != 0:
            raise SystemExit("fault_delay: an LNet ping failed")
        rtts.append(time.monotonic() - t0)
    data = tb.fault.delete(f["id"]).get("counters", {})
    held = [us / 1e3 for us in wiretime.stop(c1, pid, out)["added_us"]]
    return rtts, held, data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--name", default=f"bdelay-{uuid.uuid4().hex[:6]}")
    ap.add_argument("--backend", choices=("mininet", "lxc"), default="mininet")
    args = ap.parse_args()
    import testbed

    load0 = runnable()
    if args.backend == "lxc":
        tb = testbed.up(TOPOLOGY, backend="vagrant", provider="lxc", name=args.name)
        python = "python3"  # the guest's, the project installed as wheels
    else:
        tb = testbed.up(TOPOLOGY, backend="mininet", name=args.name)
        python = sys.executable
    try:
        tb.node("c1").ping(S1)  # connections up
        rtts: dict[float, list[float]] = {1.0: [], 21.0: []}
        held: dict[float, list[float]] = {1.0: [], 21.0: []}
        late: dict[float, list[tuple[int, ...]]] = {1.0: [], 21.0: []}
        while len(rtts[21.0]) < args.n:
            for ms in (1.0, 21.0):
                got, hold, counters = block(tb, ms, BLOCK, python)
                rtts[ms] += got
                held[ms] += hold
                late[ms].append(tuple(counters.get(k, -1) for k in (
                    "late_us_p50", "late_us_p95", "late_us_max", "realtime")))
    finally:
        tb.down()
    sleeps = {(p, ms): bare(ms, args.n, p) for p in ("nice", "fifo") for ms in (1.0, 21.0)}
    load1 = runnable()
    ref = statistics.median(rtts[1.0])
    added = [(r - ref) * 1e3 for r in rtts[21.0]]
    print(f"runnable tasks: {load0} at start, {load1} at end (2 CPUs: {load0 > 2 or load1 > 2}"
          " = loaded)")
    for ms in (1.0, 21.0):
        h = held[ms]
        print(f"held on the packets at {ms:g} ms (n={len(h)}): median "
              f"{statistics.median(h):.3f} ms, p5 {pct(h, .05):.3f}, p95 {pct(h, .95):.3f} "
              f"(goal {ms:g} +- 1)")
    print(f"added (21 ms vs 1 ms, n={len(added)}): median {statistics.median(added):.2f} ms, "
          f"p5 {pct(added, .05):.2f}, p95 {pct(added, .95):.2f} (goal 20 +- 1)")
    print(f"ping rtt medians: 1 ms {ref * 1e3:.2f} ms, 21 ms "
          f"{statistics.median(rtts[21.0]) * 1e3:.2f} ms")
    for ms in (1.0, 21.0):
        print(f"interposer late_us (p50, p95, max, realtime) at {ms:g} ms, per block of "
              f"{BLOCK}: "
              f"{late[ms]}")
    for p in ("nice", "fifo"):
        b1, b21 = sleeps[(p, 1.0)], sleeps[(p, 21.0)]
        print(f"bare sleeper ({p}) oversleep us: 1 ms p50 {pct(b1, .5):.0f} p95 "
              f"{pct(b1, .95):.0f}; 21 ms p50 {pct(b21, .5):.0f} p95 {pct(b21, .95):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
