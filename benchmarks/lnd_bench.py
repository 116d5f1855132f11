"""Shared plumbing of the LND benchmarks (throughput.py, multirail.py, msgrate.py).

Theory of operation: each benchmark brings up a two-node Mininet testbed (``c1`` and ``s1``,
``rails`` segments on one ``tcp`` net, each node a static Multi-Rail peer of the other),
measures LNet through a *load* (today the node daemon's PUT/GET burst, 64 in flight; later
``lst brw``: a ``Load`` is one function, so swapping it changes nothing else) and, in the same
run over the same links, the references:

* ``iperf3`` (one TCP stream, ``-R`` for the read direction) between the two namespaces;
* a bare asyncio request/response program (``asyncio_ref.py``, run as a script inside the
  namespaces): one TCP connection, ``inflight`` requests outstanding, each request
  ``req_bytes`` and each response ``resp_bytes``, on asyncio streams (``readexactly`` /
  ``write``) with the default event loop. For a 1 MiB PUT the request is the PUT frame's size
  and the response the ACK's; for a GET the other way round; for small PUTs the same 104/96
  bytes LNet puts on the wire (ksock_msg_hdr 24 + lnet_hdr 72 + payload).

Figures are min/median/max over ``--runs`` runs. Run as root from the repository root.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: ksock_msg_hdr + lnet_hdr_nid4: what every LNet message adds on the wire (nodes/lnd/wire.py)
FRAME_OVERHEAD = 24 + 72
MIB = 1 << 20


# --- statistics ---------------------------------------------------------------------------
def mmm(values: Sequence[float]) -> tuple[float, float, float]:
    """(min, median, max)."""
    return min(values), statistics.median(values), max(values)


def fmt(values: Sequence[float], unit: str = "", nd: int = 0) -> str:
    lo, med, hi = mmm(values)
    return f"{lo:.{nd}f}/{med:.{nd}f}/{hi:.{nd}f}{unit}"


def ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of ``a`` over median of ``b``."""
    return statistics.median(a) / statistics.median(b)


# --- testbed ------------------------------------------------------------------------------
def topology_yaml(name: str, rails: int) -> str:
    nets = "\n".join(f"  r{i}: {{lnet: tcp, subnet: 10.{60 + i}.0.0/24}}" for i in range(rails))
    ifaces = ", ".join(f"r{i}" for i in range(rails))
    return (f"name: {name}\nglobal: {{transaction_timeout: 50, retry_count: 2}}\n"
            f"networks:\n{nets}\nnodes:\n"
            f"  c1: {{interfaces: [{ifaces}], peers: [s1]}}\n"
            f"  s1: {{interfaces: [{ifaces}], peers: [c1]}}\n")


def server_nid(rail: int) -> str:
    return f"10.{60 + rail}.0.2@tcp"


def server_ip(rail: int) -> str:
    return f"10.{60 + rail}.0.2"


@contextlib.contextmanager
def testbed(rails: int, prefix: str, **up: Any) -> Iterator[Any]:
    """A two-node Mininet testbed with ``rails`` rails, always taken down again; ``up`` goes
    to ``testbed.up`` (``record_period``, ``trace_messages``: the defaults of ``testbed up``,
    recorder on, no message trace)."""
    import testbed as tbapi

    # LNET_BENCH_PREFIX: a helper's testbeds start with its branch name (the shared box's rule)
    name = f"{os.environ.get('LNET_BENCH_PREFIX', '')}{prefix}{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.yaml"
        path.write_text(topology_yaml(name, rails))
        tb = tbapi.up(path, name=name, **up)
    try:
        yield tb
    finally:
        tb.down()


