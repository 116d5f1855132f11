"""The speed of ``testbed explore`` (issue 17 item 4): x real time and seeds per hour.

Two figures, each against its target and against a reference measured in the same run (the
box is shared: only figures of one run compare):

1. ``x_real_time``: virtual seconds per wall second for a 32-node Multi-Rail topology with two
   routers (generated: ``--clients`` clients c1..cN on the two rails of net ``tcp``, as many
   servers s1..sN on the two rails of ``tcp1``, routers r1 and r2 with a NI on each of the four
   rails; LNet's default timeouts, discovery on), every client sending one 64 KiB PUT every
   100 ms of virtual time to a Multi-Rail peer (the next client) and one to a routed peer (its
   server), for ``--virtual`` seconds, run as ``explore`` runs a schedule (``Replay`` streams,
   the message trace on, the event log kept: as the fabric keeps it, its messages' send,
   recv, tx_done and md records as tuples, which ``testbed check`` reads as they are, as
   explore's check does; ``tb.events()``, which turns them into dicts, is not timed, as
   explore calls it only to hash the log). Target >= 100x. Printed with the messages it
   moved and the messages per wall second; the reference is the bare engine's own ceiling
   (two engines exchanging PUT/ACK with nothing between them, ``sim_scale.engine_reference``):
   ``needed_msgs_per_s`` is what 100x would take, ``ref_msgs_per_s`` what one core does.
   The same per CPU second of this process (``x_per_cpu_s``, ``msgs_per_cpu_s``,
   ``ref_msgs_per_cpu_s``): what a loaded box does not move. Explore's workers collect
   garbage less often (``testbed/sim/gcpolicy.py``), and so does this run.
2. ``seeds_per_hour``: ``--seeds`` seeds of 10 virtual minutes (600 s safety phase, then the
   liveness phase) of ``explore`` on ``topologies/mr-routers.yaml`` over ``--workers`` worker
   processes on this box (``pool.py``). Target >= 1,000 per hour.
3. ``dask_seeds_per_hour``: the same seeds through dask.distributed (``--cluster local:K``,
   a LocalCluster of as many one-thread workers), and ``of_pool``, its rate over figure 2's.
   Both rates count the same span: from ``explore``'s call (the engine not yet started) to
   its last result (the engine's close not included), so each engine's start is in its
   wall time (the pool's workers' interpreters and imports as much as dask's scheduler and
   workers); ``start_s`` is the part of it before ``explore`` could submit (the pool's
   spawns return at once, its workers import meanwhile: the two ``start_s`` do not compare;
   the rates do). ``--pairs`` pool/dask pairs, which runs first alternating pair by pair
   (the box is shared: a load that comes and goes hits both alike); the median of the pairs'
   ``of_pool`` is printed with the load average. Target >= 0.9 (issue 30 item 3: the
   engine's overhead must not grow). Skipped without the ``explore`` extra.

No root needed:

    .venv/bin/python benchmarks/explore_speed.py [--clients 15] [--virtual 20] [--seeds 40]
        [--pairs 5]   # --clients 0: figures 2 and 3 only
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
TARGET_X, TARGET_SEEDS = 100.0, 1000.0
#: seeds per hour through dask (a LocalCluster) over the local process pool's (issue 30)
TARGET_OF_POOL = 0.9


def topology_yaml(n: int) -> str:
    """c1..cN on tcp (lan0, lan1), s1..sN on tcp1 (lan2, lan3), r1/r2 routing between."""
    lines = ["name: xspeed", "networks:",
             "  lan0: {lnet: tcp, subnet: 10.10.0.0/16}",
             "  lan1: {lnet: tcp, subnet: 10.11.0.0/16}",
             "  lan2: {lnet: tcp1, subnet: 10.20.0.0/16}",
             "  lan3: {lnet: tcp1, subnet: 10.21.0.0/16}", "nodes:",
             "  r1: {interfaces: [lan0, lan1, lan2, lan3], routing: true}",
             "  r2: {interfaces: [lan0, lan1, lan2, lan3], routing: true}"]
    for side, ifs, far in (("c", "lan0, lan1", "tcp1"), ("s", "lan2, lan3", "tcp")):
        for i in range(1, n + 1):
            lines.append(f"  {side}{i}: {{interfaces: [{ifs}], routes: [{{net: {far}, "
                         "gateway: r1, hop: 1}, {net: " + far + ", gateway: r2, hop: 1}]}")
    return "\n".join(lines) + "\n"


def x_real_time(n: int, virtual: float,
                sink: Callable[[dict[str, Any]], None] | None = None) -> dict[str, float | int]:
    """Figure 1 (module doc); ``sink`` (``sim_hash.py``) is given every event, in order."""
    from testbed.explore.replay import Replay
    from testbed.sim import SimTestbed, gcpolicy

    gcpolicy.relax()  # as explore's worker processes run (testbed/explore/pool.py)

    with tempfile.TemporaryDirectory(prefix="xspeed-") as tmp:
        path = Path(tmp) / "xspeed.yaml"
        path.write_text(topology_yaml(n))
        t0 = time.perf_counter()
        tb = SimTestbed.up(path, trace_messages=True)
        up_s = time.perf_counter() - t0
    try:
        r = Replay(tb)
        nid = {name: tb.plan.node(name).nids for name in tb.nodes}
        count = int(virtual / 0.1)
        t0, c0 = time.perf_counter(), time.process_time()
        v0 = tb.now
        for i in range(1, n + 1):
            mr, routed = f"c{i % n + 1}", f"s{i}"
            r.stream(f"c{i}", "put", nid[mr][0], every=0.1, count=count, size=65536)
            r.stream(f"c{i}", "put", nid[routed][0], every=0.1, count=count, size=65536)
        r.advance(virtual + 1.0)  # the last PUTs' ACKs
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        moved = tb.now - v0
        events = tb.events()
    finally:
        tb.down()
    msgs = sum(1 for e in events if e["kind"] == "send")
    if sink is not None:
        for e in events:
            sink(e)
    done = sum(s.done for s in r.streams)
    failed = sum(s.failed for s in r.streams)
    return {"nodes": 2 * n + 2, "puts": done, "failed": failed, "msgs": msgs,
            "up_s": round(up_s, 2), "virtual_s": round(moved, 1), "wall_s": round(wall, 2),
            "x_real_time": round(moved / wall, 1), "msgs_per_s": round(msgs / wall),
            "cpu_s": round(cpu, 2), "x_per_cpu_s": round(moved / cpu, 1),
            "msgs_per_cpu_s": round(msgs / cpu),
            "needed_msgs_per_s": round(msgs / moved * TARGET_X)}


def seeds_per_hour(seeds: int, workers: int, engine: str = "pool") -> dict[str, float | int]:
    """Figures 2 and 3 (module doc): ``engine`` ``pool`` (local processes, pool.py) or
    ``local`` (a dask LocalCluster, its start counted in the wall time)."""
    from testbed.explore.driver import explore

    rep = explore(str(ROOT / "topologies" / "mr-routers.yaml"), range(seeds), time_s=600.0,
                  cluster=f"{engine}:{workers}", quiet=True, say=lambda line: None)
    sp = rep.speed()
    return {"seeds": seeds, "workers": rep.workers, "failed": len(rep.failures),
            "errored": len(rep.errors), "start_s": round(rep.start, 2),
            "wall_s": round(rep.wall, 1),
            "virtual_min_per_seed": round(sp["virtual_per_seed"] / 60, 1),
            "x_real_time_per_worker": round(sp["x_real_time"]),
            "seeds_per_hour": round(sp["seeds_per_hour"])}


def main() -> int:
    import importlib.util

    # sim_scale.py by path: this directory on sys.path would shadow the faults package
    spec = importlib.util.spec_from_file_location("sim_scale", Path(__file__).with_name(
        "sim_scale.py"))
    assert spec is not None and spec.loader is not None
    sim_scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim_scale)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=15,
                   help="clients (and servers) per side; 0: no figure 1")
    p.add_argument("--virtual", type=float, default=20.0, help="virtual seconds of traffic")
    p.add_argument("--seeds", type=int, default=40, help="seeds for the seeds/hour figure")
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--pairs", type=int, default=5,
                   help="pool/dask pairs for figures 2 and 3, alternating which runs first")
    args = p.parse_args()
    ref, ref_cpu = sim_scale.engine_reference_rates(size=65536)
    a = x_real_time(args.clients, args.virtual)
    a.update(ref_msgs_per_s=round(ref), ref_msgs_per_cpu_s=round(ref_cpu), target=TARGET_X,
             of_target=round(float(a["x_real_time"]) / TARGET_X, 3),
             needed_of_ref=round(float(a["needed_msgs_per_s"]) / ref, 1),
             needed_of_ref_cpu=round(float(a["needed_msgs_per_s"]) / ref_cpu, 1))
    if args.clients > 0:
        ref, ref_cpu = sim_scale.engine_reference_rates(size=65536)
        a = x_real_time(args.clients, args.virtual)
        a.update(ref_msgs_per_s=round(ref), ref_msgs_per_cpu_s=round(ref_cpu),
                 target=TARGET_X, of_target=round(float(a["x_real_time"]) / TARGET_X, 3),
                 needed_of_ref=round(float(a["needed_msgs_per_s"]) / ref, 1),
                 needed_of_ref_cpu=round(float(a["needed_msgs_per_s"]) / ref_cpu, 1))
        print("x_real_time " + " ".join(f"{k}={v}" for k, v in a.items()), flush=True)
    if args.seeds <= 0:
        return 0
    from testbed.explore import cluster

    dask = cluster.available()
    if not dask:
        print("dask_seeds_per_hour skipped: dask.distributed is not installed", flush=True)
    ratios: list[float] = []
    for i in range(max(args.pairs, 1)):
        # pair i: the pool first, then dask; the next pair the other way round (the box is
        # shared: a load that comes and goes hits both engines alike)
        order = ["pool", "local"] if i % 2 == 0 else ["local", "pool"]
        figs: dict[str, dict[str, Any]] = {}
        for engine in order if dask else ["pool"]:
            figs[engine] = seeds_per_hour(args.seeds, args.workers, engine=engine)
        b = figs["pool"]
        b.update(target=TARGET_SEEDS,
                 of_target=round(float(b["seeds_per_hour"]) / TARGET_SEEDS, 2))
        print(f"seeds_per_hour pair={i} " + " ".join(f"{k}={v}" for k, v in b.items()),
              flush=True)
        if not dask:
            continue
        c = figs["local"]
        c.update(of_pool=round(float(c["seeds_per_hour"])
                               / max(float(b["seeds_per_hour"]), 1.0), 3),
                 first=order[0], target_of_pool=TARGET_OF_POOL)
        ratios.append(float(c["of_pool"]))
        print(f"dask_seeds_per_hour pair={i} " + " ".join(f"{k}={v}" for k, v in c.items()),
              flush=True)
    if ratios:
        print(f"dask_of_pool median={statistics.median(ratios):.3f} pairs={len(ratios)} "
              f"all={' '.join(f'{r:.3f}' for r in ratios)} target={TARGET_OF_POOL} "
              f"load={' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
