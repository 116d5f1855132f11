"""Every client call has a deadline, shorter when its target is known dead (issue 27 item 5).

Before, ``testbed lnetctl`` to a node whose daemon had been killed waited its full 60 s,
though ``testbed status`` already showed the daemon DEAD: ZeroMQ queues a request for a
socket nobody listens on. Now the client asks whether the process is alive before sending and
every ``ALIVE_POLL`` seconds of the wait (``nodes/daemon/client.py`` ``request(alive=)``):
a node daemon (``MininetNode``) or a control process (``CtlTestbed``: supervisor, sim server)
that is dead, or dies during the wait, fails the call at once with one line saying so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import runstate
from testbed.base import TestbedError
from testbed.mininet.client import MininetNode

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(name="daemon")
def daemon_fixture(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A real node daemon (no network namespace: its control socket is all we use)."""
    env = dict(os.environ, LNET_TESTBED_RUNROOT=str(tmp_path / "root"),
               PYTHONPATH=str(PROJECT))
    env.pop("LNET_TESTBED_RUNDIR", None)
    with open(tmp_path / "n1.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "nodes.daemon", "--testbed",
                                 f"harden-a-{uuid.uuid4().hex[:6]}", "--node", "n1",
                                 "--rundir", str(tmp_path / "run")],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd="/")
    ipc = tmp_path / "run" / "nodes" / "n1.sock"
    deadline = time.monotonic() + 20
    while not ipc.exists():
        assert proc.poll() is None, (tmp_path / "n1.log").read_text()
        assert time.monotonic() < deadline, "daemon did not start"
        time.sleep(0.05)
    try:
        yield proc, ipc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _node(proc: subprocess.Popen[bytes], ipc: Path) -> MininetNode:
    return MininetNode(None, "n1", {"pid": proc.pid, "host_pid": proc.pid,  # type: ignore
                                    "sock": str(ipc)})


def test_lnetctl_to_a_killed_daemon_fails_at_once(daemon: Any) -> None:
    proc, ipc = daemon
    node = _node(proc, ipc)
    assert "LNet is not configured" in node.verb("lnetctl", ["net", "show"]).err  # (answers)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    start = time.monotonic()
    with pytest.raises(TestbedError) as info:
        node.verb("lnetctl", ["net", "show"])  # its deadline: 60 s
    assert time.monotonic() - start < 1.0
    assert str(info.value) == (f"node n1: its daemon (pid {proc.pid}) is dead "
                               "(testbed status: DEAD)")


def test_a_daemon_dying_during_the_wait_ends_it(daemon: Any) -> None:
    """Stopped (it cannot answer), the call waits; killed, the call ends within a poll."""
    proc, ipc = daemon
    node = _node(proc, ipc)
    proc.send_signal(signal.SIGSTOP)
    out: dict[str, Any] = {}

    def call() -> None:
        start = time.monotonic()
        try:
            node.verb("lnetctl", ["net", "show"])
        except TestbedError as exc:
            out["error"] = str(exc)
        out["took"] = time.monotonic() - start

    worker = threading.Thread(target=call)
    worker.start()
    time.sleep(0.5)
    assert worker.is_alive()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    worker.join(10)
    assert "is dead" in out["error"] and out["took"] < 2.0, out


def test_a_sim_server_dying_during_a_request_ends_it(tmp_path: Path) -> None:
    from testbed.sim.client import SimClient

    tb = SimClient.up(None, name=f"harden-a-{uuid.uuid4().hex[:8]}", root=tmp_path,
                      speed="0", record_period=0)
    pid = int(runstate.read_state(tb.rundir)["supervisor_pid"])
    try:
        os.kill(pid, signal.SIGSTOP)
        killer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
        killer.start()
        start = time.monotonic()
        with pytest.raises(TestbedError) as info:
            tb.status()  # its deadline: 10 s
        took = time.monotonic() - start
        killer.join()
        assert str(info.value) == (f"testbed {tb.name}: its sim server (pid {pid}) died "
                                   f"(remove what is left: `testbed down -n {tb.name}`)"), \
            info.value
        assert took < 2.0, took
    finally:
        tb.down()
