"""Multi-Rail bandwidth: 1, 2 and 4 rails, each capped by tbf, against one rail.

For each rail count, brings up c1 and s1 with that many rails (one ``tcp`` net, static
Multi-Rail peers), caps every rail of c1 with a tbf qdisc (``--bw``, default 200mbit, egress:
the PUT direction), and measures ``--runs`` times: c1 PUTs 1 MiB messages to s1 (64 in
flight) for about ``--seconds`` s, MB/s of payload. The reference is iperf3 over one capped
rail in the same testbed (what one rail carries). Targets (issue 13): 2 rails >= 1.9x and
4 rails >= 3.8x one rail. Run as root:

    .venv/bin/python benchmarks/multirail.py [--runs 3] [--bw 200mbit] [--seconds 4]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lnd_bench as lb

SIZE = lb.MIB


def bits(rate: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if m is None:
        raise SystemExit(f"multirail.py: --bw {rate!r}: expected e.g. 200mbit")
    return float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]]


def measure(rails: int, args: Any) -> tuple[list[float], list[float]]:
    """(LNet MB/s per run, iperf3 MB/s over one rail per run) with ``rails`` capped rails."""
    load: lb.Load = lb.burst_load
    with lb.testbed(rails, f"mr{rails}r") as tb:
        c1, s1 = tb.node("c1"), tb.node("s1")
        for i in range(rails):
            tb.fault.bandwidth(node="c1", iface=f"eth{i}", bw=args.bw, direction="out")
        c1.put(lb.server_nid(0), count=8 * rails, size=SIZE)  # discovery, every rail up
        count = max(16, int(rails * bits(args.bw) / 8 * args.seconds / SIZE))
        lnet, ref = [], []
        for _ in range(args.runs):
            lnet.append(count * SIZE / load(c1, lb.server_nid(0), "write", SIZE, count) / 1e6)
            ref.append(lb.iperf3(c1, s1, lb.server_ip(0), seconds=args.seconds))
        return lnet, ref


def main() -> int:
    p = lb.parser(__doc__)
    p.add_argument("--bw", default="200mbit", help="tbf rate per rail")
    p.add_argument("--seconds", type=int, default=4, help="seconds per measurement")
    args = p.parse_args()
    results = {rails: measure(rails, args) for rails in (1, 2, 4)}
    one = results[1][0]
    for rails, (lnet, ref) in results.items():
        target = {1: "", 2: " (target 1.9)", 4: " (target 3.8)"}[rails]
        print(f"rails={rails}: lnet_MBps={lb.fmt(lnet, nd=1)} iperf3_1rail_MBps="
              f"{lb.fmt(ref, nd=1)} per_rail_of_iperf3={lb.ratio(lnet, ref) / rails:.2f} "
              f"x_one_rail={lb.ratio(lnet, one):.2f}{target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
