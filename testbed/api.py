"""Python API of the testbed: what the CLI and the tests use.

Theory of operation: ``Testbed.up`` validates the topology here (so a bad file fails before
anything starts), then spawns the supervisor (``testbed.supervisor``) in its own session and
reads its JSON progress lines until ``ready`` or ``error``; every wait is bounded. After
that, a ``Testbed`` is a thin handle: control requests go to the supervisor's ``ctl.sock``,
LNet requests straight to each node daemon's socket, and ``exec`` enters a node's network
namespace with ``nsenter``. Nothing here keeps global state: two ``Testbed`` objects of
different names are independent, whatever process holds them.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shlex
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from nodes.daemon.client import ENV_CTL, DaemonUnreachable, request
from testbed import clean, runstate, sh
from testbed.topology import NAME_RE, load_topology

#: Bound on a whole bring-up (per node allowance added on top).
UP_TIMEOUT = 60.0
UP_TIMEOUT_PER_NODE = 5.0
#: Bound on one control request to the supervisor.
CTL_TIMEOUT = 10.0
#: Bound on ``down`` (the supervisor stops daemons, shells and interfaces).
DOWN_TIMEOUT = 60.0
PROJECT_ROOT = Path(__file__).resolve().parent.parent

Progress = Callable[[int, int, str], None]
Completed = sh.Completed


class TestbedError(Exception):
    """A testbed operation failed; the message is one line, fit for the user."""

    __test__ = False  # not a pytest test class


def scripts_dir() -> str:
    """The directory of this environment's console scripts (lnetctl, lctl, testbed)."""
    return sysconfig.get_path("scripts")


def _check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise TestbedError(f"bad testbed name {name!r}: must match {NAME_RE.pattern}")
    return name


