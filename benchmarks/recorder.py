"""Benchmark of the recorder (issue 16 item 1): the cost of one sample, as a share of a core.

Run: ``.venv/bin/python benchmarks/recorder.py [--peers 64] [--samples 2000]`` (no root, a
few seconds). It configures one engine as a busy client of a mid-size cluster: two local NIs
on ``tcp``, ``--peers`` Multi-Rail peers with two NIs each, 4 routes to a remote net through 4
gateways, and measures in the same run:

1. ``idle``: ``Recorder.sample`` when nothing moved (a scan, no row written);
2. ``busy``: every NI's and peer NI's counters and credits move between samples (every object
   writes a row), with the gzip flushes amortised (one member per second of samples);
3. ``hook``: one ``Recorder.tx`` + ``Recorder.rx`` call (the per-message byte count);
4. reference: one PUT + ACK through two engines on the in-memory fabric (the engine work
   per message on this machine), to express the sample in messages.

At the default period (0.1 s) a node takes 10 samples a second, so ``cpu_share`` = 10 x busy
sample time; the target is "well under 5 %" of a busy daemon's core.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from nodes.lnet.engine import LNetEngine  # noqa: E402
from nodes.lnet.hdr import MsgType  # noqa: E402
from nodes.lnet.nid import NID, Net  # noqa: E402
from nodes.recorder import DEFAULT_PERIOD, Recorder  # noqa: E402
from testbed.sim.fabric import Fabric  # noqa: E402

TCP = Net.parse("tcp")


def busy_engine(peers: int) -> LNetEngine:
    eng = LNetEngine(incarnation=1)
    eng.configure()
    eng.net_add(TCP, "eth0", NID.parse("10.10.0.1@tcp"))
    eng.net_add(TCP, "eth1", NID.parse("10.11.0.1@tcp"))
    for i in range(peers):
        a, b = divmod(i + 10, 250)
        eng.peer_add(NID.parse(f"10.10.{a}.{b}@tcp"),
                     [NID.parse(f"10.10.{a}.{b}@tcp"), NID.parse(f"10.11.{a}.{b}@tcp")])
    for g in range(4):
        eng.router.add(Net.parse("o2ib1"), NID.parse(f"10.10.200.{g + 1}@tcp"), 1, 0, 0.0)
    return eng


def churn(eng: LNetEngine, k: int) -> None:
    """Move every NI's and peer NI's counters and credits (a busy node between samples)."""
    for ni in eng.local_nis():
        ni.stats.sent.bump(MsgType.PUT)
        ni.tx_credits = 200 + k % 50
    for peer in eng.peers.peers:
        for pnet in peer.nets:
            for lpni in pnet.lpnis:
                lpni.stats.sent.bump(MsgType.PUT)
                lpni.tx_credits = 8 - k % 8


def per_message_reference(n: int = 2000) -> float:
    """Seconds of engine work per PUT+ACK on the in-memory fabric."""
    fab = Fabric()
    c, s = NID.parse("10.10.0.1@tcp"), NID.parse("10.10.0.2@tcp")
    for name, nid, inc in (("c", c, 1), ("s", s, 2)):
        eng = LNetEngine(incarnation=inc)
        eng.configure()
        eng.net_add(TCP, "eth0", nid)
        eng.set_tunable("discovery", 0)
        fab.add(name, eng)
    fab.engines["s"].attach_me(52, 0, 0xFFFF_FFFF_FFFF_FFFF, sink=True)
    t0 = time.perf_counter()
    for _ in range(n):
        fab.call("c", fab.engines["c"].put, fab.now, s, payload=b"x" * 64, portal=52)
        fab.run_until(fab.now + 0.01)
    return (time.perf_counter() - t0) / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peers", type=int, default=64)
    ap.add_argument("--samples", type=int, default=2000)
    args = ap.parse_args(argv)
    eng = busy_engine(args.peers)
    objects = 2 + 2 * args.peers + 4 + 4 + 1
    with tempfile.TemporaryDirectory(prefix="lnet-rec-bench-") as tmp:
        rec = Recorder(eng, Path(tmp) / "c1.rec", node="c1")
        rec.sample(0.0)
        t0 = time.perf_counter()
        for k in range(args.samples):
            rec.sample(0.1 * (k + 1))
        idle = (time.perf_counter() - t0) / args.samples
        base = 0.1 * (args.samples + 1)
        t0 = time.perf_counter()
        for k in range(args.samples):
            churn(eng, k)
            rec.sample(base + 0.1 * k)
        busy_total = (time.perf_counter() - t0) / args.samples
        t0 = time.perf_counter()
        for k in range(args.samples):
            churn(eng, k)
        busy = busy_total - (time.perf_counter() - t0) / args.samples
        rec.close()
        size = (Path(tmp) / "c1.rec").stat().st_size
        ni, lpni = NID.parse("10.10.0.1@tcp"), NID.parse("10.10.0.10@tcp")
        n = 200_000
        t0 = time.perf_counter()
        for _ in range(n):
            rec.tx(ni, lpni, 4096)
            rec.rx(ni, lpni, 64)
        hook = (time.perf_counter() - t0) / n
    ref = per_message_reference()
    per_s = 1 / DEFAULT_PERIOD
    print(f"engine peers={args.peers} objects={objects} samples={args.samples}")
    print(f"idle sample_us={idle * 1e6:.1f} cpu_share_pct={idle * per_s * 100:.3f}")
    print(f"busy sample_us={busy * 1e6:.1f} cpu_share_pct={busy * per_s * 100:.3f} "
          f"rows_per_sample={objects} file_bytes_per_row={size / (objects * args.samples):.2f}")
    print(f"hook tx_plus_rx_us={hook * 1e6:.2f}")
    print(f"reference put_ack_us={ref * 1e6:.1f} busy_sample_in_messages={busy / ref:.2f} "
          f"hook_share_of_message_pct={hook / ref * 100:.2f}")
    print(f"target cpu_share_pct<5 met={busy * per_s * 100 < 5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
