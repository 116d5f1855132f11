"""What observing a testbed costs a busy daemon: recorder and message trace on and off, same run.

Issue 16 item 1: "the recorder moves the throughput figure by at most 5 %, measured recorder on
and off in the same run". Three two-node Mininet testbeds are up at once, identical but for
what their daemons observe:

* ``off``: ``record_period=0``, no message trace;
* ``rec``: the recorder at the default period (100 ms), what ``testbed up`` does by default;
* ``trace``: the recorder and ``--trace-messages`` (what the pytest plugin brings up).

Each run measures every testbed in turn (the order rotates from run to run, so load drifts on
this shared machine fall on all three alike): the lnet_selftest throughput figure, ``lst brw
write size=1M`` at concurrency 64 for ``--lst-seconds`` (MB/s as ``lst stat --bw`` prints it,
``lnd_bench.lst_mbps``: the issue's figure), then c1 PUTs ``--count`` x 1 MiB to s1 (the
daemon's burst) and ``--small`` x 8 B (messages/s, where per-message hooks weigh most;
``msgrate.py``'s load), 64 in flight, with the CPU microseconds per message (per MiB for lst)
of both daemons. Printed: min/median/max per testbed and the ratio of medians to ``off``
(target for ``rec``: >= 0.95). Run as root:

    .venv/bin/python benchmarks/observe_cost.py [--runs 7] [--count 1000] [--small 20000]
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lnd_bench as lb

CONFIGS = {"off": {"record_period": 0.0, "trace_messages": False},
           "rec": {"record_period": 0.1, "trace_messages": False},
           "trace": {"record_period": 0.1, "trace_messages": True}}


def measure(tb: Any, size: int, count: int) -> tuple[float, float, float]:
    """(messages/s, CPU us per message of c1, of s1) of one burst of ``count`` PUTs."""
    c1, s1 = tb.node("c1"), tb.node("s1")
    secs, cpu = lb.with_cpu((c1, s1), lambda: lb.burst_load(c1, lb.server_nid(0), "write",
                                                            size, count))
    return count / secs, cpu[0] / count * 1e6, cpu[1] / count * 1e6


def measure_lst(tb: Any, seconds: float) -> tuple[float, float, float]:
    """(MB/s, CPU us per MiB of c1, of s1) of ``lst brw write size=1M``."""
    c1, s1 = tb.node("c1"), tb.node("s1")
    mbps, cpu = lb.lst_mbps(c1, s1, lb.server_nid(0), "write", lb.MIB, seconds=seconds)
    return mbps, cpu[0], cpu[1]


def main() -> int:
    p = lb.parser(__doc__)
    p.set_defaults(runs=7)
    p.add_argument("--count", type=int, default=1000, help="1 MiB PUTs per run")
    p.add_argument("--small", type=int, default=20000, help="8-byte PUTs per run")
    p.add_argument("--lst-seconds", type=float, default=3.0, help="lst stat window per run")
    args = p.parse_args()
    res: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    with contextlib.ExitStack() as stack:
        tbs = {cfg: stack.enter_context(lb.testbed(1, f"oc{cfg[:2]}", **kw))
               for cfg, kw in CONFIGS.items()}
        for tb in tbs.values():  # discovery, connections up
            tb.node("c1").put(lb.server_nid(0), count=64, size=lb.MIB)
        names = list(tbs)
        for run in range(args.runs):
            order = names[run % len(names):] + names[:run % len(names)]
            for cfg in order:
                res.setdefault((cfg, "lst"), []).append(measure_lst(tbs[cfg], args.lst_seconds))
                res.setdefault((cfg, "1MiB"), []).append(measure(tbs[cfg], lb.MIB, args.count))
                res.setdefault((cfg, "8B"), []).append(measure(tbs[cfg], 8, args.small))
    for load, unit, scale in (("lst", "MBps", 1.0), ("1MiB", "MBps", lb.MIB / 1e6),
                              ("8B", "msgs_per_s", 1.0)):
        rate = {cfg: [r[0] * scale for r in res[(cfg, load)]] for cfg in CONFIGS}
        for cfg in CONFIGS:
            rows = res[(cfg, load)]
            print(f"{load} {cfg}: {unit}={lb.fmt(rate[cfg], nd=0)} "
                  f"of_off={lb.ratio(rate[cfg], rate['off']):.3f} "
                  f"cpu_us_per_msg c1={lb.fmt([r[1] for r in rows], nd=1)} "
                  f"s1={lb.fmt([r[2] for r in rows], nd=1)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
