"""What ``testbed up``'s message trace costs: tracing on against off, same run, both backends.

Issue 31 item 5: "``up`` can turn tracing on by default at a measured cost". Two identical
two-node testbeds (one rail, client c1, server s1) are up at once per backend, both with the
recorder at its default period, one with the message trace (what ``up`` does by default) and
one without (``up --no-trace``):

* ``sim``: ``testbed up --backend sim --speed 0`` (the server process, which keeps the trace in
  its event log; its clock moves only in the verbs, so wall time is what simulating costs):
  the 8-byte PUT burst's messages per wall second and the server's CPU microseconds per
  message; ``lst brw write size=1M`` at concurrency 64 over ``--sim-lst-seconds`` virtual
  seconds: MiB moved per wall second and the CPU microseconds per MiB (the virtual MB/s lst
  prints is the same either way: the trace costs wall time);
* ``mininet`` (root): the same burst between the daemons (messages/s, CPU µs per message of
  c1 and s1) and ``lst brw write size=1M`` for ``--lst-seconds`` (MB/s as ``lst stat --bw``
  prints it, CPU µs per MiB of both daemons), as ``observe_cost.py`` measures them.

Each run measures both testbeds in turn, the order alternating (load drifts on this shared
machine fall on both alike). Printed: min/median/max per testbed and ``on_of_off``, the ratio
of medians (rates: on/off, higher is better; CPU: on/off, lower is better). Run as root for
the Mininet part (without root, or with ``--sim-only``, the simulator alone):

    .venv/bin/python benchmarks/trace_cost.py [--runs 5] [--small 20000] [--profile DIR]

``--profile DIR``: py-spy both daemons of a traced Mininet testbed during one long 8-byte burst
(``lnd_bench.profiled``; ``LND_BENCH_NATIVE=1`` for the compiled modules' C frames).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import testbed as tbapi  # noqa: E402 (before benchmarks/ is on the path: its faults.py)

sys.path.insert(1, str(ROOT / "benchmarks"))
import lnd_bench as lb  # noqa: E402
import observe_cost as oc  # noqa: E402

CONFIGS = {"off": False, "on": True}


class SimNode:
    """A sim server's node as ``lnd_bench`` drives a Mininet one: ``lst`` through the node's
    ``lst`` verb (virtual time), the server's pid for its CPU."""

    def __init__(self, tb: Any, name: str) -> None:
        self.handle = tb.node(name)
        self.nids = self.handle.nids
        self.pid = int(tb.status()["supervisor_pid"])

    def put(self, dst: str, **kw: Any) -> dict[str, Any]:
        return dict(self.handle.put(dst, **kw))

    def exec(self, argv: list[str], timeout: float = 600.0) -> Any:
        env, prog, *args = argv[1:]  # ["env", "LST_SESSION=k", "lst", ...]
        assert prog == "lst", argv
        return self.handle.verb("lst", [env, *args], timeout=timeout)


@contextlib.contextmanager
def sim_testbed(prefix: str, trace: bool) -> Iterator[Any]:
    """A two-node sim server testbed at speed 0, always taken down again."""
    name = f"{prefix}{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.yaml"
        path.write_text(lb.topology_yaml(name, 1))
        tb = tbapi.up(path, backend="sim", detach=True, name=name, speed="0",
                      record_period=0.1, trace_messages=trace)
    try:
        yield tb
    finally:
        tb.down()


def sim_burst(tb: Any, count: int) -> tuple[float, float, float]:
    """(messages/s, CPU µs per message of the server process, 0)."""
    c1 = SimNode(tb, "c1")
    secs, cpu = lb.with_cpu((c1,), lambda: lb.burst_load(c1, lb.server_nid(0), "write", 8,
                                                         count))
    return count / secs, cpu[0] / count * 1e6, 0.0


