"""The ``hosts`` backend on this machine alone: the agent, the CURVE control plane, the
supervisor and the merged event log without any guest (root; seconds). Issue 15 item 2-4:
same verbs as Mininet (status, lnetctl, exec, link, faults, events, down)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

import testbed
from testbed.clean import leftovers

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, bridges)")
DEFAULT = Path(__file__).resolve().parents[2] / "topologies" / "default.yaml"


def test_hosts_backend_on_this_machine() -> None:
    name = f"hl{uuid.uuid4().hex[:8]}"
    tb = testbed.up(DEFAULT, backend="hosts", name=name)
    try:
        assert isinstance(tb, testbed.Testbed)  # the backend seam's protocols
        assert isinstance(tb.node("c1"), testbed.NodeHandle)
        st = tb.status()
        assert st["backend"] == "hosts" and {i["host"] for i in st["nodes"].values()} == {"local"}
        assert all(i["endpoint"].startswith("tcp://127.0.0.1:") for i in st["nodes"].values())
        c1, s1 = tb.node("c1"), tb.node("s1")
        assert c1.ping(s1.nids[1]).rc == 0
        assert c1.put(s1.nids[0], count=50, size=4096)["completed"] == 50
        out = c1.exec(["lnetctl", "net", "show"])  # the project's lnetctl, in c1's namespace
        assert out.rc == 0 and "10.10.0.1@tcp" in out.out, out
        tb.link("c1", "eth1", "down")  # bridge-side veth: c1 sees carrier loss
        assert "NO-CARRIER" in c1.exec(["ip", "link", "show", "eth1"]).out
        # a packet fault: the interposer in c1's namespace through the host agent (issue 32
        # item 1), its counters back on delete, its rule and process gone after
        loss = tb.fault.add("loss", node="c1", rate=0.5, seed=3, match={"type": "PUT"})
        assert c1.put(s1.nids[0], count=20, size=4096)["completed"] == 20
        counters = tb.fault.delete(loss["id"])["counters"]
        assert counters["dropped"] > 0 and counters["matched"] >= 20, counters
        assert "lntb:" not in c1.exec(["iptables", "-S"]).out
        f = tb.fault.add("kill", node="s1")
        assert f["state"] in ("active", "done")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(
                e["kind"] == "link_down" for e in tb.events()):
            time.sleep(0.2)
        kinds = [e["kind"] for e in tb.events()]
        assert {"node_started", "up", "link_down", "fault_applied"} <= set(kinds), kinds
        assert "node_died" not in kinds  # a kill fault's death is expected
    finally:
        tb.down()
    assert leftovers(name) == []


def test_down_at_exit_and_context_manager(tmp_path: Path) -> None:
    """The atexit path: a script that brings a testbed up with ``down_at_exit`` and ends
    without ``down`` leaves nothing; ``with`` does the same."""
    import subprocess
    import sys

    name = f"hx{uuid.uuid4().hex[:8]}"
    script = ("import testbed, sys; tb = testbed.up(sys.argv[1], backend='hosts', "
              "name=sys.argv[2], down_at_exit=True); "
              "assert tb.node('c1').ping(tb.node('s1').nids[0]).rc == 0")
    res = subprocess.run([sys.executable, "-c", script, str(DEFAULT), name],
                         capture_output=True, text=True, timeout=180, check=False,
                         cwd=str(DEFAULT.parents[1]))
    assert res.returncode == 0, res.stderr[-2000:]
    assert leftovers(name) == []
    from testbed.vagrant.client import VagrantTestbed

    with VagrantTestbed.up(DEFAULT, backend="hosts", name=name) as tb:
        assert tb.node("c1").ping(tb.node("s1").nids[1]).rc == 0
    assert leftovers(name) == []


def test_recorder_and_message_trace_gathered_from_the_hosts() -> None:
    """``record_period`` and ``trace_messages`` reach every daemon (issue 16's options, as on
    Mininet); a flush (what ``testbed report`` and the pytest plugin's teardown check do)
    copies each host's ``NODE.rec`` and ``NODE.trace.jsonl`` into the run directory."""
    import json

    from testbed.observe import eventlog, recfile

    name = f"ho{uuid.uuid4().hex[:8]}"
    tb = testbed.up(DEFAULT, backend="hosts", name=name, record_period=0.2,
                    trace_messages=True)
    try:
        c1, s1 = tb.node("c1"), tb.node("s1")
        assert c1.put(s1.nids[0], count=20, size=4096)["completed"] == 20
        time.sleep(0.5)  # a few recorder periods
        assert not (tb.rundir / "nodes" / "c1.rec").exists()  # on its host until a flush
        assert eventlog.flush_writers(tb.rundir) == []
        recs = recfile.read_dir(tb.rundir)
        assert set(recs) == {"c1", "s1"} and all(len(r.rows) >= 2 for r in recs.values())
        lines = (tb.rundir / "nodes" / "c1.trace.jsonl").read_text().splitlines()
        msgs = [json.loads(x) for x in lines]
        assert sum(1 for m in msgs if m["kind"] == "msg") >= 20, msgs[:3]
    finally:
        tb.down()
    assert leftovers(name) == []


def test_hosts_node_sysfs_params_written_inside_the_node() -> None:
    """Issue 26 item 9 on the hosts backend: the daemon ``ip netns exec`` started serves
    /sys/module in its own mount namespace and ``exec`` enters it; ``echo 3 >``
    ``lnet_health_sensitivity`` is ``lnetctl set health_sensitivity 3`` (``global show``),
    an out-of-range value fails the write in one line and changes nothing."""
    name = f"hs{uuid.uuid4().hex[:8]}"
    tb = testbed.up(DEFAULT, backend="hosts", name=name)
    path = "/sys/module/lnet/parameters/lnet_health_sensitivity"
    try:
        c1 = tb.node("c1")
        assert c1.exec(["sh", "-c", f"echo 3 > {path}"]).rc == 0
        assert c1.yaml("global show")["global"]["health_sensitivity"] == 3
        bad = c1.exec(["sh", "-c", f"echo 5000 > {path}"])
        assert bad.rc == 1 and bad.err == "sh: 1: echo: echo: I/O error\n", bad
        assert c1.exec(["cat", path]).out == "3\n"
        assert c1.ping(tb.node("s1").nids[0]).rc == 0
    finally:
        tb.down()
    assert leftovers(name) == []
