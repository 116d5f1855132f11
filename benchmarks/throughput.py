"""1 MiB bulk over one rail between two Mininet nodes, write and read, against iperf3 and asyncio.

Brings up c1 and s1 on one rail (``lnd_bench.topology_yaml``) and measures, in the same run
over the same link, ``--runs`` times each:

* LNet write: c1 PUTs ``--count`` x 1 MiB to s1 (64 in flight), MB/s of payload;
* LNet read: c1 GETs ``--count`` x 1 MiB from s1 (64 in flight);
* iperf3, one TCP stream c1 -> s1 (write) and ``-R`` (read);
* the bare asyncio request/response program with the same bytes per message and 64 in flight
  (``lnd_bench.asyncio_ref``).

Targets (issue 13): LNet >= 60 % of iperf3 and >= 65 % of the bare asyncio stream, each
direction. The LNet figure is what ``lst stat --bw`` prints for ``lst brw write|read size=1M``
at concurrency 64 (``lnd_bench.lst_mbps``, issue 13's figure), or with ``--load burst`` the
rate of the daemon's PUT/GET burst of ``--count`` messages (``burst_load``).
``--profile DIR`` runs py-spy on both daemons during one extra LNet run of each direction.
Run as root:

    .venv/bin/python benchmarks/throughput.py [--runs 3] [--count 2000] [--load lst|burst]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lnd_bench as lb

SIZE = lb.MIB


def lnet_mbps(load: lb.Load, c1: Any, op: str, count: int) -> float:
    return count * SIZE / load(c1, lb.server_nid(0), op, SIZE, count) / 1e6


def ref_mbps(c1: Any, s1: Any, op: str, count: int) -> float:
    req, resp = ((SIZE + lb.FRAME_OVERHEAD, lb.FRAME_OVERHEAD) if op == "write"
                 else (lb.FRAME_OVERHEAD, SIZE + lb.FRAME_OVERHEAD))
    secs = lb.asyncio_ref(c1, s1, lb.server_ip(0), req_bytes=req, resp_bytes=resp,
                          count=count)
    return count * SIZE / secs / 1e6


def profile(load: lb.Load | None, c1: Any, s1: Any, count: int, out: Path) -> None:
    """py-spy both daemons during one more LNet run of each direction: ``lst brw`` (``load``
    None: sampled 4 s from 4.5 s in, past the lst set-up, inside the 6 s stat window) or
    the burst ``load``."""
    for op in ("write", "read"):
        if load is None:
            lb.profiled((c1, s1), out, op, lambda op=op: lb.lst_mbps(
                c1, s1, lb.server_nid(0), op, SIZE, seconds=6), seconds=4, after=4.5)
            continue
        # a run of ~4 s sampled for 3 s, so the busy shares are the run's own
        n = max(count, int(4 * lnet_mbps(load, c1, op, count) * 1e6 / SIZE))
        lb.profiled((c1, s1), out, op, lambda op=op, n=n: lnet_mbps(load, c1, op, n))


def main() -> int:
    p = lb.parser(__doc__)
    p.add_argument("--count", type=int, default=2000, help="1 MiB messages per burst run "
                   "(--load burst) and per asyncio reference run")
    p.add_argument("--seconds", type=int, default=3, help="iperf3 duration; lst stat "
                   "window is 2 s longer")
    p.add_argument("--load", choices=("lst", "burst"), default="lst",
                   help="lst brw (default) or the daemon's PUT/GET burst")
    p.add_argument("--untyped", action="store_true", help="daemons with typed_conns=0: one "
                   "SOCKLND_CONN_ANY connection per peer NI instead of control + bulk in/out")
    args = p.parse_args()
    if args.untyped:
        os.environ["KSOCKLND_TYPED_CONNS"] = "0"  # inherited by the node daemons
    load: lb.Load = lb.burst_load
    with lb.testbed(1, "tput") as tb:
        c1, s1 = tb.node("c1"), tb.node("s1")
        c1.put(lb.server_nid(0), count=64, size=SIZE)  # discovery, connections up
        res: dict[str, list[float]] = {}
        for _ in range(args.runs):
            for op in ("write", "read"):
                if args.load == "lst":
                    mbps, cpu_us = lb.lst_mbps(c1, s1, lb.server_nid(0), op, SIZE,
                                               seconds=args.seconds + 2)
                else:
                    mbps, cpu = lb.with_cpu((c1, s1), lambda op=op: lnet_mbps(load, c1, op,
                                                                              args.count))
                    cpu_us = [secs / args.count * 1e6 for secs in cpu]
                res.setdefault(f"lnet_{op}", []).append(mbps)
                for name, us in zip(("c1", "s1"), cpu_us, strict=True):
                    res.setdefault(f"cpu_{name}_{op}", []).append(us)
                res.setdefault(f"iperf3_{op}", []).append(
                    lb.iperf3(c1, s1, lb.server_ip(0), seconds=args.seconds,
                              reverse=op == "read"))
                res.setdefault(f"asyncio_{op}", []).append(ref_mbps(c1, s1, op, args.count))
        for op in ("write", "read"):
            lnet, ip3, aio = res[f"lnet_{op}"], res[f"iperf3_{op}"], res[f"asyncio_{op}"]
            print(f"{op}: lnet_MBps={lb.fmt(lnet)} iperf3_MBps={lb.fmt(ip3)} "
                  f"asyncio_MBps={lb.fmt(aio)} of_iperf3={lb.ratio(lnet, ip3):.2f} "
                  f"(target 0.60) of_asyncio={lb.ratio(lnet, aio):.2f} (target 0.65) "
                  f"cpu_us_per_MiB c1={lb.fmt(res[f'cpu_c1_{op}'])} "
                  f"s1={lb.fmt(res[f'cpu_s1_{op}'])}", flush=True)
        if args.profile:
            profile(load if args.load == "burst" else None, c1, s1, args.count,
                    Path(args.profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
