"""``testbed up --backend vagrant|hosts [--provider lxc|libvirt] TOPOLOGY`` (CLI glue only)."""

from __future__ import annotations

import argparse
import sys
import time

from testbed.plan import load_topology
from testbed.vagrant.client import VagrantTestbed


def cmd_up(args: argparse.Namespace) -> int:
    plan = load_topology(args.topology, name=args.name)  # errors before anything starts
    if args.backend == "hosts" and args.provider is not None:
        print("testbed: error: --provider is for --backend vagrant", file=sys.stderr)
        return 2
    started = time.monotonic()

    def progress(_step: int, _total: int, text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", file=sys.stderr, flush=True)

    tb = VagrantTestbed.up(args.topology, name=plan.name, progress=progress,
                           backend=args.backend, provider=args.provider or "lxc",
                           record_period=args.record_period / 1000.0,  # ms, checked already
                           trace_messages=args.trace_messages)
    status = tb.status()
    print(f"testbed {tb.name} is up ({time.monotonic() - started:.1f}s, {args.backend}"
          f"{'/' + (args.provider or 'lxc') if args.backend == 'vagrant' else ''}), "
          f"run directory {tb.rundir}")
    for node, info in status["nodes"].items():
        ifaces = " ".join(f"{i}={d['nid']}" for i, d in info["interfaces"].items())
        print(f"  {node:<12} on {info['host']:<10} {info['endpoint']:<24} {ifaces}")
    for line in tb.warnings:
        print(f"testbed: warning: {line}", file=sys.stderr)
    return 0
