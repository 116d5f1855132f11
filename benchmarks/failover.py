"""Rail failover time on Mininet: cut one of c1's two rails under load, time the switch.

Brings up the default topology (c1, s1, two rails; retry_count 2, transaction_timeout 10,
sensitivity 100) under a unique name, keeps c1 sending PUTs to s1 in bursts, samples the
per-NI ``send_count`` of c1 every ``--sample`` s, cuts eth1 and reports:

* ``switch_s``: from the cut to the last sample in which eth1's send_count still grew, i.e.
  the moment all of c1's traffic runs on eth0 (resolution: the sample period);
* ``detect_s``: from the cut to eth1's NI showing ``status: down`` (link: fatal state set by
  the link watcher; blackhole: health down to 0);
* ``longest_stall_s``: the longest time after the cut in which c1 sent nothing on either
  rail (PUTs stuck waiting for ACKs that the dead rail swallowed hold the 64 in-flight slots
  until their response timeout);
* ULP failures (PUTs whose final event was not a good ACK) during the run, and how many of
  them were response timeouts.

Two cuts: ``link`` (``testbed link c1 eth1 down``: carrier loss, the daemon's link watcher)
and ``blackhole`` (iptables DROP on eth1 in c1's namespace, carrier up: detection by socklnd
and LNet timeouts; lnd timeout set to ``--lnd-timeout``). Run as root:

    .venv/bin/python benchmarks/failover.py [--mode link|blackhole|both]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.mininet import MininetNode, MininetTestbed

C1_ETH0, C1_ETH1, S1_ETH0 = "10.10.0.1@tcp", "10.11.0.1@tcp", "10.10.0.2@tcp"


def ni_view(c1: MininetNode) -> dict[str, dict[str, Any]]:
    view = c1.lnetctl_yaml("net", "show", "-v", "3")
    return {ni["nid"]: ni for net in view["net"] if net["net type"] == "tcp"
            for ni in net["local NI(s)"]}


def blackhole(c1: MininetNode, on: bool) -> None:
    for chain, opt in (("OUTPUT", "-o"), ("INPUT", "-i")):
        c1.exec(["iptables", "-w", "-I" if on else "-D", chain, opt, "eth1", "-j", "DROP"])


def run_one(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    name = f"bf{uuid.uuid4().hex[:6]}"
    tb = MininetTestbed.up(None, name=name)
    try:
        c1 = tb.node("c1")
        if mode == "blackhole":
            c1.lnetctl("net", "set", "--net", "tcp", "--lnd-timeout", str(args.lnd_timeout))
        c1.put(S1_ETH0, count=200, size=args.size)  # connections up on both rails
        stop = threading.Event()
        totals = {"sent": 0, "failed": 0, "timeouts": 0}
        errors: dict[str, int] = {}

        def load() -> None:
            while not stop.is_set():
                r = c1.put(S1_ETH0, count=args.burst, size=args.size, timeout=300)
                totals["sent"] += r.get("sent", 0)
                totals["failed"] += r.get("failed", 0)
                totals["timeouts"] += r.get("errors", {}).get("UNLINK:-110", 0)
                for kind, n in r.get("errors", {}).items():
                    errors[kind] = errors.get(kind, 0) + n

        worker = threading.Thread(target=load, daemon=True)
        worker.start()
        time.sleep(args.warmup)
        last = ni_view(c1)[C1_ETH1]["statistics"]["send_count"]
        t_cut = time.monotonic()
        if mode == "link":
            tb.link("c1", "eth1", "down")
        else:
            blackhole(c1, True)
        t_last_eth1 = t_cut
        detect = None
        total_last, t_total_last, stall = None, t_cut, 0.0
        try:
            while time.monotonic() - t_cut < args.observe:
                nis = ni_view(c1)
                now = time.monotonic()
                count = nis[C1_ETH1]["statistics"]["send_count"]
                if count != last:
                    t_last_eth1, last = now, count
                total = sum(n["statistics"]["send_count"] for n in nis.values())
                if total != total_last:
                    stall = max(stall, now - t_total_last)
                    total_last, t_total_last = total, now
                if detect is None and nis[C1_ETH1]["status"] == "down":
                    detect = now - t_cut
                time.sleep(args.sample)
            stop.set()
            worker.join(timeout=120)
        finally:
            if mode == "blackhole":
                blackhole(c1, False)
        health = ni_view(c1)[C1_ETH1]["health stats"]["health value"]
        stall = max(stall, time.monotonic() - t_total_last)
        return {"mode": mode, "switch_s": round(t_last_eth1 - t_cut, 2),
                "longest_stall_s": round(stall, 2),
                "detect_s": None if detect is None else round(detect, 2),
                "puts": totals["sent"], "ulp_failures": totals["failed"],
                "of_which_response_timeouts": totals["timeouts"], "eth1_health": health,
                "errors": ",".join(f"{k}:{n}" for k, n in sorted(errors.items())) or "-"}
    finally:
        tb.down()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("link", "blackhole", "both"), default="both")
    p.add_argument("--burst", type=int, default=200, help="PUTs per burst (64 in flight)")
    p.add_argument("--size", type=int, default=1024, help="PUT payload bytes")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of load before the cut")
    p.add_argument("--observe", type=float, default=15.0, help="seconds watched after the cut")
    p.add_argument("--sample", type=float, default=0.05, help="sampling period, seconds")
    p.add_argument("--lnd-timeout", type=int, default=1, help="lnd timeout for blackhole")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("failover.py: needs root (Mininet)", file=sys.stderr)
        return 1
    modes = ("link", "blackhole") if args.mode == "both" else (args.mode,)
    for mode in modes:
        r = run_one(mode, args)
        print(" ".join(f"{k}={v}" for k, v in r.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
