"""o2iblnd against socklnd on the same kind of link in the same run (issue 28).

Brings up two Mininet testbeds side by side, each c1 and s1 on one rail built the same way
(one Linux bridge, one veth per node): one on a ``tcp`` net (``eth0``, socklnd, port 988),
one on an ``o2ib`` net (``ib0``, the emulated o2iblnd over sockets between the ``ib*``
addresses, port 987; docs/o2ib.md), and measures, ``--runs`` times each, alternating them:

* 1 MiB PUT: c1 PUTs ``--count`` x 1 MiB to s1's NID on that net (64 in flight), MB/s;
* brw: ``lst brw write size=1M`` at concurrency 64 for ``--loop`` iterations of each
  (64 x ``--loop`` MiB; the server GETs the bulk: GET_REQ, RDMA WRITE, GET_DONE), the bytes
  the server received (``lnetctl stats``) over the batch's wall time, MB/s (a finite batch:
  a stopped one leaves the server's bulk GETs in flight, which o2iblnd answers at once with
  GET_DONE -ENODATA, as the kernel does, so ``lst`` counts them as errors);
* 8 B message rate: c1 PUTs ``--small`` messages of 8 bytes (64 in flight), messages/s.

Each figure also prints the CPU both daemons spent per MiB (brw: per MiB the server received) or per
message, and socklnd's over o2iblnd's: on a shared, loaded box the rates follow the CPU each
message costs more than anything else, and the CPU figure moves less with the load.

``--what put,rate`` measures only those figures; ``--peer-credits N`` gives both nets that
``peer_credits`` (the LNet peer credits and, on o2ib, the queue depth; default 8);
``--profile DIR`` records both daemons of each testbed with py-spy during one extra 1 MiB PUT
run and one extra 8 B run (raw stacks and summaries in DIR, o2iblnd's frames counted as
``o2ib``).

Targets (issue 28): each o2ib median >= 0.9 of socklnd's. (Two nets on one pair of nodes
would share the daemons; and lst's stop then counts the server's in-flight RPCs as
dropped.) Run as root:

    .venv/bin/python benchmarks/o2ib.py [--runs 3] [--count 300] [--loop 5] [--small 5000]
        [--what put,brw,rate] [--profile DIR]
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lnd_bench as lb

lb.AREAS = (("o2ib", "nodes/o2ib/"), *lb.AREAS)  # the profile summaries' o2iblnd share

NIDS = {"socklnd": "10.62.0.2@tcp", "o2iblnd": "10.63.0.2@o2ib"}


def topology(name: str, net: str, subnet: str, peer_credits: int = 0) -> str:
    tun = f", tunables: {{peer_credits: {peer_credits}}}" if peer_credits else ""
    return (f"name: {name}\nglobal: {{transaction_timeout: 50, retry_count: 2}}\n"
            f"networks:\n  rail: {{lnet: {net}, subnet: {subnet}{tun}}}\n"
            "nodes:\n  c1: {interfaces: [rail], peers: [s1]}\n"
            "  s1: {interfaces: [rail], peers: [c1]}\n")


class Brw:
    """One lst session from ``c1`` for the whole benchmark: ``lst brw write size=1M`` at
    concurrency 64, ``loops`` iterations of each of the 64 per batch run (64 x ``loops`` MiB),
    groups and batch made once (each ``lst`` is a process in the node: made per run, they
    cost more than a short transfer)."""

    def __init__(self, c1: Any, nid: str, loops: int) -> None:
        self.c1, self.nid = c1, nid
        self.moved = 0  # bytes the server received in the last run
        self.key = f"{os.getpid()}{nid.partition('@')[2]}"
        self.lst("new_session", "--timeout", "600", "o2bench")
        self.lst("add_group", "clients", c1.nids[0])
        self.lst("add_group", "servers", nid)
        self.lst("add_batch", "b")
        self.lst("add_test", "--batch", "b", "--loop", str(loops), "--concurrency", "64",
                 "--from", "clients", "--to", "servers", "brw", "write", "size=1M")

    def lst(self, *argv: str) -> str:
        res = self.c1.exec(["env", f"LST_SESSION={self.key}", "lst", *argv], timeout=600)
        if res.rc != 0 or res.err:
            raise RuntimeError(f"lst {' '.join(argv)}: rc {res.rc}: {res.out}{res.err}")
        return str(res.out)

    def mbps(self, s1: Any) -> float:
        """One run of the batch: the bytes the server received (``lnetctl stats``) over the
        batch's wall time, MB/s; any lst error fails the benchmark."""
        before = s1.yaml("stats show")["statistics"]["recv_length"]
        t0 = time.perf_counter()
        self.lst("run", "b")
        while self.lst("query", "b") != "b [0] is stopped\n":
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        moved = s1.yaml("stats show")["statistics"]["recv_length"] - before
        self.moved = moved
        errors = self.lst("show_error", "clients", "servers")
        if errors.count("Total 0 error nodes") != 2:
            raise RuntimeError(f"lst brw over {self.nid}: errors: {errors}")
        return float(moved) / wall / 1e6

    def end(self) -> None:
        self.lst("end_session")


