"""Scale study of the sim backend (testbed/sim/): N clients x M servers, one PUT burst each.

For each size a generated topology (two rails per node, lan0 and lan1 on the one net ``tcp``,
M = N/4 servers; written to a temp dir in the testbed/plan/ schema) is brought up in a
fresh child process, and every client starts ``--puts`` PUTs of ``--size`` bytes at once (at
most 64 in flight per client, like the daemon's ``put`` verb) to its server (client i writes to
server i mod M), all concurrently on the one virtual clock. Discovery is on (the default), so
each client's first PUT waits for a discovery round with its server (ping, push, push back:
six messages): that traffic is counted too.

Printed per size (one ``key=value`` line): nodes, messages on the fabric during the burst
(``msgs``, of which ``puts``), bring-up wall time (``up_s``), burst wall time (``wall_s``),
simulated messages per wall second (``msgs_per_s``; the burst runs as the sim server runs it:
no per-node history, the event log drained as it goes, bring-up's objects frozen out of the
garbage collector's scans and young collections less often, ``testbed/sim/gcpolicy.py``), the
same per CPU second of this process (``cpu_s``, ``msgs_per_cpu_s``: what a loaded box does
not move), virtual time the burst took
(``virtual_s``) and the child's peak RSS (``rss_mb``, ``resource.getrusage``); then the ratio
of each size to the previous one (how wall time and memory grow with the message count).

The reference, measured in the same child just before the burst (the box is shared, so only
figures of one run compare): ``ref_msgs_per_s``, two engines exchanging PUTs and ACKs with
nothing between them (each ``Transmit`` handed straight to the other engine, no fabric, no
event log, no driver): the engine's own ceiling on this box at that moment. ``of_ref`` is
``msgs_per_s / ref_msgs_per_s``: what the fabric, the drivers and the event log leave of it;
``ref_msgs_per_cpu_s`` and ``of_ref_cpu`` are the same in CPU time (the reference runs with
the collector's default settings, before the burst's). No root needed:

    .venv/bin/python benchmarks/sim_scale.py [--sizes 16,64,256] [--puts 16]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MAX_INFLIGHT = 64  # per client, nodes/daemon/control.py


def topology_yaml(n_clients: int, n_servers: int) -> str:
    """The generated topology: c1..cN and s1..sM, each on lan0 and lan1 (net tcp)."""
    lines = ["name: simscale", "global: {health_sensitivity: 100, retry_count: 2,",
             "         transaction_timeout: 10}", "networks:",
             "  lan0: {lnet: tcp, subnet: 10.10.0.0/16}",
             "  lan1: {lnet: tcp, subnet: 10.11.0.0/16}", "nodes:"]
    names = [f"c{i}" for i in range(1, n_clients + 1)] + [f"s{i}" for i in range(1, n_servers + 1)]
    lines += [f"  {name}: {{interfaces: [lan0, lan1]}}" for name in names]
    return "\n".join(lines) + "\n"


def engine_reference(n_puts: int = 4000, size: int = 1024) -> float:
    """Messages per second of two bare engines (see the module docstring)."""
    return engine_reference_rates(n_puts, size)[0]


def engine_reference_rates(n_puts: int = 4000, size: int = 1024) -> tuple[float, float]:
    """``engine_reference`` per wall second and per CPU second of this process."""
    from nodes.daemon.runtime import SRPC_BULK_DATA, SRPC_RDMA_PORTAL
    from nodes.lnet.actions import Transmit
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.events import MessageReceived, TxCompleted
    from nodes.lnet.hstatus import HStatus
    from nodes.lnet.nid import NID, Net

    tcp = Net.parse("tcp")
    cn, sn = NID.parse("10.10.0.1@tcp"), NID.parse("10.10.0.2@tcp")
    c, srv = LNetEngine(incarnation=1), LNetEngine(incarnation=2)
    for eng, nid in ((c, cn), (srv, sn)):
        eng.configure()
        eng.set_tunable("discovery", 0)
        eng.net_add(tcp, "eth0", nid)
    srv.attach_me(SRPC_RDMA_PORTAL, 0, 2**64 - 1, data=SRPC_BULK_DATA, sink=True)
    c.peer_add(sn, [])
    peer = {id(c): srv, id(srv): c}
    payload, now, msgs = bytes(size), 0.0, 0
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n_puts):
        pending = [(c, a) for a in c.put(now, sn, payload=payload, portal=SRPC_RDMA_PORTAL)[1]]
        while pending:
            eng, act = pending.pop()
            if not isinstance(act, Transmit):
                continue
            msgs += 1
            other = peer[id(eng)]
            ev = MessageReceived(ni=act.lpni, peer_nid=act.ni, hdr=act.hdr, payload=act.payload)
            pending += [(other, a) for a in other.handle(ev, now)]
            done = TxCompleted(tx_id=act.tx_id, rc=0, hstatus=HStatus.OK)
            pending += [(eng, a) for a in eng.handle(done, now)]
    return msgs / (time.perf_counter() - t0), msgs / (time.process_time() - c0)


def run_size(n_clients: int, puts: int, size: int,
             sink: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """One size in this process: bring up, burst, measure; ``sink`` (``sim_hash.py``) is
    given every event of the burst's log, in order."""
    from nodes.daemon.runtime import SRPC_RDMA_PORTAL
    from nodes.lnet.actions import MDEvent
    from nodes.lnet.nid import NID
    from testbed.sim import SimTestbed, gcpolicy

    n_servers = max(1, n_clients // 4)
    with tempfile.TemporaryDirectory(prefix="sim-scale-") as tmp:
        path = Path(tmp) / "simscale.yaml"
        path.write_text(topology_yaml(n_clients, n_servers))
        t0 = time.perf_counter()
        tb = SimTestbed.up(path)
        up_s = time.perf_counter() - t0
    fab = tb.fabric
    clients = [tb.runtimes[f"c{i}"] for i in range(1, n_clients + 1)]
    servers = [NID.parse(tb.runtimes[f"s{i}"].plan.interfaces[0].nid)
               for i in range(1, n_servers + 1)]
    payload = bytes(size)
    started = dict.fromkeys(range(n_clients), 0)
    inflight = dict.fromkeys(range(n_clients), 0)
    done = failed = 0
    total = n_clients * puts
    ready: set[int] = set()  # clients with a free slot, refilled between steps

    def on_event(i: int, ev: MDEvent) -> None:
        nonlocal done, failed
        if ev.unlinked:  # the driver calls back per MD (the daemon's waiters, nodes/driver.py)
            inflight[i] -= 1
            done += 1
            failed += ev.kind != "ACK" or ev.status != 0
            ready.add(i)

    def refill(i: int) -> None:
        rt, dst = clients[i], servers[i % n_servers]
        while started[i] < puts and inflight[i] < MAX_INFLIGHT:
            handle, actions = rt.engine.put(fab.now, dst, payload=payload,
                                            portal=SRPC_RDMA_PORTAL)
            rt.driver.watch(handle, lambda ev, i=i: on_event(i, ev))
            rt.execute(actions)
            inflight[i] += 1
            started[i] += 1

    ref, ref_cpu = engine_reference_rates(size=size)
    # as the sim server runs: no per-node history, the event log leaves memory as it goes
    # (here counted, not written), and what bring-up made is no work for the GC any more,
    # which collects less often (testbed/sim/gcpolicy.py)
    fab.keep_history = False
    fab.event_log.clear()
    gcpolicy.settle()
    msgs = puts_sent = 0

    def drain() -> None:
        nonlocal msgs, puts_sent
        for e in fab.event_log:
            if sink is not None:
                sink(e)
            if e["kind"] == "send":
                msgs += 1
                puts_sent += e["type"] == "PUT"
        fab.event_log.clear()

    v0 = fab.now
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n_clients):
        refill(i)
    steps = 0
    while done < total:
        while ready:
            refill(ready.pop())
        if done < total and not fab.step():
            raise SystemExit(f"sim_scale: {total - done} PUTs can never complete")
        steps += 1
        if steps % 4096 == 0:
            drain()
    drain()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    tb.down()
    gc.unfreeze()
    return {"clients": n_clients, "servers": n_servers, "nodes": n_clients + n_servers,
            "puts": total, "failed": failed, "msgs": msgs, "put_msgs": puts_sent,
            "up_s": round(up_s, 2), "wall_s": round(wall, 2),
            "msgs_per_s": round(msgs / wall) if wall else 0,
            "ref_msgs_per_s": round(ref),
            "of_ref": round(msgs / wall / ref, 2) if wall else 0,
            "cpu_s": round(cpu, 2), "msgs_per_cpu_s": round(msgs / cpu) if cpu else 0,
            "ref_msgs_per_cpu_s": round(ref_cpu),
            "of_ref_cpu": round(msgs / cpu / ref_cpu, 2) if cpu else 0,
            "virtual_s": round(fab.now - v0, 3),
            "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="16,64,256", help="client counts, comma separated")
    p.add_argument("--puts", type=int, default=32, help="PUTs per client")
    p.add_argument("--size", type=int, default=1024, help="PUT payload bytes")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child: one size, JSON out
    args = p.parse_args()
    if args.one is not None:
        print(json.dumps(run_size(args.one, args.puts, args.size)))
        return 0
    prev: dict[str, Any] | None = None
    for n in (int(x) for x in args.sizes.split(",")):
        # a child per size: its peak RSS is that size's alone
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--puts",
                              str(args.puts), "--size", str(args.size)],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"sim_scale: size {n} failed: {out.stderr.strip()[-500:]}", file=sys.stderr)
            return 1
        r = json.loads(out.stdout)
        print(" ".join(f"{k}={v}" for k, v in r.items()), flush=True)
        if prev is not None:
            ratio = {k: round(r[k] / prev[k], 2) if prev[k] else None
                     for k in ("nodes", "msgs", "up_s", "wall_s", "virtual_s", "rss_mb")}
            if ratio["msgs"] and ratio["wall_s"]:  # > 1: each message costs more at scale
                ratio["wall_per_msg"] = round(ratio["wall_s"] / ratio["msgs"], 2)
            print(f"  ratio {r['clients']}/{prev['clients']}: "
                  + " ".join(f"{k}={v}" for k, v in ratio.items()), flush=True)
        prev = r
    return 0


if __name__ == "__main__":
    sys.exit(main())
