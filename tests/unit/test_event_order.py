"""Events in the order they happened; ``down`` names each thing once (issue 27 item 13).

``fault_applied`` was written after the fault's effects, so the events it caused (the
supervisor's own ``link_down``, a daemon's NI going down, its death) came 3-60 ms before it
in ``events.jsonl``; now it is written before the first effect, and an activation that fails
part way is closed by a ``fault_reverted`` carrying the error. ``down`` of a testbed whose
supervisor had been killed (``kill -9``) listed each surviving daemon twice: once from its
inventory (``process N (node daemon c1)``) and once as ``clean_testbed`` said it removed it
(``process N of testbed T``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_fault_sched import _FakeSup

from faults import netops
from testbed import runstate
from testbed.ctlclient import CtlTestbed
from testbed.mininet import faultctl


def test_fault_applied_comes_before_the_events_it_causes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def create(res: dict[str, Any], env: dict[str, str]) -> None:
        # what the carrier going down makes a node's daemon log (its NI down, at once)
        runstate.append_event(tmp_path, "ni_down", node=res["node"], iface=res["iface"])

    monkeypatch.setattr(netops, "make", lambda res, record, env: create(record, env))
    monkeypatch.setattr(netops, "undo", lambda res: None)
    fm = faultctl.FaultManager(_FakeSup(tmp_path))
    assert fm.add({"kind": "carrier", "node": "c1", "iface": "eth0"}, now=1000.0)["ok"]
    fm.tick(1000.0)
    events = runstate.read_events(tmp_path)
    kinds = [e["kind"] for e in events]
    assert kinds == ["fault_added", "fault_applied", "ni_down", "link_down"], kinds
    times = [e["t"] for e in events]
    assert times == sorted(times)


def test_an_activation_that_fails_closes_its_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def create(res: dict[str, Any], env: dict[str, str]) -> None:
        raise netops.FaultApplyError("ip link set dev p0 down: no such device")

    monkeypatch.setattr(netops, "make", lambda res, record, env: create(record, env))
    monkeypatch.setattr(netops, "undo", lambda res: None)
    fm = faultctl.FaultManager(_FakeSup(tmp_path))
    reply = fm.add({"kind": "carrier", "node": "c1", "iface": "eth0"}, now=1000.0)
    assert reply == {"ok": False, "error": "f1 (carrier): ip link set dev p0 down: no such "
                                           "device"}, reply
    events = runstate.read_events(tmp_path)
    assert [e["kind"] for e in events] == ["fault_added", "fault_applied", "link_up",
                                           "fault_reverted", "fault_failed"]
    assert events[3]["error"] == events[4]["error"] == \
        "ip link set dev p0 down: no such device"
    from testbed.observe.summary import windows

    assert [w.end is not None for w in windows(events)] == [True]


def test_down_after_the_supervisor_was_killed_names_each_daemon_once(tmp_path: Path) -> None:
    """A daemon outliving its supervisor (``kill -9``: the daemon is re-parented), tagged with
    the testbed and recorded in its state file, is listed once by ``down``."""
    name = f"harden-a-{uuid.uuid4().hex[:6]}"
    rdir = runstate.create_rundir(name, tmp_path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)  # the killed supervisor (exited, reaped)
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={**os.environ, runstate.ENV_NAME: name})
    try:
        runstate.write_state(rdir, {"name": name, "backend": "mininet",
                                    "supervisor_pid": dead_pid, "phase": "ready",
                                    "nodes": {"c1": {"daemon_pid": daemon.pid}},
                                    "created": []})
        for _ in range(100):  # the tag is readable once the child has exec'ed
            if runstate.process_tag(daemon.pid) == name:
                break
            subprocess.run(["sleep", "0.02"], check=True)
        said = CtlTestbed(name, rdir, tmp_path).down()
    finally:
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait()
    mentions = [x for x in said if f"process {daemon.pid}" in x]
    assert mentions == [f"process {daemon.pid} (node daemon c1)"], said
    assert not rdir.exists()
