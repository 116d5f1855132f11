"""Benchmark of the fault interposer (issue 5): accuracy and cost, printed as figures.

Run as root: ``.venv/bin/python benchmarks/faults.py [--packets 10000]``. It brings up the
default two-node topology under a unique name, measures, and takes it down again:

1. loss: ICMP echo requests through a ``loss rate=R`` rule; measured loss vs configured
   (goal: within 2 points);
2. delay: ICMP round trips through a ``delay D`` rule (no jitter); median and p99 vs D
   (goal: median within 1 ms; the base RTT is printed and subtracted);
3. throughput of a TCP bulk transfer c1 -> s1 with no fault, with an interposer whose rule
   queues every TCP packet but matches none (the prefilter's cost), and with one active rule
   matching every packet (accept verdicts): MB/s and interposer packets/s (STYLE rule 7,
   target P6 >= 20 k pkt/s).

The ``--sink``/``--source`` modes are the two ends of the TCP transfer, run in the nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from faults import netops  # noqa: E402
from testbed.clean import leftovers  # noqa: E402
from testbed.mininet import MininetTestbed  # noqa: E402

PORT = 5001


def sink(port: int) -> int:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    conn, _ = srv.accept()
    total = 0
    while chunk := conn.recv(1 << 20):
        total += len(chunk)
    print(total)
    return 0


def source(dst: str, port: int, nbytes: int) -> int:
    s = socket.create_connection((dst, port), timeout=30)
    buf = bytes(1 << 16)
    t0 = time.monotonic()
    sent = 0
    while sent < nbytes:
        s.sendall(buf)
        sent += len(buf)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    print(json.dumps({"bytes": sent, "seconds": time.monotonic() - t0}))
    return 0


def icmp(tb: MininetTestbed, dst: str, count: int, interval: float, wait: float = 2.0
         ) -> dict[str, object]:
    res = tb.node("c1").exec([sys.executable, "-m", "faults.icmpping", dst, "-c", str(count),
                              "-i", str(interval), "-W", str(wait)], timeout=600)
    if res.rc != 0:
        raise SystemExit(f"icmpping failed: {res.err.strip()}")
    return json.loads(res.out)


def transfer(tb: MininetTestbed, nbytes: int) -> float:
    """Seconds to move ``nbytes`` c1 -> s1 over TCP (10.10.0.0/24)."""
    import subprocess

    from testbed import sh

    s1 = tb.node("s1")
    argv = sh.ns_argv([sys.executable, __file__, "--sink", str(PORT)], s1.host_pid)
    srv = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        res = tb.node("c1").exec([sys.executable, __file__, "--source", "10.10.0.2",
                                  str(PORT), str(nbytes)], timeout=600)
        if res.rc != 0:
            raise SystemExit(f"source failed: {res.err.strip()}")
        return float(json.loads(res.out)["seconds"])
    finally:
        srv.wait(timeout=30)


def counters(tb: MininetTestbed, fid: str) -> dict[str, int]:
    f = next(x for x in tb.fault.list() if x["id"] == fid)
    return dict(f["counters"])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--packets", type=int, default=10000)
    p.add_argument("--loss", type=float, default=0.10)
    p.add_argument("--delay", type=float, default=20.0, help="ms")
    p.add_argument("--mbytes", type=int, default=200)
    p.add_argument("--sink", type=int)
    p.add_argument("--source", nargs=3)
    a = p.parse_args()
    if a.sink:
        return sink(a.sink)
    if a.source:
        return source(a.source[0], int(a.source[1]), int(a.source[2]))
    tb = MininetTestbed.up(None, name=f"bench-faults-{os.getpid()}")
    try:
        run(tb, a)
    finally:
        tb.down()
        left = leftovers(tb.name)
        print(f"leftovers after down: {left or 'none'}")
    return 0


def run(tb: MininetTestbed, a: argparse.Namespace) -> None:
    n = a.packets
    # 1. loss
    f = tb.fault.loss(node="c1", rate=a.loss, seed=1, match={"proto": "icmp"})
    res = icmp(tb, "10.10.0.2", n, 0.0002)
    got = len(res["lost"]) / n  # type: ignore[arg-type]
    c = tb.fault.delete(f["id"])["counters"]
    print(f"loss: configured {a.loss:.3f}, measured {got:.4f} over {n} requests "
          f"({abs(got - a.loss) * 100:.2f} points off; interposer dropped {c['dropped']} of "
          f"{c['matched']})")
    # 2. delay
    base = statistics.median(icmp(tb, "10.10.0.2", 500, 0.0005)["rtt_ms"].values())  # type: ignore[union-attr]
    f = tb.fault.delay(node="c1", delay=a.delay, seed=1, match={"proto": "icmp"})
    res = icmp(tb, "10.10.0.2", n, 0.0005)
    rtts = sorted(res["rtt_ms"].values())  # type: ignore[union-attr]
    tb.fault.delete(f["id"])
    med = statistics.median(rtts) - base
    p99 = rtts[int(len(rtts) * 0.99) - 1] - base
    print(f"delay: configured {a.delay:.1f} ms, median {med:.2f} ms, p99 {p99:.2f} ms over "
          f"{len(rtts)} round trips (base RTT {base:.3f} ms subtracted; "
          f"median off by {abs(med - a.delay):.2f} ms)")
    # 3. throughput
    nbytes = a.mbytes << 20
    t_none = transfer(tb, nbytes)
    f = tb.fault.loss(node="c1", rate=0.0, match={"proto": "tcp", "peer": "192.0.2.1"})
    t_miss = transfer(tb, nbytes)
    c_miss = counters(tb, f["id"])
    tb.fault.delete(f["id"])
    f = tb.fault.loss(node="c1", rate=0.0, match={"proto": "tcp"})
    t_hit = transfer(tb, nbytes)
    c_hit = counters(tb, f["id"])
    tb.fault.delete(f["id"])
    mb = nbytes / 1e6
    print(f"throughput c1->s1 TCP, {mb:.0f} MB: no fault {mb / t_none:.0f} MB/s; "
          f"interposer, no matching rule {mb / t_miss:.0f} MB/s "
          f"({c_miss.get('seen', 0) / t_miss:.0f} pkt/s through the prefilter, "
          f"{(1 - t_none / t_miss) * 100:.0f}% cost); one active rule {mb / t_hit:.0f} MB/s "
          f"({c_hit.get('matched', 0) / t_hit:.0f} pkt/s matched)")
    residue = tb.fault.residue()
    print(f"residue after deleting every fault: {residue or 'none'}")
    assert netops.TAG  # the tag the residue check looks for


if __name__ == "__main__":
    sys.exit(main())
