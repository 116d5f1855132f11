"""The simulator's event logs as hashes: what a speed change to ``testbed/sim/`` must keep.

A change that makes the simulator faster must not change what it logs, nor the order: the
same seed and inputs give the same event log, byte for byte (issue 10). This prints the
SHA-256 (first 16 hex digits) of the event log of ``sim_scale.py``'s burst at each of
``--sizes`` (default 256, 512, 1024 clients: 320, 640 and 1,280 nodes, ``--puts 16``) and of
``explore_speed.py``'s 32-node run (``--virtual 10``, message trace on), each event one JSON
line with sorted keys as the sim server writes them (``testbed/sim/server.py``), in order;
compare the lines before and after a change (benchmarks/README.md has main's). Neither run
has a fault: ``--explore-seeds N`` also hashes the event logs of explore seeds 0..N-1 of
``--topology`` (``--explore-time`` s of safety phase, then the liveness phase), whose swarms
flap carriers, partition and drop (one line over all, and with ``-v`` one per seed, to find
the seeds a change moved). No root:

    .venv/bin/python benchmarks/sim_hash.py [--sizes 256,512,1024] [--virtual 10]
    .venv/bin/python benchmarks/sim_hash.py --sizes '' --virtual 0 --explore-seeds 100 -v
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _bench(name: str) -> ModuleType:
    """A sibling benchmark by path (this directory on sys.path would shadow ``faults``)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Hasher:
    """SHA-256 over the events' JSON lines, and their count."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.n = 0

    def __call__(self, e: dict[str, Any]) -> None:
        self.h.update(json.dumps(e, sort_keys=True).encode() + b"\n")
        self.n += 1

    def line(self, what: str) -> str:
        return f"{what} events={self.n} sha256={self.h.hexdigest()[:16]}"


def explore_hashes(topology: str, seeds: int, time_s: float, verbose: bool) -> None:
    """The event-log digests of explore seeds ``0..seeds-1`` (``runner.run``'s hash)."""
    from testbed.explore import runner, swarm, topo

    tp = topo.load(topology)
    whole = hashlib.sha256()
    for seed in range(seeds):
        out = runner.run(tp, swarm.expand(swarm.swarm(tp, seed), tp, time_s), digest=True)
        whole.update(out.digest.encode())
        if verbose:
            print(f"explore seed {seed} events={out.events} sha256={out.digest[:16]}",
                  flush=True)
    print(f"explore {Path(topology).stem} seeds=0-{seeds - 1} time={time_s:g} "
          f"sha256={whole.hexdigest()[:16]}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="256,512,1024", help="sim_scale client counts")
    p.add_argument("--puts", type=int, default=16, help="sim_scale PUTs per client")
    p.add_argument("--virtual", type=float, default=10.0,
                   help="explore_speed virtual seconds (0: skip)")
    p.add_argument("--explore-seeds", type=int, default=0, help="explore seeds to hash")
    p.add_argument("--topology", default="topologies/mr-routers.yaml", help="their topology")
    p.add_argument("--explore-time", type=float, default=120.0, help="their safety phase")
    p.add_argument("-v", action="store_true", help="one line per explore seed")
    args = p.parse_args()
    if args.explore_seeds:
        explore_hashes(args.topology, args.explore_seeds, args.explore_time, args.v)
    sim_scale, explore_speed = _bench("sim_scale"), _bench("explore_speed")
    for n in (int(x) for x in args.sizes.split(",") if x):
        h = Hasher()
        sim_scale.run_size(n, args.puts, 1024, sink=h)
        print(h.line(f"sim_scale clients={n} puts={args.puts}"), flush=True)
    if args.virtual:
        h = Hasher()
        explore_speed.x_real_time(15, args.virtual, sink=h)
        print(h.line(f"explore_speed clients=15 virtual={args.virtual:g}"), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