class NodeHandle:
    """One node of a running testbed."""

    def __init__(self, testbed: Testbed, name: str, info: dict[str, Any]) -> None:
        self.testbed = testbed
        self.name = name
        self.pid: int = info["pid"]
        self.host_pid: int = info["host_pid"]
        self.sock: str = info["sock"]
        self.nids: list[str] = list(info.get("nids", []))

    def __repr__(self) -> str:
        return f"<NodeHandle {self.testbed.name}/{self.name} pid={self.pid}>"

    def verb(self, cmd: str, argv: Sequence[str], timeout: float = 60.0) -> Completed:
        """Send daemon verb ``cmd`` ("lnetctl", "lctl") with ``argv`` exactly as given."""
        try:
            reply = request(self.sock, {"cmd": cmd, "argv": list(argv)}, timeout=timeout)
        except DaemonUnreachable as exc:
            raise TestbedError(f"node {self.name}: {exc}") from exc
        return Completed(int(reply.get("rc", 1)), str(reply.get("out", "")),
                         str(reply.get("err", "")))

    def lnetctl(self, *argv: str, timeout: float = 60.0) -> Completed:
        """Run ``lnetctl ARGV`` on this node; exactly what lnetctl would print.

        A single argument with spaces is split like a shell would: ``lnetctl("net show -v")``.
        """
        return self.verb("lnetctl", _split(argv), timeout)

    def lctl(self, *argv: str, timeout: float = 60.0) -> Completed:
        """Run ``lctl ARGV`` on this node (a single string is split like ``lnetctl``)."""
        return self.verb("lctl", _split(argv), timeout)

    def lnd_link(self, nid: str, up: bool) -> bool:
        """Have the node's LND report a link down/up event on local NI ``nid``, as on a
        carrier change, without touching the interface (testbed-only ``lctl net_ni_down|up``,
        hlth-dbg-sim-ni-down/up). Returns whether the NI's link state changed.

        Raises:
            TestbedError: ``nid`` is not a local NI of this node (message holds lctl's).
        """
        res = self.lctl("net_ni_up" if up else "net_ni_down", nid)
        if res.rc != 0:
            raise TestbedError(f"node {self.name}: {(res.out + res.err).strip()}")
        return "event reported" in res.out

    def testbed_stats(self, nid: str | None = None) -> dict[str, Any]:
        """``lctl testbed_stats [NID]`` parsed: ``{"local NI(s)": [...], "peer NI(s)": [...]}``
        (seed 003 DESIRED statistics, docs/differences.md)."""
        res = self.lctl("testbed_stats", *([nid] if nid else []))
        if res.rc != 0:
            raise TestbedError(f"node {self.name}: lctl testbed_stats: "
                               f"{(res.out + res.err).strip()}")
        return dict(yaml.safe_load(res.out)["testbed stats"])

    def log(self) -> str:
        """The node daemon's log, ``<rundir>/nodes/<node>.log``: the engine's console lines at
        their LNet level (``... c1 lnet ERROR: local NI ... link down ...``, dbg-110/115).

        Raises:
            TestbedError: the log cannot be read.
        """
        try:
            return runstate.node_log(self.testbed.rundir, self.name).read_text(errors="replace")
        except OSError as exc:
            raise TestbedError(f"node {self.name}: cannot read its log: "
                               f"{exc.strerror or exc}") from exc

    def lnetctl_yaml(self, *argv: str, timeout: float = 60.0) -> Any:
        """``lnetctl ARGV`` parsed as YAML.

        Raises:
            TestbedError: lnetctl exited non-zero (message holds its output).
        """
        result = self.lnetctl(*argv, timeout=timeout)
        if result.rc != 0:
            raise TestbedError(f"node {self.name}: lnetctl {' '.join(argv)} failed with "
                               f"rc {result.rc}: {(result.out + result.err).strip()}")
        return yaml.safe_load(result.out)

    def yaml(self, command: str, timeout: float = 60.0) -> Any:
        """``node.yaml("net show -v 3")``: one lnetctl command string, its output parsed."""
        return self.lnetctl_yaml(*shlex.split(command), timeout=timeout)

    def ping(self, nid: str, *, source: str | None = None, timeout: float | None = None
             ) -> Completed:
        """``lnetctl ping NID`` (an LNet GET of the peer's ping buffer); rc, out, err."""
        argv = ["ping", nid]
        if source is not None:
            argv += ["--source", source]
        if timeout is not None:
            argv += ["--timeout", str(max(1, round(timeout)))]
        return self.lnetctl(*argv, timeout=60.0 if timeout is None else timeout + 30.0)

    def exec_env(self) -> dict[str, str]:
        """Environment of a command run in this node: our lnetctl/lctl first on PATH."""
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([scripts_dir(), env.get("PATH", "/usr/bin:/bin")])
        env[ENV_CTL] = self.sock
        env[runstate.ENV_NAME] = self.testbed.name
        env[runstate.ENV_RUNDIR] = str(self.testbed.rundir)
        paths = [str(PROJECT_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        return env

    def exec(self, argv: Sequence[str], *, input: str | None = None,
             timeout: float = 60.0) -> Completed:
        """Run ``argv`` in this node's network namespace (host filesystem); capture output."""
        return sh.run(argv, ns_pid=self.host_pid, input=input, timeout=timeout,
                      env=self.exec_env())

    def put(self, dst: str, count: int = 1, size: int = 0, timeout: float = 120.0,
            numa: int | None = None) -> dict[str, Any]:
        """A burst of ``count`` LNet PUTs of ``size`` bytes to ``dst`` (a NID); ``numa`` is
        the NUMA node of the messages' memory (emulated ``md_cpt``, snd-020)."""
        return self._burst("put", dst, count, size, timeout, numa)

    def get(self, dst: str, count: int = 1, size: int = 0, timeout: float = 120.0,
            numa: int | None = None) -> dict[str, Any]:
        """A burst of ``count`` LNet GETs of ``size`` bytes from ``dst``'s lnet_selftest
        bulk portal (at most 64 in flight); each succeeds on its REPLY. Same result dict as
        ``put``: ok, sent, completed, failed, errors (``"KIND:status"`` -> count)."""
        return self._burst("get", dst, count, size, timeout, numa)

    def _burst(self, op: str, dst: str, count: int, size: int, timeout: float,
               numa: int | None) -> dict[str, Any]:
        req: dict[str, Any] = {"cmd": op, "dst": dst, "count": count, "size": size}
        if numa is not None:
            req["numa"] = numa
        try:
            return request(self.sock, req, timeout=timeout)
        except DaemonUnreachable as exc:
            raise TestbedError(f"node {self.name}: {exc}") from exc
        except (TypeError, ValueError) as exc:  # an argument JSON cannot carry
            return {"ok": False, "error": f"{op}: bad argument: {exc}"}


def _split(argv: Sequence[str]) -> list[str]:
    if len(argv) == 1 and " " in argv[0]:
        return shlex.split(argv[0])
    return list(argv)


class Testbed:
    """A running testbed, known by name (its run directory and supervisor)."""

    def __init__(self, name: str, rundir: Path, root: Path) -> None:
        self.name = name
        self.rundir = rundir
        self.root = root
        self._status: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<Testbed {self.name} {self.rundir}>"

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def up(cls, topology_path: str | os.PathLike[str] | None = None, name: str | None = None,
           progress: Progress | None = None, *, root: str | Path | None = None,
           backend: str = "mininet", seed: int = 0) -> Testbed:
        """Bring a testbed up and return when every node's LNet is configured.

        ``backend="sim"`` runs every node's engine in this process on a virtual clock
        (``testbed/sim.py``; ``seed`` makes it replayable) and returns a ``SimTestbed``.

        Args:
            topology_path: topology YAML (None: topologies/default.yaml).
            name: testbed name (default: the topology's ``name``).
            progress: called as ``progress(step, total, text)`` for each step.
            root: RUNROOT (default: $LNET_TESTBED_RUNROOT or /run/lnet-testbed).

        Raises:
            TopologyError: the topology is invalid (nothing was started).
            TestbedError: bring-up failed (everything started was removed again).
        """
        if backend == "sim":
            from testbed.sim import SimTestbed

            return SimTestbed.up(topology_path, name=name, progress=progress, seed=seed)
        if backend != "mininet":
            raise TestbedError(f"unknown backend {backend!r} (choose mininet or sim)")
        plan = load_topology(topology_path, name=name)
        name = _check_name(plan.name)
        base = runstate.runroot(root)
        rdir = runstate.rundir(name, base)
        if rdir.exists():
            if runstate.supervisor_alive(name, runstate.read_state(rdir)):
                raise TestbedError(f"testbed {name} is already up")
            raise TestbedError(f"a leftover of testbed {name} remains in {rdir}: "
                               "run `testbed clean`")
        argv = [sys.executable, "-m", "testbed.supervisor", "--name", name]
        if topology_path is not None:
            argv += ["--topology", str(Path(topology_path).resolve())]
        env = dict(os.environ)
        env[runstate.ENV_NAME] = name
        env[runstate.ENV_RUNROOT] = str(base)
        env[runstate.ENV_RUNDIR] = str(rdir)
        paths = [str(PROJECT_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env, cwd="/",
                                start_new_session=True)
        timeout = UP_TIMEOUT + UP_TIMEOUT_PER_NODE * len(plan.nodes)
        try:
            _follow(proc, timeout, progress)
        except BaseException:
            _stop_supervisor(proc)
            raise
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
        return cls(name, rdir, base)

    @classmethod
    def attach(cls, name: str, *, root: str | Path | None = None) -> Testbed:
        """The running testbed ``name``.

        Raises:
            TestbedError: no such testbed is up.
        """
        base = runstate.runroot(root)
        rdir = runstate.rundir(_check_name(name), base)
        if not rdir.exists():
            raise TestbedError(f"no testbed named {name} is up")
        return cls(name, rdir, base)

    def down(self, timeout: float = DOWN_TIMEOUT) -> list[str]:
        """Take the testbed down; if its supervisor is dead, clean by its state file.

        Returns:
            What was removed by the fallback cleaning ([] when the supervisor did it all).
        """
        state = runstate.read_state(self.rundir)
        if runstate.supervisor_alive(self.name, state):
            try:
                reply = self._ctl({"cmd": "down"}, timeout=timeout)
            except TestbedError:
                reply = {}
            if reply.get("ok"):
                pid = state.get("supervisor_pid")
                clean.wait_gone([pid] if isinstance(pid, int) else [], 5.0)
        return clean.clean_testbed(self.name, self.root)

    # -- control -------------------------------------------------------------------------------

    def _ctl(self, msg: dict[str, Any], timeout: float = CTL_TIMEOUT) -> dict[str, Any]:
        if not runstate.supervisor_alive(self.name, runstate.read_state(self.rundir)):
            raise TestbedError(f"testbed {self.name}: supervisor is not running "
                               "(run `testbed clean`)")
        try:
            return request(str(runstate.ctl_sock(self.rundir)), msg, timeout=timeout)
        except DaemonUnreachable as exc:
            raise TestbedError(f"testbed {self.name}: supervisor not answering ({exc})") from exc

    def status(self) -> dict[str, Any]:
        """Nodes (pids, alive, NIDs, interfaces and link states) and segments."""
        reply = self._ctl({"cmd": "status"})
        if not reply.get("ok"):
            raise TestbedError(f"testbed {self.name}: {reply.get('error', 'status failed')}")
        self._status = reply
        return reply

    def node(self, name: str) -> NodeHandle:
        """Handle on node ``name``.

        Raises:
            TestbedError: no such node in this testbed.
        """
        try:
            status = self._status or self.status()
            if name not in status["nodes"]:
                status = self.status()
        except TestbedError:
            status = self._recorded()  # supervisor gone: its daemons may still serve
        if name not in status["nodes"]:
            raise TestbedError(f"testbed {self.name} has no node {name!r} "
                               f"(nodes: {', '.join(status['nodes'])})")
        return NodeHandle(self, name, status["nodes"][name])

    def _recorded(self) -> dict[str, Any]:
        """Node information from the state file (when the supervisor cannot be asked)."""
        nodes = {}
        for node, info in runstate.read_state(self.rundir).get("nodes", {}).items():
            if "daemon_pid" in info and "sock" in info:
                nodes[node] = {"pid": info["daemon_pid"], "host_pid": info["host_pid"],
                               "sock": info["sock"], "nids": info.get("nids", [])}
        if not nodes:
            raise TestbedError(f"testbed {self.name}: supervisor is not running and no node "
                               "is recorded (run `testbed clean`)")
        return {"nodes": nodes}

    @property
    def nodes(self) -> list[str]:
        return list((self._status or self.status())["nodes"])

    def link(self, node: str, iface: str, state: str) -> None:
        """Set interface ``iface`` of ``node`` ``up`` or ``down`` (logged as an event)."""
        reply = self._ctl({"cmd": "link", "node": node, "iface": iface, "state": state})
        if not reply.get("ok"):
            raise TestbedError(f"testbed {self.name}: {reply.get('error', 'link failed')}")

    def events(self) -> list[dict[str, Any]]:
        return runstate.read_events(self.rundir)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass: wall-clock time here, virtual time on the sim backend (whose
        ``SimTestbed.advance`` runs timers, recovery pings and deliveries instead)."""
        time.sleep(seconds)

    @property
    def fault(self) -> FaultHandle:
        """Network and process faults of this testbed (``tb.fault.loss(node="c1", rate=.1)``)."""
        return FaultHandle(self)


class FaultHandle:
    """Faults of one testbed, owned by its supervisor (testbed/faultctl.py, faults/README.md).

    Every kind is a method taking the keys of ``faults.spec`` as keyword arguments (``match``
    as a dict); each returns the fault's description (``id``, ``seed``, ``state``...).
    """

    def __init__(self, testbed: Testbed) -> None:
        self.testbed = testbed

    def add(self, kind: str, **spec: Any) -> dict[str, Any]:
        """Add a fault of ``kind``.

        Raises:
            TestbedError: the spec is invalid or could not be applied (one line).
        """
        reply = self.testbed._ctl({"cmd": "fault_add", "spec": {"kind": kind, **spec}},
                                  timeout=60.0)
        if not reply.get("ok"):
            raise TestbedError(f"testbed {self.testbed.name}: fault {kind}: "
                               f"{reply.get('error', 'failed')}")
        return dict(reply["fault"])

    def list(self) -> list[dict[str, Any]]:
        """Every fault with its state, seed, activations and live counters."""
        return list(self.testbed._ctl({"cmd": "fault_list"})["faults"])

    def residue(self) -> list[str]:
        """Fault artefacts still present (iptables rules, qdiscs, interposers); [] is clean."""
        return list(self.testbed._ctl({"cmd": "fault_list", "residue": True},
                                      timeout=60.0)["residue"])

    def delete(self, fid: str) -> dict[str, Any]:
        """Revert and remove fault ``fid`` (id or name); returns its final counters."""
        reply = self.testbed._ctl({"cmd": "fault_del", "id": fid}, timeout=60.0)
        if not reply.get("ok"):
            raise TestbedError(f"testbed {self.testbed.name}: {reply.get('error')}")
        return dict(reply["fault"])

    def clear(self) -> list[dict[str, Any]]:
        return list(self.testbed._ctl({"cmd": "fault_clear"}, timeout=120.0)["faults"])

    def __getattr__(self, kind: str) -> Callable[..., dict[str, Any]]:
        from faults.spec import PARAMS

        alias = {"drop": "loss", "dup": "duplicate", "partition_": "partition"}.get(kind, kind)
        if alias not in PARAMS:
            raise AttributeError(kind)
        return lambda **spec: self.add(alias, **spec)


def _follow(proc: subprocess.Popen[bytes], timeout: float, progress: Progress | None) -> None:
    """Read the supervisor's progress until ``ready``; raise TestbedError on error/timeout."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    noise: list[str] = []
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestbedError(f"bring-up did not finish within {timeout:g}s")
            if not sel.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = _parse(line)
                if msg is None:
                    noise.append(line.decode(errors="replace"))
                elif "progress" in msg:
                    if progress is not None:
                        progress(int(msg["step"]), int(msg["total"]), str(msg["progress"]))
                elif "ready" in msg:
                    return
                elif "error" in msg:
                    _reap(proc)
                    raise TestbedError(str(msg["error"]))
    _reap(proc)
    tail = " | ".join(n for n in noise if n.strip())[-800:]
    raise TestbedError(f"supervisor exited with rc {proc.returncode} before the testbed was "
                       f"ready: {tail or '(no output)'}")


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


def _reap(proc: subprocess.Popen[bytes], timeout: float = DOWN_TIMEOUT) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)


def _stop_supervisor(proc: subprocess.Popen[bytes]) -> None:
    """An interrupted ``up``: the supervisor undoes its work on SIGTERM."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return
        _reap(proc)


def list_testbeds(root: str | Path | None = None) -> list[str]:
    """Names of the testbeds with a run directory (up, or leftovers)."""
    return runstate.list_testbeds(root)


def clean_all(root: str | Path | None = None) -> list[str]:
    """Remove every leftover of every testbed; return what was removed."""
    return clean.clean_all(root)


def leftovers(name: str, root: str | Path | None = None) -> list[str]:
    """What of testbed ``name`` remains (processes, interfaces, links, run directory)."""
    return clean.leftovers(name, root)
