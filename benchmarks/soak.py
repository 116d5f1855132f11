"""Chaos soak on Mininet: N minutes of faults and daemon kills under traffic on every path.

Issue 11 ("benchmarks/soak.py"): brings up ``topologies/mr-routers.yaml`` (Multi-Rail
client and server, two Multi-Rail routers between ``tcp`` and ``tcp1``) with the message trace
on (``testbed up``'s default), keeps PUT bursts running on every path the whole time
(c1 <-> s1 through the routers to each of the peer's NIs, c1 and s1 to each router directly)
and, at intervals drawn from ``--seed``, injects one chaos action with the testbed's fault
verbs: a link flap (carrier), packet loss, delay, a partition between a router and an end
node, or a router daemon ``kill`` that the supervisor restarts when the fault's duration ends.
Only routers are killed: the end nodes carry the workload's accounting (a killed client's
unfinished bursts have nobody left to report them), and a router crash is what routed
Multi-Rail must ride out. At the end it prints:

* ``sent/completed/failed`` by the traffic replies, and the senders' completion events by
  ``hstatus`` (message trace);
* ``lost_completions``: violations of "every send ends in exactly one completion event" found
  by ``testbed check`` over the whole log (messages of a killed daemon are excused by the
  check: what a dead process held is lost by design);
* ``crashes``: daemons that died without a kill fault, logged a traceback, or do not answer
  at the end;
* ``rss_growth`` per daemon from the end of the warm-up (10 % of the run, at most 60 s)
  to the end (a router restarted since is a new process: its RSS now), the same over the
  second half of the run only (``rss_growth_second_half``: a leak grows there as much as in
  the first half; warm-up does not), and each daemon's RSS at every minute
  (``rss_mb_each_minute``). What grew after minute 1 in the issue-11 runs (``--memprobe``:
  RSS split, glibc heap, pymalloc arenas, live objects by type each minute) was warm-up of
  bounded things, levelling off after 3-4 minutes: the ``lctl dk`` buffer filling (then
  10,000 Python tuples, ~3.5 MB live, which also pinned pymalloc arenas: 12 -> 20 MiB of
  arenas; now 1 MiB of packed records outside the allocator), glibc's heap keeping the free
  pages payload churn leaves (the daemon now trims it every 30 s), pymalloc's high-water
  mark, and code pages touched by new paths; no live object type kept growing;
* ``leftovers`` after ``down``: processes, interfaces, links, run directory
  (``testbed.clean.leftovers``), iptables rules and network namespaces on the host that were
  not there before.

Run as root: ``.venv/bin/python benchmarks/soak.py [--minutes 10] [--seed 1]``;
``--memprobe DIR`` makes it a diagnostic run (what grows in each daemon, see
``nodes/daemon/memprobe.py``; with tracemalloc, ``--memprobe-frames N``, the daemons run at
half speed and the soak's figures are not comparable), ``--keep-logs DIR`` keeps the run
directory's logs and traces (``testbed check`` them again) past ``down``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.base import TestbedError
from testbed.mininet import MininetTestbed

TOPOLOGY = Path(__file__).resolve().parents[1] / "topologies" / "mr-routers.yaml"
ENDS, ROUTERS = ("c1", "s1"), ("r1", "r2")
IFACES = {"c1": ("eth0", "eth1"), "s1": ("eth0", "eth1"), "r1": ("eth0", "eth1", "eth2", "eth3"),
          "r2": ("eth0", "eth1", "eth2", "eth3")}
ACTIONS = ("flap", "loss", "delay", "partition", "kill")


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def host_snapshot() -> tuple[set[str], set[str]]:
    """iptables rules (filter, nat, mangle, raw) and named network namespaces of the host."""
    rules: set[str] = set()
    for table in ("filter", "nat", "mangle", "raw"):
        out = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True,
                             check=False).stdout
        rules |= {f"{table}: {ln}" for ln in out.splitlines() if ln.startswith("-A")}
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                        check=False).stdout
    return rules, {ln.split()[0] for ln in ns.splitlines() if ln.strip()}


class Flow(threading.Thread):
    """PUT bursts from ``src`` to ``dst`` until stopped; totals of the replies."""

    def __init__(self, tb: MininetTestbed, src: str, dst: str, stop: threading.Event,
                 burst: int, size: int) -> None:
        super().__init__(daemon=True, name=f"flow-{src}-{dst}")
        self.tb, self.src, self.dst, self.stop_ev = tb, src, dst, stop
        self.burst, self.size = burst, size
        self.sent = self.completed = self.failed = self.refused = 0
        self.errors: collections.Counter[str] = collections.Counter()

    def run(self) -> None:
        node = self.tb.node(self.src)
        while not self.stop_ev.is_set():
            try:
                reply = node.put(self.dst, count=self.burst, size=self.size, timeout=120.0)
            except TestbedError as exc:
                self.refused += 1
                self.errors[f"request: {str(exc)[:60]}"] += 1
                self.stop_ev.wait(1.0)
                continue
            if not reply.get("ok"):
                self.refused += 1
                self.errors[f"refused: {str(reply.get('error'))[:60]}"] += 1
                self.stop_ev.wait(1.0)
                continue
            self.sent += int(reply["sent"])
            self.completed += int(reply["completed"])
            self.failed += int(reply["failed"])
            self.errors.update({k: int(v) for k, v in (reply.get("errors") or {}).items()})


def chaos_spec(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """One chaos action drawn from ``rng``: (fault kind, fault parameters)."""
    action = rng.choice(ACTIONS)
    dur = round(rng.uniform(2.0, 12.0), 1)
    node = rng.choice([*ENDS, *ROUTERS])
    iface = rng.choice(IFACES[node])
    if action == "flap":
        return "flap", {"node": node, "iface": iface, "down": round(rng.uniform(0.5, 4.0), 1),
                        "up": round(rng.uniform(0.5, 4.0), 1), "count": rng.randint(1, 3)}
    if action == "loss":
        return "loss", {"node": node, "iface": iface, "rate": round(rng.uniform(0.02, 0.3), 2),
                        "duration": dur, "seed": rng.randrange(1 << 30)}
    if action == "delay":
        return "delay", {"node": node, "iface": iface, "delay": rng.choice([5, 20, 50, 200]),
                         "jitter": rng.choice([0, 5, 20]), "duration": dur,
                         "seed": rng.randrange(1 << 30)}
    if action == "partition":
        return "partition", {"a": [rng.choice(ROUTERS)], "b": [rng.choice(ENDS)],
                             "oneway": rng.random() < 0.3, "duration": dur}
    return "kill", {"node": rng.choice(ROUTERS), "duration": dur}


def daemon_pids(tb: MininetTestbed) -> dict[str, int]:
    return {n: int(info["pid"]) for n, info in tb.status()["nodes"].items()}


def growth(then: dict[str, tuple[int, int]], pids: dict[str, int],
           now: dict[str, int]) -> dict[str, str]:
    """Per daemon, RSS growth from ``then`` (node -> (pid, kB)) to ``now`` (node -> kB); a
    daemon restarted since is a new process: its RSS now, no growth."""
    out: dict[str, str] = {}
    for n, pid in sorted(pids.items()):
        b_pid, b_kb = then.get(n, (pid, now[n]))
        out[n] = (f"{100.0 * (now[n] - b_kb) / b_kb:+.1f}% ({b_kb // 1024}->"
                  f"{now[n] // 1024} MB)") if b_pid == pid and b_kb else \
            f"restarted since ({now[n] // 1024} MB now)"
    return out


def _answers(tb: MininetTestbed, node: str) -> bool:
    """``lnetctl net show`` on ``node`` succeeds (a dead daemon is a crash, not the end of
    the soak's report)."""
    try:
        return tb.node(node).lnetctl("net", "show", timeout=20.0).rc == 0
    except TestbedError:
        return False


def traced_completions(rdir: Path) -> tuple[collections.Counter[str], int, int]:
    """Senders' completion events by hstatus (not forwarded), first sends, completes."""
    by: collections.Counter[str] = collections.Counter()
    sends = completes = 0
    for path in sorted((rdir / "nodes").glob("*.trace.jsonl")):
        with path.open() as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("forwarded") or ev.get("type") != "PUT":
                    continue
                if ev.get("event") == "send" and ev.get("attempt") == 0:
                    sends += 1
                elif ev.get("event") == "complete":
                    completes += 1
                    by[f"{ev.get('hstatus')}:{ev.get('status')}"] += 1
    return by, sends, completes


def run(args: argparse.Namespace) -> dict[str, Any]:
    from testbed.clean import leftovers
    from testbed.observe.check import check_rundir
    from testbed.observe.eventlog import flush_writers

    rng = random.Random(args.seed)
    rules0, ns0 = host_snapshot()
    name = f"soak{uuid.uuid4().hex[:5]}"
    tb = MininetTestbed.up(args.topology, name=name, trace_messages=True)
    rdir = tb.rundir
    out: dict[str, Any] = {"name": name, "seed": args.seed, "minutes": args.minutes}
    stop = threading.Event()
    flows: list[Flow] = []
    try:
        nids = {n: tb.node(n).nids for n in tb.nodes}
        for a, b in (("c1", "s1"), ("s1", "c1")):
            flows += [Flow(tb, a, nid, stop, args.burst, args.size) for nid in nids[b]]
        for end in ENDS:
            for r in ROUTERS:
                near = [nid for nid in nids[r] if nid.endswith("@tcp") == (end == "c1")]
                flows.append(Flow(tb, end, near[0], stop, args.burst, args.size))
        for f in flows:
            f.start()
        t0 = time.monotonic()
        end_t = t0 + args.minutes * 60.0
        warm = t0 + min(60.0, args.minutes * 6.0)
        base: dict[str, tuple[int, int]] = {}  # node -> (pid, rss kB) at warm-up's end
        mid: dict[str, tuple[int, int]] = {}  # the same at half time
        kills: collections.Counter[str] = collections.Counter()
        actions: collections.Counter[str] = collections.Counter()
        add_errors: list[str] = []
        curve: dict[str, list[int]] = collections.defaultdict(list)  # MB at each minute
        next_sample = t0 + 60.0
        while time.monotonic() < end_t:
            time.sleep(min(rng.uniform(3.0, 10.0), max(0.0, end_t - time.monotonic())))
            if not base and time.monotonic() >= warm:
                base = {n: (p, rss_kb(p) or 0) for n, p in daemon_pids(tb).items()}
            if not mid and time.monotonic() >= t0 + args.minutes * 30.0:
                mid = {n: (p, rss_kb(p) or 0) for n, p in daemon_pids(tb).items()}
            if time.monotonic() >= next_sample:
                next_sample += 60.0
                for n, p in daemon_pids(tb).items():
                    curve[n].append((rss_kb(p) or 0) // 1024)
            if time.monotonic() >= end_t - 15.0:
                continue  # the last faults revert before the run ends
            kind, spec = chaos_spec(rng)
            try:
                tb.fault.add(kind, **spec)
            except TestbedError as exc:
                add_errors.append(f"{kind}: {exc}")
                continue
            actions[kind] += 1
            if kind == "kill":
                kills[spec["node"]] += 1
        stop.set()
        for f in flows:
            f.join(180.0)
        tb.fault.clear()
        time.sleep(2.0)
        pids = daemon_pids(tb)
        now = {n: rss_kb(pid) or 0 for n, pid in pids.items()}
        rss, rss_half = growth(base, pids, now), growth(mid, pids, now)
        answering = {n: _answers(tb, n) for n in pids}
        flush_writers(rdir)
        events = [json.loads(ln) for ln in (rdir / "events.jsonl").read_text().splitlines()
                  if ln.strip()]
        died = collections.Counter(e["node"] for e in events if e["kind"] == "node_died")
        restarted = collections.Counter(e["node"] for e in events
                                        if e["kind"] == "node_restarted")
        tracebacks = [p.stem for p in (rdir / "nodes").glob("*.log")
                      if "Traceback (most recent call last)" in p.read_text(errors="replace")]
        crashes = sum(max(0, died[n] - kills[n]) for n in pids) + len(tracebacks) \
            + sum(1 for ok in answering.values() if not ok)
        by_hstatus, first_sends, completes = traced_completions(rdir)
        result = check_rundir(rdir)
        if args.check_report:
            Path(args.check_report).write_text(result.render(max_violations=10))
        if args.keep_logs:  # the run directory goes with `down`: keep the logs for a look
            shutil.copytree(rdir, args.keep_logs, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("*.sock", "*.ipc", "ctl*"))
        comp = result.invariants["completion"]
        out.update(
            actions=dict(actions), fault_add_errors=add_errors,
            sent=sum(f.sent for f in flows), completed=sum(f.completed for f in flows),
            failed=sum(f.failed for f in flows), refused_bursts=sum(f.refused for f in flows),
            errors=dict(sum((f.errors for f in flows), collections.Counter())),
            traced_first_sends=first_sends, traced_completions=completes,
            completions_by_hstatus=dict(by_hstatus),
            lost_completions=comp.count, completion_checked=comp.checked,
            check_ok=result.ok,
            check_violations={k: v.count for k, v in result.invariants.items() if v.count},
            kills=dict(kills), node_died=dict(died), node_restarted=dict(restarted),
            tracebacks=tracebacks, crashes=crashes, rss_growth=rss,
            rss_growth_second_half=rss_half,
            rss_mb_each_minute=dict(curve),
            per_flow={f"{f.src}->{f.dst}": (f.sent, f.completed, f.failed) for f in flows})
    finally:
        stop.set()
        tb.down()
    time.sleep(3.0)
    rules1, ns1 = host_snapshot()
    left = leftovers(name) + [f"iptables {r}" for r in sorted(rules1 - rules0) if name in r] \
        + [f"netns {n}" for n in sorted(ns1 - ns0) if name in n]
    out["leftovers"] = left
    out["host_rules_added_meanwhile"] = len(rules1 - rules0)  # other users' testbeds too
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--topology", default=str(TOPOLOGY))
    ap.add_argument("--burst", type=int, default=16, help="PUTs per burst (one flow)")
    ap.add_argument("--size", type=int, default=4096, help="bytes per PUT")
    ap.add_argument("--check-report", help="write `testbed check`'s report here")
    ap.add_argument("--keep-logs", metavar="DIR",
                    help="copy the run directory's logs and traces here before `down`")
    ap.add_argument("--memprobe", metavar="DIR",
                    help="diagnostic run: daemons write what grows to DIR/<node>.memprobe.txt "
                    "(tracemalloc; slows them: the figures of such a run are not the soak's)")
    ap.add_argument("--memprobe-period", type=float, default=60.0, metavar="SECONDS")
    ap.add_argument("--memprobe-frames", type=int, default=4, metavar="N",
                    help="tracemalloc frames (0: no tracemalloc, RSS figures only)")
    args = ap.parse_args()
    if args.memprobe:
        Path(args.memprobe).mkdir(parents=True, exist_ok=True)
        os.environ["LNET_MEMPROBE"] = str(Path(args.memprobe).resolve())
        os.environ["LNET_MEMPROBE_PERIOD"] = str(args.memprobe_period)
        os.environ["LNET_MEMPROBE_FRAMES"] = str(args.memprobe_frames)
    if args.minutes <= 0 or args.burst < 1 or not 0 <= args.size <= 1 << 20:
        ap.error("--minutes > 0, --burst >= 1, 0 <= --size <= 1048576")
    res = run(args)
    for key, value in res.items():
        print(f"{key}={json.dumps(value, sort_keys=True)}")
    bad = res.get("lost_completions", 1) or res.get("crashes", 1) or res["leftovers"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
