"""The ``vagrant`` and ``hosts`` backends' client: what the CLI and the tests hold.

Theory of operation: ``VagrantTestbed.up`` validates the topology and the placement here, then
spawns the supervisor (``testbed.vagrant.supervisor``) and follows its progress
(``testbed.spawn``), exactly as the Mininet client does; control requests go to the
supervisor's ``ctl.sock`` (``testbed.ctlclient``). Node requests do not: a
:class:`VagrantNode` talks to its daemon directly over ZeroMQ TCP with CURVE, with the keys in
the run directory (pinned server key, the testbed's client pair). ``exec`` runs a command in
the node's namespace on its guest or host over the testbed's SSH master connection, with the
project's ``lnetctl``/``lctl`` first on ``PATH`` (the installed wheel's scripts).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodes.daemon.client import DaemonUnreachable, request
from nodes.echo import shown
from nodes.recorder import DEFAULT_PERIOD
from testbed import runstate
from testbed.base import Completed, NodeVerbs, TestbedError, check_name
from testbed.ctlclient import CtlTestbed
from testbed.plan import load_topology
from testbed.spawn import Progress, child_env, observe_args, spawn
from testbed.vagrant import clean as vclean
from testbed.vagrant import placement
from testbed.vagrant.curve import TestbedKeys
from testbed.vagrant.shell import Shell

#: Bring-up bounds: boxes may be built first (~150 s), then guests boot.
UP_TIMEOUT = {"lxc": 600.0, "libvirt": 1800.0, "hosts": 300.0}
UP_TIMEOUT_PER_NODE = {"lxc": 60.0, "libvirt": 600.0, "hosts": 20.0}
DOWN_TIMEOUT = 600.0


class VagrantNode(NodeVerbs):
    """One node: a daemon in a network namespace on a guest or host, reached over CURVE."""

    def __init__(self, testbed: VagrantTestbed, name: str, info: dict[str, Any]) -> None:
        self.testbed = testbed
        self.name = name
        self.host: str = info["host"]
        self.endpoint: str = info["endpoint"]
        self.pid: int = info["pid"]
        self.nids: list[str] = list(info.get("nids", []))
        self.host_pid = None  # no namespace of this machine

    def __repr__(self) -> str:
        return f"<VagrantNode {self.testbed.name}/{self.name} on {self.host} {self.endpoint}>"

    def _request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            return request(self.endpoint, msg, timeout=timeout,
                           curve=self.testbed.keys.client(self.name))
        except DaemonUnreachable as exc:
            raise TestbedError(f"node {self.name}: {exc}") from exc

    # -- on the node's host -----------------------------------------------------------------
    def _shell(self) -> Shell:
        rec = runstate.read_state(self.testbed.rundir)["hosts"][self.host]
        return vclean.shell_from_record(self.host, rec, self.testbed.rundir / "ssh")

    def exec_argv(self, argv: Sequence[str], *, tty: bool = False) -> list[str]:
        """The local argv that runs ``argv`` in this node's namespace on its host."""
        info = runstate.read_state(self.testbed.rundir)["nodes"][self.name]
        site = info["pythonpath"]
        path = f"{site}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        if not site.endswith("/site"):  # this machine: our environment's scripts too
            path = f"{os.path.dirname(sys.executable)}:{path}"
        inner = ["env", f"PATH={path}", f"PYTHONPATH={site}",
                 f"{runstate.ENV_NAME}={self.testbed.name}",
                 "sh", "-c", _ENTER, "sh", info["netns"], str(info.get("pid") or 0), *argv]
        return self._shell().argv(inner, tty=tty)

    def exec(self, argv: Sequence[str], *, input: str | None = None,
             timeout: float = 60.0) -> Completed:
        """Run ``argv`` in this node's namespace on its guest or host; capture output."""
        return Shell().run(self.exec_argv(argv), input=input, timeout=timeout)

    def log(self) -> str:
        info = runstate.read_state(self.testbed.rundir)["nodes"][self.name]
        res = self._shell().run(["cat", f"{info['hostdir']}/nodes/{self.name}.log"])
        if not res.ok:
            raise TestbedError(f"node {self.name}: cannot read its log: {res.err.strip()}")
        return res.out