def main() -> int:
    p = lb.parser(__doc__)
    p.add_argument("--count", type=int, default=300, help="1 MiB PUTs per run")
    p.add_argument("--small", type=int, default=5000, help="8-byte PUTs per run")
    p.add_argument("--loop", type=int, default=5,
                   help="lst brw iterations per run (each of the 64 concurrent: x 64 MiB)")
    p.add_argument("--what", default="put,brw,rate", help="figures to measure (put,brw,rate)")
    p.add_argument("--peer-credits", type=int, default=0,
                   help="both nets' peer_credits (0: the default, 8)")
    args = p.parse_args()
    import testbed as tbapi

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (a timeout: testbeds down)

    tbs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for lnd, net, subnet in (("socklnd", "tcp", "10.62.0.0/24"),
                                 ("o2iblnd", "o2ib", "10.63.0.0/24")):
            name = f"o2iblnd{uuid.uuid4().hex[:5]}"
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(topology(name, net, subnet, args.peer_credits))
            tbs[lnd] = tbapi.up(path, name=name)
    try:
        what = set(args.what.split(","))
        res: dict[str, dict[str, list[float]]] = {k: {"put": [], "brw": [], "rate": []}
                                                  for k in NIDS}
        #: CPU seconds of c1 + s1 per MiB (put, brw) or per message (rate): less load-bound
        cpu: dict[str, dict[str, list[float]]] = {k: {"put": [], "brw": [], "rate": []}
                                                  for k in NIDS}
        brw: dict[str, Brw] = {}
        for lnd, nid in NIDS.items():  # warm up: connections made, buffers allocated
            tbs[lnd].node("c1").put(nid, count=64, size=lb.MIB)
            if "brw" in what:
                brw[lnd] = Brw(tbs[lnd].node("c1"), nid, args.loop)
        for _ in range(args.runs):
            for lnd, nid in NIDS.items():
                c1, s1 = tbs[lnd].node("c1"), tbs[lnd].node("s1")
                if "put" in what:
                    secs, used = lb.with_cpu((c1, s1), lambda c1=c1, nid=nid: lb.burst_load(
                        c1, nid, "write", lb.MIB, args.count))
                    res[lnd]["put"].append(args.count * lb.MIB / secs / 1e6)
                    cpu[lnd]["put"].append(sum(used) / args.count)
                if "brw" in what:
                    mbps, used = lb.with_cpu((c1, s1), lambda s1=s1, b=brw[lnd]: b.mbps(s1))
                    res[lnd]["brw"].append(mbps)
                    cpu[lnd]["brw"].append(sum(used) / (brw[lnd].moved / lb.MIB))
                if "rate" in what:
                    secs, used = lb.with_cpu((c1, s1), lambda c1=c1, nid=nid: lb.burst_load(
                        c1, nid, "write", 8, args.small))
                    res[lnd]["rate"].append(args.small / secs)
                    cpu[lnd]["rate"].append(sum(used) / args.small)
        if args.profile:  # runs of ~5 s at the measured median rate, 3 s recorded
            for lnd, nid in NIDS.items():
                c1, s1 = tbs[lnd].node("c1"), tbs[lnd].node("s1")
                n = int(5 * statistics.median(res[lnd]["put"] or [200.0]) * 1e6 / lb.MIB)
                lb.profiled((c1, s1), Path(args.profile), f"{lnd}-put1m", lambda c1=c1, nid=nid,
                            n=n: lb.burst_load(c1, nid, "write", lb.MIB, n), 3, 1.0)
                n = int(5 * statistics.median(res[lnd]["rate"] or [2000.0]))
                lb.profiled((c1, s1), Path(args.profile), f"{lnd}-put8", lambda c1=c1, nid=nid,
                            n=n: lb.burst_load(c1, nid, "write", 8, n), 3, 1.0)
        for fig, unit in (("put", " MB/s"), ("brw", " MB/s"), ("rate", " msg/s")):
            if fig not in what:
                continue
            o2, so = res["o2iblnd"][fig], res["socklnd"][fig]
            print(f"{fig:5s} socklnd {lb.fmt(so, unit)}  o2iblnd {lb.fmt(o2, unit)}  "
                  f"ratio {lb.ratio(o2, so):.2f} (target >= 0.90)")
            c_o2, c_so = cpu["o2iblnd"][fig], cpu["socklnd"][fig]
            per = "MiB" if fig != "rate" else "msg"
            print(f"      CPU us/{per} (c1 + s1) socklnd {lb.fmt([c * 1e6 for c in c_so])}  "
                  f"o2iblnd {lb.fmt([c * 1e6 for c in c_o2])}  "
                  f"ratio {lb.ratio(c_so, c_o2):.2f}")
    finally:
        for tb in tbs.values():
            tb.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
