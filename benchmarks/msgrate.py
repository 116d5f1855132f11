"""Small LNet PUTs (8 B) with 64 in flight against a bare asyncio request/response.

Brings up c1 and s1 on one rail and measures, in the same run over the same link, ``--runs``
times each: c1 PUTs ``--count`` messages of 8 bytes to s1 (64 in flight; each is a 104-byte
PUT frame and a 96-byte ACK) — messages/s; and the bare asyncio request/response program
(``lnd_bench.asyncio_ref``) with the same bytes each way and the same concurrency.

Targets (issue 13): floor >= 25 % of the asyncio reference, stretch >= 50 %. The load is the
daemon's PUT burst (``lnd_bench.burst_load``); then, against the same reference, an
``lst add_test --concurrency 64 ... ping`` batch: the pings per second ``lst stat --rate``
prints for the server group (``lnd_bench.lst_ping_rate``) over ``--seconds``. Each daemon's
share of the burst's wall time on a CPU (``busy``) and runnable but waiting for one
(``runq_wait``, /proc/PID/schedstat) tell a pipelining stall (both low: the daemons wait for
each other) from a box too busy to measure on (``runq_wait`` high).
``--profile DIR`` runs py-spy on both daemons during one extra LNet run and one extra ping
batch. Run as root:

    .venv/bin/python benchmarks/msgrate.py [--runs 3] [--count 20000] [--profile DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lnd_bench as lb

SIZE = 8


def main() -> int:
    p = lb.parser(__doc__)
    p.add_argument("--count", type=int, default=20000, help="PUTs per LNet run")
    p.add_argument("--seconds", type=float, default=3.0, help="lst stat window per run")
    args = p.parse_args()
    load: lb.Load = lb.burst_load
    with lb.testbed(1, "mrate") as tb:
        c1, s1 = tb.node("c1"), tb.node("s1")
        c1.put(lb.server_nid(0), count=64, size=SIZE)  # discovery, connections up
        lnet, ref, cpu_c1, cpu_s1, ping, ping_c1, ping_s1 = [], [], [], [], [], [], []
        busy: list[list[float]] = [[], []]  # CPU seconds per second of the burst
        wait: list[list[float]] = [[], []]  # seconds waiting for a CPU, per second
        for _ in range(args.runs):
            secs, cpu, waited = lb.with_sched((c1, s1), lambda: load(
                c1, lb.server_nid(0), "write", SIZE, args.count))
            lnet.append(args.count / secs)
            cpu_c1.append(cpu[0] / args.count * 1e6)
            cpu_s1.append(cpu[1] / args.count * 1e6)
            for i in range(2):
                busy[i].append(cpu[i] / secs)
                wait[i].append(waited[i] / secs)
            secs = lb.asyncio_ref(c1, s1, lb.server_ip(0), count=args.count,
                                  req_bytes=lb.FRAME_OVERHEAD + SIZE,
                                  resp_bytes=lb.FRAME_OVERHEAD)
            ref.append(args.count / secs)
            rate, cpu = lb.lst_ping_rate(c1, s1, lb.server_nid(0), seconds=args.seconds)
            ping.append(rate)
            ping_c1.append(cpu[0])
            ping_s1.append(cpu[1])
        print(f"put_8B: lnet_msgs_per_s={lb.fmt(lnet)} asyncio_msgs_per_s={lb.fmt(ref)} "
              f"of_asyncio={lb.ratio(lnet, ref):.2f} (floor 0.25, stretch 0.50) "
              f"cpu_us_per_msg c1={lb.fmt(cpu_c1)} s1={lb.fmt(cpu_s1)}", flush=True)
        print(f"put_8B_daemons: busy c1={lb.fmt(busy[0], nd=2)} s1={lb.fmt(busy[1], nd=2)} "
              f"runq_wait c1={lb.fmt(wait[0], nd=2)} s1={lb.fmt(wait[1], nd=2)} "
              f"(shares of the burst's wall time: on a CPU, runnable and waiting for one)",
              flush=True)
        print(f"lst_ping: lnet_pings_per_s={lb.fmt(ping)} asyncio_msgs_per_s={lb.fmt(ref)} "
              f"of_asyncio={lb.ratio(ping, ref):.2f} (floor 0.25, stretch 0.50) "
              f"cpu_us_per_ping c1={lb.fmt(ping_c1)} s1={lb.fmt(ping_s1)}", flush=True)
        if args.profile:
            n = max(args.count, int(4 * max(lnet)))
            lb.profiled((c1, s1), Path(args.profile), "put8",
                        lambda: load(c1, lb.server_nid(0), "write", SIZE, n))
            lb.profiled((c1, s1), Path(args.profile), "ping",
                        lambda: lb.lst_ping_rate(c1, s1, lb.server_nid(0), seconds=4.0),
                        after=2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