#: Into the node: its daemon's network and mount namespaces (``ip netns exec`` gave the daemon
#: one of its own, with the netns's /sys and the /sys/module parameter files it serves) when
#: that daemon is alive in this node's netns; else a plain ``ip netns exec`` (a dead node).
#: A constant script: the namespace name, the daemon's pid and the command are arguments.
_ENTER = ('ns=$1; pid=$2; shift 2; m=/proc/$pid/ns/mnt; '
          'if [ "$pid" -gt 0 ] && [ -e "$m" ] && '
          '[ "$(stat -L -c %i /proc/$pid/ns/net 2>/dev/null)" = '
          '"$(stat -L -c %i /run/netns/$ns)" ]; then '
          'exec nsenter --net="/run/netns/$ns" --mount="$m" --wd="$PWD" -- '
          '"$@"; fi; '
          'exec ip netns exec "$ns" "$@"')


class VagrantTestbed(CtlTestbed):
    """A running testbed of the vagrant (guests) or hosts (machines) backend."""

    backend = "vagrant"

    def __init__(self, name: str, rundir: Path, root: Path) -> None:
        super().__init__(name, rundir, root)
        self.warnings: list[str] = []
        self.keys = TestbedKeys(rundir)
        self.backend = str(runstate.read_state(rundir).get("backend", "vagrant"))

    @classmethod
    def up(cls, topology_path: str | os.PathLike[str] | None = None, name: str | None = None,
           progress: Progress | None = None, *, backend: str = "vagrant",
           provider: str = "lxc", clock_skew: dict[str, float] | None = None,
           root: str | Path | None = None, down_at_exit: bool = False,
           record_period: float = DEFAULT_PERIOD, trace_messages: bool = False
           ) -> VagrantTestbed:
        """Bring a testbed up on Vagrant guests (``backend="vagrant"``, ``provider`` lxc or
        libvirt) or on machines (``backend="hosts"``); returns once LNet is configured.

        Like a Mininet testbed it outlives this process (``testbed down`` or ``clean`` ends
        it) unless ``down_at_exit``: then this process takes it down when it exits (atexit),
        or use it as a context manager (``with VagrantTestbed.up(...) as tb:``).
        ``clock_skew`` (test-only): host -> seconds its clock is reported ahead.
        ``record_period`` (seconds, 0: off) and ``trace_messages`` as on Mininet: each daemon
        records and traces on its host; a flush (``testbed report``, the pytest plugin's
        teardown check) copies those files into this run directory's ``nodes/``.

        Raises:
            TopologyError: invalid topology (nothing was started).
            TestbedError: bad placement, bad ``record_period``, or bring-up failed
                (everything made was removed).
        """
        observe = observe_args(record_period, trace_messages)
        plan = load_topology(topology_path, name=name)
        name = check_name(plan.name)
        try:
            placement.place(plan, backend)
        except placement.PlacementError as exc:
            raise TestbedError(str(exc)) from None
        base = runstate.runroot(root)
        rdir = runstate.rundir(name, base)
        if rdir.exists():
            raise TestbedError(f"testbed {name} is already up, or a leftover of it remains "
                               f"in {rdir} (run `testbed clean`)")
        argv = [sys.executable, "-m", "testbed.vagrant.supervisor", "--name", name,
                "--backend", backend, "--provider", provider]
        if topology_path is not None:
            argv += ["--topology", str(Path(topology_path).resolve())]
        for host, secs in (clock_skew or {}).items():
            argv += ["--clock-skew", f"{host}={secs}"]
        argv += observe
        kind = provider if backend == "vagrant" else "hosts"
        ready = spawn(argv, child_env(name, rdir),
                      UP_TIMEOUT[kind] + UP_TIMEOUT_PER_NODE[kind] * len(plan.nodes), progress)
        tb = cls(name, rdir, base)
        tb.warnings = [str(w) for w in ready.get("warnings", [])]  # routes still down
        if down_at_exit:
            atexit.register(tb.down)
        return tb

    def __enter__(self) -> VagrantTestbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def node(self, name: str) -> VagrantNode:
        nodes = runstate.read_state(self.rundir).get("nodes", {})
        if name not in nodes:
            raise TestbedError(f"testbed {self.name} has no node {shown(name)} "
                               f"(nodes: {', '.join(nodes)})")
        return VagrantNode(self, name, nodes[name])

    def events(self) -> list[dict[str, Any]]:
        """The merged event log, after the supervisor has read every host up to now."""
        with contextlib.suppress(TestbedError):  # gone: what is on disk is all there is
            self._ctl({"cmd": "events_sync"}, timeout=30.0)
        return runstate.read_events(self.rundir)

    def down(self, timeout: float = DOWN_TIMEOUT) -> list[str]:
        return super().down(timeout)
