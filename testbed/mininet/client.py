"""The Mininet backend's client: what the CLI and the tests hold for a Mininet testbed.

Theory of operation: ``MininetTestbed.up`` validates the topology here (so a bad file fails
before anything starts), then spawns the supervisor (``testbed.mininet.supervisor``) in its own
session and follows its progress lines until ``ready`` or ``error`` (``testbed.spawn``); every
wait is bounded. After that, a ``MininetTestbed`` is a thin handle: control requests go to the
supervisor's ``ctl.sock`` (``testbed.ctlclient``), LNet requests straight to each node
daemon's socket, and ``exec`` enters a node's network namespace with ``nsenter``. Nothing here
keeps global state: two handles of different names are independent, whatever process holds
them.
"""

from __future__ import annotations

import contextlib
import os
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodes.daemon.client import ENV_CTL, DaemonUnreachable, request
from nodes.echo import shown
from nodes.recorder import DEFAULT_PERIOD
from testbed import needs, runstate, sh
from testbed.base import Completed, NodeVerbs, TestbedError
from testbed.ctlclient import CtlTestbed
from testbed.spawn import PROJECT_ROOT, Progress, observe_args, start_testbed

#: Bound on a whole bring-up (per node allowance added on top).
UP_TIMEOUT = 60.0
UP_TIMEOUT_PER_NODE = 5.0


def scripts_dir() -> str:
    """The directory of this environment's console scripts (lnetctl, lctl, testbed)."""
    return sysconfig.get_path("scripts")


class MininetNode(NodeVerbs):
    """One node of a running Mininet testbed: a daemon in its own network namespace."""

    def __init__(self, testbed: MininetTestbed, name: str, info: dict[str, Any]) -> None:
        self.testbed = testbed
        self.name = name
        self.pid: int = info["pid"]
        self.host_pid: int = info["host_pid"]
        self.sock: str = info["sock"]
        self.nids: list[str] = list(info.get("nids", []))

    def __repr__(self) -> str:
        return f"<MininetNode {self.testbed.name}/{self.name} pid={self.pid}>"

    def _gone(self) -> str | None:
        """Why this node's daemon cannot answer (its process died: ``testbed status`` shows
        it DEAD), or None: a call fails at once then, not at its deadline (issue 27 item 5)."""
        if runstate.pid_alive(self.pid):
            return None
        info = None
        if self.testbed is not None:  # restarted since this handle was made (reload, restart)?
            with contextlib.suppress(TestbedError):
                info = self.testbed.status()["nodes"].get(self.name)
        if info and info["pid"] != self.pid and runstate.pid_alive(info["pid"]):
            self.pid, self.host_pid, self.sock = info["pid"], info["host_pid"], info["sock"]
            return None
        return f"its daemon (pid {self.pid}) is dead (testbed status: DEAD)"

    def _request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Over the daemon's socket in the run directory; a dead daemon fails at once."""
        try:
            return request(self.sock, msg, timeout=timeout, alive=self._gone)
        except DaemonUnreachable as exc:
            raise TestbedError(f"node {self.name}: {exc}") from exc

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
        """Run ``argv`` in this node's network and mount namespaces (the host's files, the
        node's /sys: its /sys/module parameter files, nodes/daemon/fusefs.py); capture
        output."""
        return sh.run(argv, ns_pid=self.host_pid, input=input, timeout=timeout,
                      env=self.exec_env(), mount=True)


class MininetTestbed(CtlTestbed):
    """A running Mininet testbed, known by name (its run directory and supervisor)."""

    backend = "mininet"

    @classmethod
    def up(cls, topology_path: str | os.PathLike[str] | None = None, name: str | None = None,
           progress: Progress | None = None, *, root: str | Path | None = None,
           record_period: float = DEFAULT_PERIOD, trace_messages: bool = False
           ) -> MininetTestbed:
        """Bring a testbed up and return when every node's LNet is configured.

        Args:
            topology_path: topology YAML (None: topologies/default.yaml).
            name: testbed name (default: the topology's ``name``).
            progress: called as ``progress(step, total, text)`` for each step.
            root: RUNROOT (default: $LNET_TESTBED_RUNROOT or /run/lnet-testbed).
            record_period: seconds between recorder samples of each node (0: no recorder
                files; docs/events.md §3).
            trace_messages: every node writes its message trace (docs/events.md §1.5).

        Raises:
            TopologyError: the topology is invalid (nothing was started).
            TestbedError: not root or no Mininet here (one line), or bring-up failed
                (everything started was removed).
        """
        problem = needs.mininet_backend()  # root, Mininet, ip: one line (issue 18)
        if problem is not None:
            raise TestbedError(problem)
        name, rdir, base, ready = start_testbed(
            "testbed.mininet.supervisor", topology_path, name, root,
            observe_args(record_period, trace_messages), UP_TIMEOUT, UP_TIMEOUT_PER_NODE,
            progress, backend="mininet")
        tb = cls(name, rdir, base)
        tb.warnings = [str(w) for w in ready.get("warnings", [])]
        return tb

    def node(self, name: str) -> MininetNode:
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
            raise TestbedError(f"testbed {self.name} has no node {shown(name)} "
                               f"(nodes: {', '.join(status['nodes'])})")
        return MininetNode(self, name, status["nodes"][name])

    def _recorded(self) -> dict[str, Any]:
        """Node information from the state file (when the supervisor cannot be asked)."""
        nodes = {}
        for node, info in runstate.read_state(self.rundir).get("nodes", {}).items():
            if "daemon_pid" in info and "sock" in info:
                nodes[node] = {"pid": info["daemon_pid"], "host_pid": info["host_pid"],
                               "sock": info["sock"], "nids": info.get("nids", [])}
        if not nodes:
            raise TestbedError(f"testbed {self.name}: supervisor is not running and no node "
                               "is recorded (remove what is left: "
                               f"`testbed down -n {self.name}`)")
        return {"nodes": nodes}
