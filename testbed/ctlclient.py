"""Client side of a testbed's control socket, shared by every backend that runs as a process.

Theory of operation: a Mininet testbed's supervisor and a sim testbed's server both serve JSON
requests on a ZeroMQ ROUTER at ``ipc://RUNDIR/ctl.sock`` (``status``, ``link``, ``down``,
``fault_add|list|del|clear``; the sim adds node verbs and ``clock``). ``CtlTestbed`` holds
what every such client does the same way: find the run directory, check the process is still
the one recorded (pid and owner tag), send a request with a bounded wait, take the testbed
down (falling back to cleaning by the state file when the process is gone). ``FaultHandle``
is ``tb.fault`` over those requests. Nothing here keeps global state.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodes.daemon.client import DaemonDead, DaemonUnreachable, RequestTooLarge, request
from nodes.echo import clip
from testbed import clean, runstate
from testbed.base import TestbedError

#: Bound on one control request.
CTL_TIMEOUT = 10.0
#: Bound on ``down``.
DOWN_TIMEOUT = 60.0


class CtlTestbed:
    """A running testbed known by name: its run directory and its control process."""

    backend = "?"
    server = "supervisor"  # what its control process is called in error lines

    def __init__(self, name: str, rundir: Path, root: Path) -> None:
        self.name = name
        self.rundir = rundir
        self.root = root
        self._status: dict[str, Any] | None = None
        #: what bring-up reported but did not fail on (routes still down, with why)
        self.warnings: list[str] = []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.rundir}>"

    def _ctl(self, msg: dict[str, Any], timeout: float = CTL_TIMEOUT) -> dict[str, Any]:
        self._check_reachable()
        return self._request(msg, timeout)

    def _check_reachable(self) -> None:
        """Say why the control process cannot be asked, truthfully (issue 18): another
        user's testbed is not "not running"; a dead one is removed by ``down -n NAME``.

        Raises:
            TestbedError: it cannot be asked.
        """
        problem = runstate.access_problem(self.rundir)
        if problem is not None:
            raise TestbedError(f"testbed {self.name}: {problem}")
        state = runstate.read_state(self.rundir)
        if runstate.supervisor_alive(self.name, state):
            return
        pid = state.get("supervisor_pid")
        uid = runstate.process_uid(pid) if isinstance(pid, int) else None
        what = self.server
        if uid is not None and uid != os.geteuid() and runstate.pid_alive(pid):
            raise TestbedError(f"testbed {self.name}: its {what} (pid {pid}) runs as uid "
                               f"{uid}, not reachable as uid {os.geteuid()} (run as "
                               f"{'root' if uid == 0 else f'uid {uid}'})")
        raise TestbedError(f"testbed {self.name}: its {what}"
                           + (f" (pid {pid})" if isinstance(pid, int) else "")
                           + f" is not running (remove what is left: `testbed down -n "
                             f"{self.name}`)")

    def _request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        pid = runstate.read_state(self.rundir).get("supervisor_pid")
        what = self.server

        def gone() -> str | None:  # its process died while we wait: fail now (issue 27)
            return None if runstate.pid_alive(pid) else f"its {what} (pid {pid}) died"

        try:
            return request(str(runstate.ctl_sock(self.rundir)), msg, timeout=timeout,
                           alive=gone if isinstance(pid, int) else None)
        except RequestTooLarge as exc:
            raise TestbedError(f"testbed {self.name}: {msg.get('cmd')}: {exc}") from exc
        except DaemonDead as exc:
            raise TestbedError(f"testbed {self.name}: {exc} (remove what is left: `testbed "
                               f"down -n {self.name}`)") from exc
        except DaemonUnreachable as exc:
            raise TestbedError(f"testbed {self.name}: not answering ({exc})") from exc

    def _ok(self, msg: dict[str, Any], timeout: float = CTL_TIMEOUT) -> dict[str, Any]:
        """``_ctl`` whose ``ok: false`` reply becomes a TestbedError."""
        reply = self._ctl(msg, timeout)
        if not reply.get("ok"):
            raise TestbedError(f"testbed {self.name}: "
                               f"{reply.get('error', str(msg.get('cmd')) + ' failed')}")
        return reply

    def down(self, timeout: float = DOWN_TIMEOUT) -> list[str]:
        """Take the testbed down; if its process is dead, clean by its state file.

        Returns:
            Everything of the testbed that was there before and is proven gone now
            (processes with their role, interfaces, links, fault artefacts, the run
            directory), as ``clean.inventory`` describes them.
        Raises:
            TestbedError: something is still there afterwards (named).
        """
        before = clean.inventory(self.name, self.root)
        state = runstate.read_state(self.rundir)
        if runstate.supervisor_alive(self.name, state):
            try:
                reply = self._ctl({"cmd": "down"}, timeout=timeout)
            except TestbedError:
                reply = {}
            if reply.get("ok"):
                pid = state.get("supervisor_pid")
                clean.wait_gone([pid] if isinstance(pid, int) else [], 5.0)
        extra = clean.clean_testbed(self.name, self.root)  # what the process left, if any
        left = clean.leftovers(self.name, self.root)
        if left:
            raise TestbedError(f"testbed {self.name}: still present after down: "
                               f"{', '.join(left)}")
        return [*before.values(), *(x for x in extra if clean.leftover_key(x) not in before)]

    def status(self) -> dict[str, Any]:
        """Nodes (NIDs, interfaces and link states), segments, phase."""
        reply = self._ok({"cmd": "status"})
        self._status = reply
        return reply

    @property
    def nodes(self) -> list[str]:
        return list((self._status or self.status())["nodes"])

    def link(self, node: str, iface: str, state: str) -> None:
        """Set interface ``iface`` of ``node`` ``up`` or ``down`` (logged as an event)."""
        self._ok({"cmd": "link", "node": node, "iface": iface, "state": state})

    def reload_modules(self, node: str, modules: dict[str, dict[str, str]]) -> None:
        """``node``'s modules reloaded with these parameters, LNet left unconfigured
        (``testbed/modload.py``; sanity-lnet's ``load_lnet OPTS``)."""
        self._ok({"cmd": "reload", "node": node, "modules": modules})
        self._status = None  # a new daemon: node() hands out its pid, not the old one's

    def events(self) -> list[dict[str, Any]]:
        return runstate.read_events(self.rundir)

    @property
    def fault(self) -> FaultHandle:
        """Faults of this testbed (``tb.fault.loss(node="c1", rate=.1)``)."""
        return FaultHandle(self.name, self._ctl)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass (wall-clock time; the sim's client moves its virtual clock)."""
        time.sleep(seconds)

    @property
    def now(self) -> float:
        """Wall-clock time, the clock of the event log's ``t``."""
        return time.time()


Ctl = Callable[..., dict[str, Any]]


class FaultHandle:
    """Faults of one testbed, owned by its control process (faults/README.md).

    Every kind is a method taking the keys of ``faults.spec`` as keyword arguments (``match``
    as a dict); each returns the fault's description (``id``, ``seed``, ``state``...).
    """

    def __init__(self, name: str, ctl: Ctl) -> None:
        self.name = name
        self._ctl = ctl

    def add(self, kind: str, **spec: Any) -> dict[str, Any]:
        """Add a fault of ``kind``.

        Raises:
            TestbedError: the spec is invalid or could not be applied (one line).
        """
        reply = self._ctl({"cmd": "fault_add", "spec": {"kind": kind, **spec}}, timeout=60.0)
        if not reply.get("ok"):
            raise TestbedError(f"testbed {self.name}: fault {clip(str(kind))}: "
                               f"{reply.get('error', 'failed')}")
        return dict(reply["fault"])

    def list(self) -> list[dict[str, Any]]:
        """Every fault with its state, seed, activations and live counters."""
        return list(self._ctl({"cmd": "fault_list"})["faults"])

    def residue(self) -> list[str]:
        """Fault artefacts still present (iptables rules, qdiscs, interposers); [] is clean."""
        return list(self._ctl({"cmd": "fault_list", "residue": True}, timeout=60.0)["residue"])

    def delete(self, fid: str) -> dict[str, Any]:
        """Revert and remove fault ``fid`` (id or name); returns its final counters."""
        reply = self._ctl({"cmd": "fault_del", "id": fid}, timeout=60.0)
        if not reply.get("ok"):
            raise TestbedError(f"testbed {self.name}: {reply.get('error')}")
        return dict(reply["fault"])

    def clear(self) -> list[dict[str, Any]]:
        return list(self._ctl({"cmd": "fault_clear"}, timeout=120.0)["faults"])

    def __getattr__(self, kind: str) -> Callable[..., dict[str, Any]]:
        from faults.spec import PARAMS

        alias = {"drop": "loss", "dup": "duplicate", "partition_": "partition"}.get(kind, kind)
        if alias not in PARAMS:
            raise AttributeError(kind)
        return lambda **spec: self.add(alias, **spec)
