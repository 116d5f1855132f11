"""Mininet ``testbed up`` at scale: 10, 100, 300 and 1,000 nodes (issue 13 item 4, issue 34).

For each size a generated topology (nodes n1..nN, one interface each on ``--rails`` segments
``lan0``.. of LNet net ``tcp``; with ``--routers R``, R routers to a second net ``tcp1`` and
every client and server routed through all of them: ``topology_yaml``; written to a temp dir
in the topologies/ schema) is brought up with
``MininetTestbed.up`` exactly as ``testbed up`` does (recorder on at its default period), and
timed from the call to its return (``up_s``: network, daemons, every node's NIs configured).
The time of each bring-up step (``stepK_s``, from its progress line to the next: 2 network,
3 starting daemons, 4 waiting for their hello, 5 NIs, 6 peers/routes, 7 routes up) shows
where it goes. Then, per node daemon (pids from state.json), ``/proc/PID/smaps_rollup``: RSS and PSS
(``rss_mb``/``pss_mb``: mean over the daemons; ``pss_max_mb``) and the CPU each daemon used
until then (``daemon_cpu_s``, mean of /proc/PID/stat utime+stime); PSS divides every shared page
by the number of processes mapping it, so it is what one more daemon costs the box. The fork
server's own PSS (``server_pss_mb``, testbed/mininet/forkserver.py) is printed apart: it is
paid once per testbed. Then ``down`` is timed (``down_s``) and what is left of the testbed
(processes, interfaces, links, run directory: ``testbed.clean.leftovers``) must be nothing.

Reference, measured in the same run (the box is shared, so only figures of one run compare):
``ref_cold_s``, the wall time of one cold ``python -c "import nodes.daemon.__main__"`` (an
interpreter start plus the daemon's import graph: what each daemon paid before the fork
server), median of 5; ``per_node_s`` is ``up_s / N`` and ``of_cold`` its ratio to
``ref_cold_s``; ``ref_kernel``, the kernel's floor for step 2 by a bare program (``kernel_ref``:
the same namespaces, bridges and veths, no daemon) and its teardown. After ``up``:
``routes_down`` (routes not up when ``up`` returned), ``idle_cpu_cores`` (what all the idle
daemons use together, 2 s window), ``load1``. Targets: 100 nodes in under 8 s, 300 in under
30 s, PSS <= 15 MB per daemon; 1,000 nodes (issue 34) in under 30 s, PSS <= 8 MB, ``down``
under 10 s, no route down. As root, from the repository root:

    .venv/bin/python benchmarks/scale.py [--sizes 10,100,300] [--runs 1] [--profile DIR]
        [--rails 2] [--routers 8] [--prefix NAME] [--record-period S]

``--profile DIR`` records the supervisor and the fork server with py-spy during each bring-up
(DIR/upN-K.txt, DIR/fsN-K.txt, ``py-spy record --format raw``: collapsed stacks) and prints the
top self-time lines.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed import clean, runstate
from testbed.mininet import MininetTestbed


def topology_yaml(name: str, n: int, rails: int = 1, routers: int = 0) -> str:
    """n1..nN on ``rails`` segments of one LNet net ``tcp`` (each a /16: room for 65,000
    nodes), every node one interface on each (Multi-Rail); with ``routers``, r1..rR on those
    segments and ``rails`` more of net ``tcp1``, the other nodes split into clients c1..
    (``tcp``) and servers s1.. (``tcp1``, a quarter), each with a hop-1 route to the other
    net through every router (issue 34 target 1: 1,000 nodes, 8 routers)."""
    lines = [f"name: {name}", "networks:"]
    lines += [f"  lan{i}: {{lnet: tcp, subnet: 10.{60 + i}.0.0/16}}" for i in range(rails)]
    if not routers:
        lines.append("nodes:")
        ifs = ", ".join(f"lan{i}" for i in range(rails))
        lines += [f"  n{i}: {{interfaces: [{ifs}]}}" for i in range(1, n + 1)]
        return "\n".join(lines) + "\n"
    lines += [f"  lan{rails + i}: {{lnet: tcp1, subnet: 10.{60 + rails + i}.0.0/16}}"
              for i in range(rails)]
    lines.append("nodes:")
    near = ", ".join(f"lan{i}" for i in range(rails))
    far = ", ".join(f"lan{rails + i}" for i in range(rails))
    gws = [f"r{i}" for i in range(1, routers + 1)]
    lines += [f"  {r}: {{interfaces: [{near}, {far}], routing: true}}" for r in gws]

    def routes(net: str) -> str:
        return ", ".join(f"{{net: {net}, gateway: {g}, hop: 1}}" for g in gws)

    servers = max(1, (n - routers) // 4)
    lines += [f"  c{i}: {{interfaces: [{near}], routes: [{routes('tcp1')}]}}"
              for i in range(1, n - routers - servers + 1)]
    lines += [f"  s{i}: {{interfaces: [{far}], routes: [{routes('tcp')}]}}"
              for i in range(1, servers + 1)]
    return "\n".join(lines) + "\n"


def smaps(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of ``pid`` in MB from /proc/PID/smaps_rollup."""
    fields: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in ("Rss:", "Pss:"):
            fields[parts[0]] = int(parts[1]) / 1024.0
    return fields["Rss:"], fields["Pss:"]