def spawn(node: Any, argv: Sequence[str]) -> subprocess.Popen[bytes]:
    """Start ``argv`` in ``node``'s network namespace, in the background."""
    return subprocess.Popen(["nsenter", f"--net=/proc/{node.host_pid}/ns/net", "--", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def wait_line(proc: subprocess.Popen[bytes], word: bytes, timeout: float = 10.0) -> None:
    """Wait (bounded) until ``proc`` prints a line containing ``word``."""
    assert proc.stdout is not None
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            break
        if word in line:
            return
    raise RuntimeError(f"{proc.args[3]} did not print {word!r} in {timeout:g} s")


def wait_listening(node: Any, port: int, timeout: float = 10.0) -> None:
    """Wait (bounded) until something listens on TCP ``port`` in ``node``'s namespace."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if node.exec(["ss", "-Hltn", f"sport = :{port}"]).out.strip():
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout:g} s")


def free_port(offset: int = 0) -> int:
    """A port for a reference server inside a private namespace (fresh each time)."""
    return 20000 + (os.getpid() * 7 + offset) % 20000


# --- iperf3 -------------------------------------------------------------------------------
def iperf3(client: Any, server: Any, ip: str, *, seconds: float, reverse: bool = False,
           port: int | None = None) -> float:
    """One iperf3 TCP stream client -> server (``reverse``: server -> client); MB/s."""
    port = port or free_port(1)
    srv = spawn(server, ["iperf3", "-s", "-1", "-B", ip, "-p", str(port)])
    try:
        wait_listening(server, port)
        argv = ["iperf3", "-c", ip, "-p", str(port), "-t", str(max(1, round(seconds))), "-J"]
        res = client.exec(argv + (["-R"] if reverse else []), timeout=seconds + 30)
        out = json.loads(res.out or "{}")
        if res.rc != 0 or "error" in out:
            raise RuntimeError(f"iperf3 failed: {out.get('error') or res.err}")
        return float(out["end"]["sum_received"]["bits_per_second"]) / 8e6
    finally:
        stop(srv)


# --- the bare asyncio request/response reference (asyncio_ref.py) -------------------------
def asyncio_ref(client: Any, server: Any, ip: str, *, req_bytes: int, resp_bytes: int,
                count: int, inflight: int = 64) -> float:
    """Seconds the bare asyncio program needs for ``count`` request/responses."""
    port = free_port(2)
    me = [sys.executable, str(Path(__file__).resolve().with_name("asyncio_ref.py"))]
    srv = spawn(server, [*me, "ref-server", ip, str(port), str(req_bytes), str(resp_bytes)])
    try:
        wait_line(srv, b"listening")
        res = client.exec([*me, "ref-client", ip, str(port), str(req_bytes), str(resp_bytes),
                           str(count), str(inflight)], timeout=600)
        if res.rc != 0:
            raise RuntimeError(f"reference client failed: {res.err}")
        return float(res.out.strip())
    finally:
        stop(srv)


# --- LNet loads ---------------------------------------------------------------------------
#: A load: (client node, server NID, "write"|"read", size, count) -> seconds for all of it.
#: The daemon's PUT (write) / GET (read) burst with 64 in flight (``burst_load``);
#: lnet_selftest's figure is ``lst_mbps``.
Load = Callable[[Any, str, str, int, int], float]


def burst_load(client: Any, dst: str, op: str, size: int, count: int) -> float:
    t0 = time.perf_counter()
    fn = client.put if op == "write" else client.get
    res = fn(dst, count=count, size=size, timeout=600)
    elapsed = time.perf_counter() - t0
    if not res.get("ok") or res.get("failed"):
        raise RuntimeError(f"{op} burst failed: {res}")
    return elapsed


def lst_mbps(client: Any, server: Any, dst: str, op: str, size: int, seconds: float = 5.0,
             concurrency: int = 64) -> tuple[float, list[float]]:
    """What ``lst stat --bw --mbs servers`` prints for ``lst brw write|read size=SIZE`` at
    ``concurrency`` from ``client`` (console and client group) to ``dst`` (server group), over
    a ``seconds`` window after one second of warm-up: the server's [R] MB/s for a write (it
    GETs the bulk), [W] for a read (it PUTs it), as lnet_selftest's brw moves data. Also the
    CPU microseconds per MiB of ``client`` and ``server`` over the window (CPU share of the
    wall time of the stat call, over the MiB/s moved in it: traffic is steady throughout).
    A timed run would be measured at the resolution of ``lst query`` polls (each an ``lst``
    process in the node, ~0.4 s here), so the rate is lst's own."""
    tag = "[R] Avg: " if op == "write" else "[W] Avg: "
    mbps, cpu = lst_stat(client, server, dst, ["brw", op, f"size={size}"],
                         ["--bw", "--mbs"], tag, seconds, concurrency)
    mib_per_s = mbps * 1e6 / MIB
    return mbps, [c / mib_per_s * 1e6 for c in cpu]


def lst_ping_rate(client: Any, server: Any, dst: str, seconds: float = 5.0,
                  concurrency: int = 64) -> tuple[float, list[float]]:
    """``lst add_test ... ping`` at ``concurrency``: the rate ``lst stat --rate servers``
    prints for the server's received messages ([R], one ping request each), and the CPU
    microseconds per ping of ``client`` and ``server`` (as ``lst_mbps``)."""
    rate, cpu = lst_stat(client, server, dst, ["ping"], ["--rate"], "[R] Avg: ", seconds,
                         concurrency)
    return rate, [c / rate * 1e6 for c in cpu]


def lst_stat(client: Any, server: Any, dst: str, test: list[str], stat: list[str], tag: str,
             seconds: float, concurrency: int) -> tuple[float, list[float]]:
    """Run ``lst add_test ... TEST`` from ``client`` to ``dst`` until stopped and return the
    first figure of the ``lst stat STAT servers`` line starting with ``tag`` and the CPU
    share (seconds per second) of ``client`` and ``server`` during the stat window."""
    key = str(os.getpid())
    cnid = next((n for n in client.nids if n.partition("@")[2] == dst.partition("@")[2]),
                client.nids[0])

    def lst(*argv: str) -> str:
        res = client.exec(["env", f"LST_SESSION={key}", "lst", *argv], timeout=600)
        if res.rc != 0 or res.err:
            raise RuntimeError(f"lst {' '.join(argv)}: rc {res.rc}: {res.out}{res.err}")
        return str(res.out)

    lst("new_session", "--timeout", "600", "bench")
    try:
        lst("add_group", "clients", cnid)
        lst("add_group", "servers", dst)
        lst("add_batch", "b")
        lst("add_test", "--batch", "b", "--concurrency", str(concurrency), "--from",
            "clients", "--to", "servers", *test)  # loops until stopped
        lst("run", "b")
        time.sleep(1.0)
        t0 = time.perf_counter()
        out, cpu = with_cpu((client, server), lambda: lst(
            "stat", *stat, "--count", "1", "--delay", f"{seconds:g}", "servers"))
        wall = time.perf_counter() - t0
        lst("stop", "b")
        line = next((x for x in out.splitlines() if x.startswith(tag)), None)
        if line is None:
            raise RuntimeError(f"lst stat printed no {tag!r} line: {out!r}")
        value = float(line[len(tag):].split()[0])
        errors = lst("show_error", "clients", "servers")
        if "Total 0 error nodes in clients" not in errors or \
                "Total 0 error nodes in servers" not in errors:
            raise RuntimeError(f"lst {' '.join(test)}: errors: {errors}")
        return value, [c / wall for c in cpu]
    finally:
        lst("end_session")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_cpu(nodes: Sequence[Any], run: Callable[[], float]) -> tuple[float, list[float]]:
    """``run()``'s result and the CPU seconds each of ``nodes``' daemons spent meanwhile."""
    before = [cpu_seconds(n.pid) for n in nodes]
    result = run()
    return result, [cpu_seconds(n.pid) - b for n, b in zip(nodes, before, strict=True)]


def runq_wait_seconds(pid: int) -> float:
    """Seconds the threads of process ``pid`` spent runnable but waiting for a CPU
    (``/proc/PID/task/*/schedstat``, second field): what a busy shared box takes from a
    daemon, which CPU time cannot show."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):  # a thread that ended
            total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def with_sched(nodes: Sequence[Any], run: Callable[[], float]
               ) -> tuple[float, list[float], list[float]]:
    """As ``with_cpu``, plus the seconds each daemon waited for a CPU meanwhile."""
    before = [runq_wait_seconds(n.pid) for n in nodes]
    result, cpu = with_cpu(nodes, run)
    return result, cpu, [runq_wait_seconds(n.pid) - b
                         for n, b in zip(nodes, before, strict=True)]


# --- profiling ----------------------------------------------------------------------------
def pyspy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """Start ``py-spy record`` on ``pid`` (raw collapsed stacks, idle frames included); with
    ``LND_BENCH_NATIVE=1`` in the environment, ``--native`` (the compiled modules' C frames:
    without it their time goes to the Python frame that called them; the summary's areas then
    see only the Python frames)."""
    spy = Path(sys.executable).with_name("py-spy")
    native = ["--native"] if os.environ.get("LND_BENCH_NATIVE") else []
    return subprocess.Popen([str(spy), "record", "-p", str(pid), "-d", str(int(seconds)),
                             "-r", "200", "--idle", *native, "-f", "raw", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


AREAS = (("engine", "nodes/lnet/"), ("selftest", "nodes/selftest/"), ("lnd", "nodes/lnd/"),
         ("daemon", "nodes/daemon/c"),
         ("daemon", "nodes/daemon/r"), ("zmq", "zmq/"))


def pyspy_summary(path: Path, top: int = 10) -> str:
    """Busy share, busy time by area (the innermost project frame of each sample: engine,
    lnd, daemon; else loop and library code), and the leaf frames with the most samples."""
    leaf: dict[str, int] = {}
    area: dict[str, int] = {}
    total = idle = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        k = int(n)
        total += k
        frames = stack.split(";")
        last = frames[-1]
        if "select (selectors.py" in last or "poll (selectors.py" in last or "(idle)" in last:
            idle += k
            continue
        leaf[last] = leaf.get(last, 0) + k
        name = next((a for f in reversed(frames) for a, key in AREAS if key in f), "loop")
        area[name] = area.get(name, 0) + k
    if not total:
        return "no samples"
    pct = {a: 100 * k / total for a, k in area.items()}
    lines = [f"busy {100 * (total - idle) / total:.0f}% of {total} samples; " + ", ".join(
        f"{a} {v:.0f}%" for a, v in sorted(pct.items(), key=lambda kv: -kv[1]))]
    for frame, k in sorted(leaf.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * k / total:5.1f}%  {frame}")
    return "\n".join(lines)


def profiled(nodes: Sequence[Any], out: Path, tag: str, run: Callable[[], object],
             seconds: int = 3, after: float = 0.0) -> None:
    """py-spy every node in ``nodes`` for ``seconds``, starting ``after`` seconds into
    ``run()`` (past its set-up; the run should last a little longer), then print and save
    each summary."""
    out.mkdir(parents=True, exist_ok=True)
    spies: dict[str, subprocess.Popen[bytes]] = {}

    def start() -> None:
        spies.update({n.name: pyspy(n.pid, seconds, out / f"{tag}-{n.name}.txt")
                      for n in nodes})

    timer = threading.Timer(after, start)
    timer.start()
    run()
    timer.join()
    for name, spy in spies.items():
        spy.wait(60)
        summary = pyspy_summary(out / f"{tag}-{name}.txt")
        (out / f"{tag}-{name}.summary").write_text(summary + "\n")
        print(f"# profile {tag} {name}: {summary}", flush=True)


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="runs per figure (min/median/max)")
    p.add_argument("--profile", metavar="DIR", help="py-spy both daemons during one LNet run, "
                   "raw profiles and summaries in DIR")
    return p
