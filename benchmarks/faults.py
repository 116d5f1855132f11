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
   target P6 >= 20 k pkt/s);
4. every message (issue 32 item 2): 2,000 PUTs of 4 KiB from c1 through a ``match.type=PUT``
   rule (loss at rate 0: each matched segment decided, then accepted): PUTs classified and
   matched of those sent, segments matched of c1's LNet data segments, the tracker's memory per
   flow; then the cost of following streams: LNet bulk (1 MiB PUTs) through a rule that needs
   no LNet key (no tracking) vs one with ``type: PUT`` (every segment tracked), in MB/s.
   ``--lnet-only`` runs this part alone.

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
    p.add_argument("--lnet-only", action="store_true", help="only part 4 (every message)")
    p.add_argument("--puts", type=int, default=2000)
    p.add_argument("--cpu-only", action="store_true", help="only the in-process CPU cost")
    a = p.parse_args()
    if a.sink:
        return sink(a.sink)
    if a.source:
        return source(a.source[0], int(a.source[1]), int(a.source[2]))
    if a.cpu_only:
        cpu_cost()
        return 0
    tb = MininetTestbed.up(None, name=f"bench-faults-{os.getpid()}")
    try:
        if not a.lnet_only:
            run(tb, a)
        run_lnet(tb, a)
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


def bulk(tb: MininetTestbed, count: int, size: int) -> float:
    """MB/s of ``count`` PUTs of ``size`` bytes c1 -> s1 (one burst, all completed)."""
    t0 = time.monotonic()
    reply = tb.node("c1").put("10.10.0.2@tcp", count=count, size=size, timeout=300)
    took = time.monotonic() - t0
    if reply.get("completed") != count:
        raise SystemExit(f"bulk PUTs did not complete: {reply}")
    return count * size / 1e6 / took


def run_lnet(tb: MininetTestbed, a: argparse.Namespace) -> None:
    c1 = tb.node("c1")
    if c1.lnetctl("ping", "10.10.0.2@tcp").rc != 0:
        raise SystemExit("c1 cannot LNet-ping s1")
    n = a.puts
    # portal 52: the daemon's PUT bursts (lnet_selftest's bulk portal); a discovery push is
    # a PUT too, on another portal
    f = tb.fault.loss(node="c1", rate=0.0, seed=1, match={"type": "PUT", "portal": 52})
    reply = c1.put("10.10.0.2@tcp", count=n, size=4096, timeout=300)
    c = counters(tb, f["id"])
    tb.fault.delete(f["id"])
    flows = max(1, c.get("flows", 0))
    print(f"every message: {n} PUTs of 4 KiB, {reply.get('completed')} completed; "
          f"classified and matched {c.get('messages_matched', 0)} of {n} "
          f"({c.get('messages_matched', 0) / n * 100:.1f}%); segments matched "
          f"{c.get('matched', 0)} of {c.get('lnet_segments', 0)} LNet data segments "
          f"({c.get('seen', 0)} queued); resyncs {c.get('resyncs', 0)}, gaps "
          f"{c.get('gaps', 0)}; tracker memory {c.get('flow_bytes', 0) / flows:.0f} B per "
          f"flow over {c.get('flows', 0)} flows")
    size, count = 1 << 20, 200
    bulk(tb, 20, size)  # warm the bulk connections
    rates: dict[str, list[float]] = {"no tracking": [], "tracking": []}
    seen = {"no tracking": 0, "tracking": 0}
    for _ in range(5):  # interleaved: the box's load drifts
        for label, match in (("no tracking", {"proto": "lnet"}),
                             ("tracking", {"type": "PUT", "portal": 52})):
            f = tb.fault.loss(node="c1", rate=0.0, match=match)
            rates[label].append(bulk(tb, count, size))
            seen[label] += tb.fault.delete(f["id"])["counters"].get("seen", 0)
    none = bulk(tb, count, size)
    off, on = (statistics.median(rates[k]) for k in ("no tracking", "tracking"))
    print(f"LNet bulk c1->s1, {count} PUTs of 1 MiB (median of 5, interleaved): no fault "
          f"{none:.0f} MB/s; interposer without LNet keys {off:.0f} MB/s; following streams "
          f"(type=PUT) {on:.0f} MB/s: extra cost {(1 - on / off) * 100:.1f}%")
    extra_us = cpu_cost()
    # the same cost as a share of the interposer's time per packet at the measured rate
    pkt_s = seen["tracking"] / 5 / (count * size / 1e6 / on)
    print(f"following streams at {pkt_s:.0f} queued pkt/s: {extra_us * pkt_s / 1e4:.2f}% of "
          f"one core, i.e. of the interposer's time per packet "
          f"({1e6 / pkt_s:.0f} us at that rate)")


def cpu_cost(puts: int = 20) -> float:
    """Interposer CPU per queued segment, in process (no kernel queue, no box noise): the
    same socklnd stream (1 MiB PUTs, GSO-sized 1448-byte segments) through ``on_packet`` of a
    rule without LNet keys and of a ``type: PUT`` rule."""
    from faults.interposer import Interposer
    from faults.interposer_spec import InterposerSpec
    from faults.spec import parse_match, parse_params
    from nodes.lnd import wire
    from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
    from nodes.lnet.nid import NID

    a, b = NID.parse("10.10.0.1@tcp"), NID.parse("10.10.0.2@tcp")
    hdr = LNetHdr(dest_nid=b, src_nid=a, dest_pid=12345, src_pid=12345, type=MsgType.PUT,
                  payload_length=1 << 20, wmd=WireHandle(1, 2), match_bits=1, ptl_index=52)
    stream = wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=hdr, payload=bytes(1 << 20)))
    stream *= puts  # one connection carrying ``puts`` PUTs back to back
    segs = []
    ip_tcp = bytes.fromhex("4500000000000000400600000a0a0a010a0a0a02")
    for at in range(0, len(stream), 1448):
        tcp = (1023).to_bytes(2, "big") + (988).to_bytes(2, "big") \
            + (at % (1 << 32)).to_bytes(4, "big") + bytes(4) + b"\x50\x10" + bytes(6)
        segs.append(ip_tcp[:20] + tcp + stream[at:at + 1448])

    class Q:
        def __init__(self, d: bytes) -> None:
            self.d = d

        def get_payload(self) -> bytes:
            return self.d

        def accept(self) -> None:
            pass

    per: dict[str, float] = {}
    for label, match in (("no LNet keys", {"proto": "lnet"}), ("type=PUT", {"type": "PUT"})):
        ip = Interposer(InterposerSpec(kind="loss", params=parse_params("loss", {"rate": 0.0}),
                                       seed=1, match=parse_match(match), queue=1,
                                       counters="/nonexistent"))
        n = 0
        t0 = time.process_time()
        for seg in segs:  # (each segment once: a replay would be a retransmission)
            ip.on_packet(Q(seg))
            n += 1
        per[label] = (time.process_time() - t0) / n * 1e6
    print(f"interposer CPU per 1448-byte segment of 1 MiB PUTs: no LNet keys "
          f"{per['no LNet keys']:.1f} us, following streams {per['type=PUT']:.1f} us "
          f"(+{per['type=PUT'] - per['no LNet keys']:.1f} us)")
    return per['type=PUT'] - per['no LNet keys']


if __name__ == "__main__":
    sys.exit(main())