def sim_lst(tb: Any, seconds: float) -> tuple[float, float, float]:
    """(MiB moved per wall second, CPU µs per MiB of the server process, the virtual MB/s
    ``lst stat --bw`` printed) of ``lst brw write size=1M`` at concurrency 64 over a
    ``stat`` window of ``seconds`` virtual seconds (lb.lst_stat's sequence, on the verb)."""
    c1 = SimNode(tb, "c1")
    key = f"LST_SESSION={os.getpid()}"

    def lst(*argv: str) -> str:
        res = c1.handle.verb("lst", [key, *argv], timeout=600)
        if res.rc != 0:
            raise RuntimeError(f"lst {' '.join(argv)}: rc {res.rc}: {res.out}{res.err}")
        return str(res.out)

    lst("new_session", "--timeout", "600", "bench")
    try:
        lst("add_group", "clients", c1.nids[0])
        lst("add_group", "servers", lb.server_nid(0))
        lst("add_batch", "b")
        lst("add_test", "--batch", "b", "--concurrency", "64", "--from", "clients", "--to",
            "servers", "brw", "write", f"size={lb.MIB}")
        lst("run", "b")
        lst("stat", "--bw", "--mbs", "--count", "1", "--delay", "1", "servers")  # warm-up
        t0, cpu0 = time.perf_counter(), lb.cpu_seconds(c1.pid)
        out = lst("stat", "--bw", "--mbs", "--count", "1", "--delay", f"{seconds:g}",
                  "servers")
        wall, cpu = time.perf_counter() - t0, lb.cpu_seconds(c1.pid) - cpu0
        lst("stop", "b")
    finally:
        lst("end_session")
    line = next((x for x in out.splitlines() if x.startswith("[R] Avg: ")), None)
    if line is None:
        raise RuntimeError(f"lst stat printed no [R] line: {out!r}")
    mbps = float(line[len("[R] Avg: "):].split()[0])
    mib = mbps * 1e6 / lb.MIB * seconds
    return mib / wall, cpu / mib * 1e6, mbps


def run_backend(label: str, up: Any, loads: dict[str, Any], runs: int) -> None:
    res: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    with contextlib.ExitStack() as stack:
        tbs = {cfg: stack.enter_context(up(f"tc{label[:1]}{cfg[:2]}", trace))
               for cfg, trace in CONFIGS.items()}
        for tb in tbs.values():  # discovery, connections up
            tb.node("c1").put(lb.server_nid(0), count=64, size=lb.MIB)
        names = list(tbs)
        for run in range(runs):
            for cfg in (names if run % 2 == 0 else names[::-1]):
                for load, fn in loads.items():
                    res.setdefault((cfg, load), []).append(fn(tbs[cfg]))
    for load in loads:
        on, off = res[("on", load)], res[("off", load)]
        for cfg, rows in (("off", off), ("on", on)):
            print(f"{label} {load} trace {cfg}: rate={lb.fmt([r[0] for r in rows], nd=0)} "
                  f"cpu_us={lb.fmt([r[1] for r in rows], nd=1)}"
                  + (f" cpu_us_s1={lb.fmt([r[2] for r in rows], nd=1)}"
                     if label == "mininet" else ""), flush=True)
        rate = lb.ratio([r[0] for r in on], [r[0] for r in off])
        cpu = lb.ratio([r[1] for r in on], [r[1] for r in off])
        print(f"{label} {load} on_of_off: rate={rate:.3f} cpu={cpu:.3f}", flush=True)


def main() -> int:
    p = lb.parser(__doc__)
    p.set_defaults(runs=5)
    p.add_argument("--small", type=int, default=20000, help="8-byte PUTs per burst")
    p.add_argument("--lst-seconds", type=float, default=3.0, help="Mininet lst stat window")
    p.add_argument("--sim-lst-seconds", type=float, default=2.0,
                   help="sim lst stat window (virtual seconds)")
    p.add_argument("--sim-only", action="store_true", help="skip the Mininet part")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("trace_cost: terminated"))  # down
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    run_backend("sim", sim_testbed, {"8B": lambda tb: sim_burst(tb, args.small),
                                     "lst": lambda tb: sim_lst(tb, args.sim_lst_seconds)},
                args.runs)
    if not args.sim_only and os.geteuid() == 0:
        def mininet_up(prefix: str, trace: bool) -> Any:
            return lb.testbed(1, prefix, record_period=0.1, trace_messages=trace)

        run_backend("mininet", mininet_up,
                    {"8B": lambda tb: oc.measure(tb, 8, args.small),
                     "lst": lambda tb: oc.measure_lst(tb, args.lst_seconds)}, args.runs)
        if args.profile:  # where the traced daemons' time goes: one long 8-byte burst
            with mininet_up("tcpr", True) as tb:
                c1, s1 = tb.node("c1"), tb.node("s1")
                c1.put(lb.server_nid(0), count=64, size=8)
                lb.profiled((c1, s1), Path(args.profile), "trace-8B", lambda: lb.burst_load(
                    c1, lb.server_nid(0), "write", 8, args.small * 3), seconds=3, after=0.5)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
