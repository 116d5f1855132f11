"""The ``sim`` backend: every node's engine in this process, on the in-memory fabric.

Theory of operation (ARCHITECTURE: "sim: every engine in one process, in-memory fabric, virtual
clock"): ``SimTestbed.up`` reads the same topology YAML (``load_topology``), builds one
``SimRuntime`` per node and configures it with the same lnetctl verbs the Mininet supervisor
sends (lnet configure, net add per interface, set per tunable, peer add). ``SimRuntime`` offers
the interface of ``nodes.daemon.runtime.NodeRuntime`` (``engine``, ``now``, ``execute``,
``wait_final``, ``net_add``, ``net_del``, ``unconfigure``), so the daemon's command modules
(``lnetctl_cmd``, ``lctl_cmd``) run unchanged; their coroutines never suspend here, because
``wait_final`` advances *virtual* time until the MD completes instead of awaiting I/O.
``SimTestbed``/``SimNodeHandle`` are the Python API's ``Testbed``/``NodeHandle`` with the same
methods (``node().lnetctl/lctl/put``, ``link``, ``down``), plus ``run(seconds)`` and
``events()`` (the events.jsonl schema ``{"t", "kind", "node", ...}`` with virtual ``t``).
Nothing here is random except through seeds: node engines get ``Random(f"{seed}:{node}")``
and the fabric ``Random(seed)``, so a seed replays its event log.

What the daemon's drivers do around the engine is done here too: ``link`` is the link
watcher (``nodes/daemon/linkwatch.py``, ``ksocknal_handle_link_state_change``): it sets the
local NI's fatal state with ``engine.ni_set_fatal`` and the fabric fails transmissions over
the dead interface with -ENETDOWN / REMOTE_DROPPED as the socklnd does. Cross-segment sends
are routed by the sending host as on Mininet (``testbed/fabric.py``). What the sim cannot
do -- wire faults, processes, namespaces (``exec``) -- raises ``TestbedError``; suites mark
such tests ``@pytest.mark.mininet_only`` and the plugin skips them on ``--lnet-backend=sim``.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, TextIO

import yaml

from nodes.daemon import lctl_cmd, lnetctl_cmd, lnetctl_config
from nodes.daemon.control import MAX_INFLIGHT, burst_args
from nodes.daemon.runtime import SRPC_BULK_DATA, SRPC_RDMA_PORTAL
from nodes.lnet.actions import Action, MDEvent
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import EINVAL, ENOENT, LNetConfigError
from nodes.lnet.nid import NID, Net, nid_from_ip
from testbed import sh
from testbed.api import NodeHandle, Testbed, TestbedError, _split
from testbed.fabric import VIRTUAL_TIME_LIMIT
from testbed.nodeconfig import config_verbs
from testbed.simfabric import SimFabric
from testbed.topology import NodePlan, Plan, load_topology


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Drive a command coroutine that never suspends (all its waits are virtual)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise TestbedError("sim: a command waited on real I/O, which the sim backend cannot do")


class SimRuntime:
    """One simulated node: what ``NodeRuntime`` is to a daemon, on the fabric's clock."""

    def __init__(self, sim: SimTestbed, plan: NodePlan, seed: int) -> None:
        self.sim = sim
        self.name = plan.name
        self.plan = plan
        rng = random.Random(f"{seed}:{plan.name}")
        self.incarnation = rng.getrandbits(63) | 1
        self.engine = LNetEngine(rng=rng, incarnation=self.incarnation)
        self.engine.attach_me(SRPC_RDMA_PORTAL, 0, 0xFFFF_FFFF_FFFF_FFFF,
                              data=SRPC_BULK_DATA, sink=True)
        sim.fabric.add(self.name, self.engine)
        # per-NI socklnd sock_timeout (``net set --lnd-timeout``); absent = LNet's lnd_timeout
        self.sock_timeout: dict[NID, int] = {}

    def now(self) -> float:
        return self.sim.fabric.now

    def execute(self, actions: list[Action]) -> None:
        self.sim.fabric.apply(self.name, actions)

    def run(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return self.sim.fabric.call(self.name, fn, *args, **kw)

    def start(self, start: Callable[[], tuple[int, list[Action]]]) -> tuple[int, int]:
        """Start an operation; returns (MD handle, index of its first event)."""
        mark = len(self.sim.fabric.events[self.name])
        handle, actions = start()
        self.execute(actions)
        return handle, mark

    def final(self, handle: int, mark: int) -> list[MDEvent] | None:
        evs = [e for e in self.sim.fabric.events[self.name][mark:] if e.handle == handle]
        return evs if evs and evs[-1].unlinked else None

    async def wait_final(self, start: Callable[[], tuple[int, list[Action]]]) -> list[MDEvent]:
        """Start an operation and advance virtual time until its MD is unlinked."""
        handle, mark = self.start(start)
        while (evs := self.final(handle, mark)) is None:
            if not self.sim.fabric.step():
                raise TestbedError(f"sim: node {self.name}: MD {handle} can never complete")
        return evs

    async def net_add(self, net: Net, interface: str, **kw: Any) -> NID:
        iface = next((i for i in self.plan.interfaces if i.name == interface), None)
        if iface is None:
            raise LNetConfigError(-EINVAL, f"cannot add network: interface {interface} "
                                           "has no IPv4 address")
        nid = nid_from_ip(str(iface.ip), net)
        self.engine.net_add(net, interface, nid, **kw)
        self.sock_timeout.pop(nid, None)
        self.sync_lnd_timeouts()
        self.sim.fabric.refresh()
        if nid in self.sim.fabric.down:  # the link watcher's first pass: carrier is down
            self.execute(self.engine.ni_set_fatal(nid, True, self.now()))
        return nid

    async def net_del(self, net: Net, interface: str | None) -> None:
        self.engine.net_del(net, interface)
        self.sim.fabric.refresh()

    def sync_lnd_timeouts(self) -> None:
        """As ``NodeRuntime._sync_lnd_timeouts`` (hlth-lnd-tx-timeout-from-lnet): an NI without
        its own ``--lnd-timeout`` follows LNet's derived lnd_timeout (``ksocknal_timeout()``)."""
        for ni in self.engine.local_nis():
            if not ni.is_lo and ni.nid not in self.sock_timeout:
                ni.lnd_timeout = self.engine.tunables.lnd_timeout

    def set_lnd_timeout(self, net: Net, seconds: int) -> int:
        """``NodeRuntime.set_lnd_timeout`` (``net set --lnd-timeout``; 0: back to LNet's);
        returns how many NIs changed."""
        count = 0
        for ni in self.engine.local_nis():
            if ni.nid.net == net:
                if seconds:
                    self.sock_timeout[ni.nid] = seconds
                else:
                    self.sock_timeout.pop(ni.nid, None)
                ni.lnd_timeout = seconds or self.engine.tunables.lnd_timeout
                count += 1
        return count

    def lnd_link(self, nid: NID, up: bool) -> bool:
        """``NodeRuntime.lnd_link`` (hlth-dbg-sim-ni-down/up): a link event reported by the
        LND, the interface untouched; until a real link change the NI's sends fail with
        -ENETDOWN (``SimFabric.lnd_down``). Returns whether the link state changed."""
        ni = self.engine.ni_by_nid(nid)
        if ni is None or ni.is_lo:
            raise LNetConfigError(-ENOENT, f"{nid} is not a local NI")
        (self.sim.fabric.lnd_down.discard if up else self.sim.fabric.lnd_down.add)(nid)
        if ni.fatal_error == (not up):  # the link watcher reports changes only
            return False
        self.execute(self.engine.ni_set_fatal(nid, not up, self.now(), "simulated"))
        return True

    async def unconfigure(self) -> None:
        self.engine.unconfigure()
        self.sim.fabric.refresh()


class SimNodeHandle(NodeHandle):
    """``NodeHandle`` of a simulated node: verbs run in-process on the virtual clock."""

    def __init__(self, testbed: SimTestbed, rt: SimRuntime) -> None:
        self.testbed = testbed
        self.name = rt.name
        self.rt = rt
        self.pid = self.host_pid = os.getpid()
        self.sock = ""
        self.nids = list(rt.plan.nids)

    def __repr__(self) -> str:
        return f"<SimNodeHandle {self.testbed.name}/{self.name}>"

    def verb(self, cmd: str, argv: Iterable[str], timeout: float = 60.0) -> sh.Completed:
        module = {"lnetctl": lnetctl_cmd, "lctl": lctl_cmd}.get(cmd)
        if module is None:
            raise TestbedError(f"node {self.name}: unknown verb {cmd!r}")
        with self.testbed.lock:
            self.testbed._check_up()
            rc, out, err = run_sync(module.run(self.rt, list(argv)))  # type: ignore[arg-type]
            self.rt.sync_lnd_timeouts()  # `set transaction_timeout|retry_count` moves them
            self.testbed.fabric.flush(self.name)  # health notices of direct engine calls
        return sh.Completed(rc, out, err)

    def lnetctl(self, *argv: str, timeout: float = 60.0) -> sh.Completed:
        return self.verb("lnetctl", _split(argv), timeout)

    def lctl(self, *argv: str, timeout: float = 60.0) -> sh.Completed:
        return self.verb("lctl", _split(argv), timeout)

    def exec(self, argv: Any, *, input: str | None = None, timeout: float = 60.0) -> Any:
        raise TestbedError("exec is not available on the sim backend (no namespaces)")

    def log(self) -> str:
        """``NodeHandle.log``: this node's engine console lines, at virtual times (the fabric
        keeps no level)."""
        return "".join(f"{t:.6f} {name} lnet: {text}\n"
                       for t, name, text in self.testbed.fabric.log if name == self.name)

    def put(self, dst: str, count: int = 1, size: int = 0, timeout: float = 120.0,
            src: str | None = None, numa: int | None = None) -> dict[str, Any]:
        """A burst of PUTs to the bulk portal, 64 in flight, like the daemon's ``put`` verb.

        The whole burst runs under the testbed's lock, so a ``Traffic`` thread and the test's
        own verbs interleave between bursts, never inside the fabric."""
        with self.testbed.lock:
            return self._burst("put", dst, count, size, src, numa)

    def get(self, dst: str, count: int = 1, size: int = 0, timeout: float = 120.0,
            src: str | None = None, numa: int | None = None) -> dict[str, Any]:
        """A burst of GETs of ``size`` bytes from the bulk portal, like the daemon's ``get``
        verb (each succeeds on its REPLY)."""
        with self.testbed.lock:
            return self._burst("get", dst, count, size, src, numa)

    def _burst(self, op: str, dst: str, count: int, size: int, src: str | None,
               numa: int | None = None) -> dict[str, Any]:
        self.testbed._check_up()
        parsed = burst_args({"dst": dst, "count": count, "size": size, "src": src,
                             "numa": numa})
        if isinstance(parsed, str):
            return {"ok": False, "error": parsed}
        dnid, count, size, snid, numa = parsed
        rt, fab, want = self.rt, self.testbed.fabric, "ACK" if op == "put" else "REPLY"
        payload = bytes(size) if op == "put" else b""

        def start() -> tuple[int, list[Action]]:
            if op == "put":
                return rt.engine.put(fab.now, dnid, payload=payload, portal=SRPC_RDMA_PORTAL,
                                     src=snid, numa=numa)
            return rt.engine.get(fab.now, dnid, length=size, portal=SRPC_RDMA_PORTAL,
                                 src=snid, numa=numa)

        events = fab.events[self.name]
        errors: dict[str, int] = {}
        inflight: set[int] = set()
        started = done = 0
        seen = len(events)
        while done < count:
            while started < count and len(inflight) < MAX_INFLIGHT:
                handle, _ = rt.start(start)
                inflight.add(handle)
                started += 1
            for ev in events[seen:]:
                if ev.unlinked and ev.handle in inflight:
                    inflight.discard(ev.handle)
                    done += 1
                    if ev.kind != want or ev.status != 0:
                        errors[f"{ev.kind}:{ev.status}"] = errors.get(
                            f"{ev.kind}:{ev.status}", 0) + 1
            seen = len(events)
            refill = started < count and len(inflight) < MAX_INFLIGHT
            if done < count and not refill and not fab.step():
                raise TestbedError(f"sim: node {self.name}: {op.upper()}s can never complete")
        failed = sum(errors.values())
        return {"ok": True, "sent": count, "completed": count - failed, "failed": failed,
                "errors": errors}


class SimTestbed(Testbed):
    """A testbed whose nodes are engines in this process (no supervisor, no namespaces)."""

    def __init__(self, plan: Plan, *, seed: int = 0, latency: float = 0.001,
                 jitter: float = 0.0) -> None:
        super().__init__(plan.name, Path("/nonexistent-sim"), Path("/nonexistent-sim"))
        self.plan = plan
        self.seed = seed
        self.fabric = SimFabric(latency, seed=seed, jitter=jitter)
        self.lock = threading.RLock()  # the fabric is single-threaded; Traffic threads share it
        self.runtimes = {n.name: SimRuntime(self, n, seed) for n in plan.nodes}
        for n in plan.nodes:  # L2 segments, and which host routes each interface's traffic
            for i in n.interfaces:
                self.fabric.segment[NID.parse(i.nid)] = i.segment
                self.fabric.host[NID.parse(i.nid)] = n.name
        self.is_up = True
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __repr__(self) -> str:
        return f"<SimTestbed {self.name} seed={self.seed} t={self.fabric.now:g}>"

    @classmethod
    def up(cls, topology_path: str | os.PathLike[str] | None = None,  # type: ignore[override]
           name: str | None = None, progress: Any = None, *, root: Any = None,
           seed: int = 0, latency: float = 0.001, jitter: float = 0.0) -> SimTestbed:
        """Validate the topology and configure every node through its lnetctl verbs.

        Raises:
            TopologyError: the topology is invalid.
            TestbedError: a configuration verb failed (names node, verb and output).
        """
        tb = cls(load_topology(topology_path, name=name), seed=seed, latency=latency,
                 jitter=jitter)
        total = len(tb.plan.nodes)
        for step, node in enumerate(tb.plan.nodes, 1):
            if progress is not None:
                progress(step, total, f"configuring {node.name}")
            tb._configure(node)
        return tb

    def _configure(self, node: NodePlan) -> None:
        """Contract B of the supervisor: the LNet module parameters of the topology's
        ``global:`` block first (the daemon's ``--lnet-param``, "modprobe lnet", spec §0),
        then the same verb list (testbed/nodeconfig.py)."""
        try:
            lnetctl_config.apply_module_params(self.runtimes[node.name],  # type: ignore[arg-type]
                                               list(node.module_params))
        except LNetConfigError as e:
            raise TestbedError(f"node {node.name}: bad LNet module parameter: {e.descr}") from e
        verbs = config_verbs(self.plan, node, self._lnet_dir())
        handle = self.node(node.name)
        for verb in verbs:
            res = handle.verb("lnetctl", verb)
            if res.rc != 0:
                raise TestbedError(f"node {node.name}: lnetctl {' '.join(verb)} failed with rc "
                                   f"{res.rc}: {' '.join((res.out + res.err).split())}")

    def _lnet_dir(self) -> Path:
        """Where raw ``lnet:`` blocks are written for import; removed by ``down``."""
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"lnet-sim-{self.name}-")
        return Path(self._tmp.name)

    def _check_up(self) -> None:
        if not self.is_up:
            raise TestbedError(f"sim testbed {self.name} is down")

    # -- the Testbed API -----------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.fabric.now

    @property
    def event_log(self) -> list[dict[str, Any]]:
        """The fabric's log in its first schema (``event`` for the kind, an MD event's type
        as ``kind``), kept for older unit tests; new code reads ``events()``."""
        legacy = []
        for e in self.fabric.event_log:
            old = {k: v for k, v in e.items() if k not in ("kind", "type")}
            old["event"] = e["kind"]
            if e["kind"] == "md":
                old["kind"] = e["type"]
            elif "type" in e:
                old["type"] = e["type"]
            legacy.append(old)
        return legacy

    def run(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass (timers, recovery, delayed messages)."""
        with self.lock:
            self.fabric.run_until(min(self.fabric.now + seconds, VIRTUAL_TIME_LIMIT))

    def advance(self, seconds: float) -> None:
        """``Testbed.advance``: on the sim, ``seconds`` of *virtual* time (``run``)."""
        self.run(seconds)

    def down(self, timeout: float = 0.0) -> list[str]:
        self.is_up = False
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return []

    def status(self) -> dict[str, Any]:
        nodes = {}
        for name, rt in self.runtimes.items():
            ifaces = {i.name: {"nid": i.nid, "segment": i.segment,
                               "state": "down" if NID.parse(i.nid) in self.fabric.down else "up",
                               "kernel": "sim"} for i in rt.plan.interfaces}
            nodes[name] = {"pid": os.getpid(), "alive": self.is_up, "interfaces": ifaces,
                           "nids": [str(ni.nid) for ni in rt.engine.local_nis()]}
        return {"ok": True, "phase": "up" if self.is_up else "down", "backend": "sim",
                "topology": self.plan.source, "nodes": nodes, "now": self.fabric.now}

    def node(self, name: str) -> SimNodeHandle:
        rt = self.runtimes.get(name)
        if rt is None:
            raise TestbedError(f"testbed {self.name} has no node {name!r} "
                               f"(nodes: {', '.join(self.runtimes)})")
        return SimNodeHandle(self, rt)

    @property
    def nodes(self) -> list[str]:
        return list(self.runtimes)

    def link(self, node: str, iface: str, state: str) -> None:
        """Set interface ``iface`` of ``node`` up or down (a ``link_up``/``link_down`` event)."""
        with self.lock:
            self._link(node, iface, state)

    def _link(self, node: str, iface: str, state: str) -> None:
        self._check_up()
        plan = self.node(node).rt.plan
        match = next((i for i in plan.interfaces if i.name == iface), None)
        if match is None:
            raise TestbedError(f"node {node} has no interface {iface!r} "
                               f"(interfaces: {', '.join(i.name for i in plan.interfaces)})")
        if state not in ("up", "down"):
            raise TestbedError(f"link state must be up or down, not {state!r}")
        nid, up = NID.parse(match.nid), state == "up"
        self.fabric.lnd_down.discard(nid)  # a real link change ends a simulated one
        self.fabric.set_link(nid, up, iface=iface)
        rt = self.runtimes[node]
        if rt.engine.ni_by_nid(nid) is not None:  # linkwatch -> ni_set_fatal (hlt-005/010)
            rt.execute(rt.engine.ni_set_fatal(nid, not up, self.fabric.now))

    def events(self) -> list[dict[str, Any]]:
        """The event log, schema of the Mininet events.jsonl: ``{"t", "kind", "node", ...}``."""
        return list(self.fabric.event_log)


# ------------------------------------------------------------------------------ scripts
SCRIPT_HELP = """one command per line ('#' starts a comment):
  NODE lnetctl ARGS...          NODE lctl ARGS...
  NODE put|get DST_NID|NODE [COUNT [SIZE]]
  link NODE IFACE up|down       run SECONDS        events"""


def run_script(tb: SimTestbed, lines: Iterable[str], out: TextIO, err: TextIO,
               source: str = "<script>") -> int:
    """Run a ``testbed sim --script`` file; returns the last non-zero status (0 if none).

    Every error is one line naming the script line; output is what the verbs print.
    """
    status = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            words = shlex.split(line)
            status = _script_line(tb, words, out, err) or status
        except (ValueError, TestbedError) as exc:
            err.write(f"{source}:{lineno}: {exc}\n")
            status = 1
    return status


def _script_line(tb: SimTestbed, words: list[str], out: TextIO, err: TextIO) -> int:
    head = words[0]
    if head == "link" and len(words) == 4:
        tb.link(words[1], words[2], words[3])
        out.write(f"{words[1]} {words[2]} {words[3]}\n")
        return 0
    if head == "run" and len(words) == 2:
        tb.run(float(words[1]))
        return 0
    if head == "events" and len(words) == 1:
        out.writelines(json.dumps(e, sort_keys=True) + "\n" for e in tb.events())
        return 0
    if len(words) >= 2 and words[1] in ("lnetctl", "lctl"):
        res = tb.node(head).verb(words[1], words[2:])
        out.write(res.out)
        err.write(res.err)
        return res.rc
    if len(words) in (3, 4, 5) and words[1] in ("put", "get"):
        dst = words[2] if "@" in words[2] else tb.node(words[2]).nids[0]
        count = int(words[3]) if len(words) > 3 else 1
        size = int(words[4]) if len(words) > 4 else 4096
        reply = getattr(tb.node(head), words[1])(dst, count=count, size=size)
        if not reply.get("ok"):
            raise TestbedError(str(reply.get("error")))
        out.write(yaml.safe_dump({k: reply[k] for k in ("sent", "completed", "failed",
                                                        "errors")}, sort_keys=False))
        return 0 if not reply["failed"] else 1
    raise TestbedError(f"cannot parse {' '.join(words)!r} (see `testbed sim --help` and the "
                       "README, Backends)")


def oneshot(topology: str | None, *, name: str | None, seed: int, script: str | None,
            out: TextIO, err: TextIO) -> int:
    """``testbed up --backend sim`` / ``testbed sim``: bring up, run a script, exit.

    A sim testbed lives only in the process that made it, so the CLI runs it one-shot: the
    status lines, then each script line's output; ``-`` reads the script from stdin.
    """
    tb = SimTestbed.up(topology, name=name, seed=seed)
    out.write(f"sim testbed {tb.name} is up (seed {seed}, virtual time {tb.now:g}s)\n")
    for node, info in tb.status()["nodes"].items():
        out.write(f"  {node:<12} " + " ".join(f"{i}={d['nid']}" for i, d in
                                             info["interfaces"].items()) + "\n")
    if script is None:
        return 0
    try:
        if script == "-":
            import sys

            lines = sys.stdin.read().splitlines()
        else:
            lines = Path(script).read_text().splitlines()
    except OSError as exc:
        raise TestbedError(f"cannot read script {script}: {exc.strerror or exc}") from exc
    rc = run_script(tb, lines, out, err, source=script if script != "-" else "<stdin>")
    tb.down()
    return rc