def cpu_s(pid: int) -> float:
    """User+system CPU seconds ``pid`` has used (/proc/PID/stat utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cold_start() -> float:
    """One interpreter start with the daemon's import graph (the reference)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import nodes.daemon.__main__"], check=True,
                   cwd=Path(__file__).resolve().parents[1])
    return time.perf_counter() - t0


def kernel_ref(n: int, rails: int) -> tuple[float, float]:
    """The kernel's floor for what step 2 builds, measured by a bare program in the same run:
    ``n`` network+mount namespaces held by ``mnexec -cdnp sleep infinity`` (8 at a time, as
    netbuild), ``rails`` bridges and ``n * rails`` veths into them in one ``ip -batch``; then
    the holders killed and the bridges deleted. Returns (build seconds, teardown seconds)."""
    from concurrent.futures import ThreadPoolExecutor

    tag = f"r{os.getpid() % 1000}"

    def holder(_i: int) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(["mnexec", "-cdnp", "sleep", "infinity"],
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert p.stdout is not None
        p.stdout.readline()
        p.stdout.close()
        return p

    bridges = [f"{tag}b{r}" for r in range(rails)]
    t0 = time.perf_counter()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with ThreadPoolExecutor(8) as pool:
            procs = list(pool.map(holder, range(n)))
        batch = [f"link add name {b} type bridge\nlink set dev {b} up" for b in bridges]
        batch += [f"link add name {tag}p{r}x{i} type veth peer name eth{r} netns {p.pid}\n"
                  f"link set dev {tag}p{r}x{i} master {bridges[r]} up"
                  for i, p in enumerate(procs) for r in range(rails)]
        subprocess.run(["ip", "-batch", "-"], input="\n".join(batch) + "\n", text=True,
                       check=True)
        built = time.perf_counter() - t0
    finally:
        t1 = time.perf_counter()
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        subprocess.run(["ip", "-force", "-batch", "-"], text=True, capture_output=True,
                       input="".join(f"link del dev {b}\n" for b in bridges))
    return built, time.perf_counter() - t1


def idle_cpu(pids: list[int], window: float = 2.0) -> float:
    """CPU share (of one core) all ``pids`` use together while the testbed is idle."""
    before = sum(cpu_s(pid) for pid in pids)
    time.sleep(window)
    return (sum(cpu_s(pid) for pid in pids) - before) / window


def start_profile(sup_pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy not found: no profile", file=sys.stderr)
        return None
    return subprocess.Popen([spy, "record", "--pid", str(sup_pid), "--format", "raw",
                             "--rate", "200", "--idle", "--nonblocking", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def find_supervisor(name: str, timeout: float = 10.0, key: str = "supervisor_pid"
                    ) -> int | None:
    """The pid state.json records under ``key`` (the supervisor's, or the fork server's)."""
    deadline = time.monotonic() + timeout
    rdir = runstate.rundir(name)
    while time.monotonic() < deadline:
        pid = runstate.read_state(rdir).get(key) if rdir.exists() else None
        if isinstance(pid, int):
            return pid
        time.sleep(0.01)
    return None


def top_self(path: Path, count: int = 12) -> list[str]:
    """Top self-time frames of a py-spy raw (collapsed) profile."""
    totals: dict[str, int] = {}
    whole = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        leaf = stack.split(";")[-1]
        totals[leaf] = totals.get(leaf, 0) + int(n)
        whole += int(n)
    best = sorted(totals.items(), key=lambda kv: -kv[1])[:count]
    return [f"{100.0 * v / max(whole, 1):5.1f}% {k}" for k, v in best]


def one(n: int, run: int, tmp: Path, profile: Path | None, args: argparse.Namespace
        ) -> dict[str, float]:
    name = f"{args.prefix}{os.getpid() % 1000}n{n}"
    path = tmp / f"{name}.yaml"
    path.write_text(topology_yaml(name, n, args.rails, args.routers))
    spy = None
    if profile is not None:
        import threading

        holder: dict[str, subprocess.Popen[bytes] | None] = {}

        def attach() -> None:
            pid = find_supervisor(name)
            holder["spy"] = None if pid is None else start_profile(
                pid, profile / f"up{n}-{run}.txt")
            server = find_supervisor(name, key="forkserver_pid")
            holder["spy_fs"] = None if server is None else start_profile(
                server, profile / f"fs{n}-{run}.txt")

        th = threading.Thread(target=attach)
        th.start()
    steps: list[tuple[int, float]] = []
    t0 = time.perf_counter()
    extra = {} if args.record_period is None else {"record_period": args.record_period}
    tb = MininetTestbed.up(path, name=name, progress=lambda step, _total, _text: steps.append(
        (step, time.perf_counter())), **extra)
    up_s = time.perf_counter() - t0
    load = os.getloadavg()[0]
    try:
        if profile is not None:
            th.join()
            for spy in (holder.get("spy"), holder.get("spy_fs")):
                if spy is not None:
                    spy.send_signal(2)
                    spy.wait(timeout=30)
        state = runstate.read_state(tb.rundir)
        pids = [int(info["daemon_pid"]) for info in state["nodes"].values()]
        mem = [smaps(pid) for pid in pids]
        cpu = statistics.mean(cpu_s(pid) for pid in pids)
        idle = idle_cpu(pids)
        server = state.get("forkserver_pid")
        server_pss = smaps(int(server))[1] if isinstance(server, int) else 0.0
    finally:
        t1 = time.perf_counter()
        tb.down()
        down_s = time.perf_counter() - t1
    left = clean.leftovers(name)
    if left:
        print(f"LEFT BEHIND by {name}: {left}", file=sys.stderr)
    ends = [t for _, t in steps[1:]] + [t0 + up_s]
    phases = {f"step{step}_s": end - t for (step, t), end in zip(steps, ends, strict=True)}
    rss = [m[0] for m in mem]
    pss = [m[1] for m in mem]
    return {"nodes": n, "up_s": up_s, "per_node_s": up_s / n, "rss_mb": statistics.mean(rss),
            "pss_mb": statistics.mean(pss), "pss_max_mb": max(pss), "daemon_cpu_s": cpu,
            "server_pss_mb": server_pss, "down_s": down_s, "leftovers": len(left),
            "routes_down": len(tb.warnings), "idle_cpu_cores": idle, "load1": load,
            **phases}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10,100,300")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR")
    ap.add_argument("--rails", type=int, default=1, help="segments of net tcp per node")
    ap.add_argument("--routers", type=int, default=0, help="routers to a second net tcp1")
    ap.add_argument("--prefix", default="scale", help="testbed name prefix")
    ap.add_argument("--record-period", type=float, default=None, metavar="S",
                    help="recorder period in seconds (default: testbed up's; 0: off)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("scale.py: needs root (Mininet)", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    ref = statistics.median(cold_start() for _ in range(5))
    print(f"ref_cold_s={ref:.3f}")
    for n in sizes:
        built, torn = kernel_ref(n, args.rails)
        print(f"ref_kernel nodes={n} rails={args.rails} build_s={built:.3f} "
              f"teardown_s={torn:.3f} load1={os.getloadavg()[0]:.2f}", flush=True)
    targets = {100: 8.0, 300: 30.0, 1000: 30.0}
    pss_target = {1000: 8.0}
    bad = 0
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        for n in sizes:
            for run in range(args.runs):
                r = one(n, run, Path(tmp), args.profile, args)
                line = " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                for k, v in r.items())
                target = targets.get(n)
                met = (r["pss_mb"] <= pss_target.get(n, 15.0) and not r["leftovers"]
                       and (target is None or r["up_s"] < target) and not r["routes_down"]
                       and (n < 1000 or r["down_s"] < 10.0))
                bad += not met
                print(f"{line} of_cold={r['per_node_s'] / ref:.3f} "
                      f"target_up_s={target if target else '-'} met={'yes' if met else 'no'}",
                      flush=True)
                for kind in ("up", "fs") if args.profile is not None else ():
                    if (args.profile / f"{kind}{n}-{run}.txt").exists():
                        print(f"  {'supervisor' if kind == 'up' else 'fork server'}:")
                        for row in top_self(args.profile / f"{kind}{n}-{run}.txt"):
                            print("   ", row)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
