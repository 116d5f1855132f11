"""The fork server (nodes/daemon/forkserver.py, testbed/mininet/forkclient.py; issue 13 item 4).

Real daemons, forked in this box's own namespaces (a Mininet host is not needed to prove the
process contract): each is a process of its own with its pid, log, pidfile and control
socket, re-parented to the caller (a child subreaper) so that the caller reads its exit
status; ``kill -9`` of one leaves the other daemon and the server serving; a bad request is
a one-line error. The caller runs in a child process of the test, so that the subreaper
setting does not change the pytest worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.spawn import PROJECT_ROOT

CALLER = textwrap.dedent("""
    import json, os, signal, sys, time
    from nodes.daemon.client import request
    from testbed.mininet.forkclient import DaemonProcess, ForkServer
    rdir = sys.argv[1]
    out = {}
    fs = ForkServer(dict(os.environ), 60.0)
    def req(node, *extra):
        return {"node": node, "ns_pid": os.getpid(), "log": f"{rdir}/{node}.log",
                "argv": ["--testbed", "t", "--node", node, "--rundir", rdir, *extra]}
    started = fs.start([req("n1"), req("n2"), {"node": "bad", "argv": "nope"},
                        {**req("n3"), "ns_pid": 999999999}])
    out["started"] = started
    procs = {n: DaemonProcess(p) for n, p in zip(("n1", "n2"), started[:2])}
    def hello(node):
        sock = f"{rdir}/nodes/{node}.sock"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if os.path.exists(sock):
                try:
                    return request(sock, {"cmd": "hello"}, timeout=2.0)
                except Exception:
                    pass
            time.sleep(0.05)
        return None
    out["hello"] = {n: hello(n) for n in procs}
    out["parent"] = {n: int(open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[1])
                     for n, p in procs.items()}
    out["me"] = os.getpid()
    out["sigign"] = {n: [int(ln.split()[1], 16) for ln in open(f"/proc/{p.pid}/status")
                         if ln.startswith("SigIgn:")][0] for n, p in procs.items()}
    out["server"] = fs.pid
    os.kill(procs["n1"].pid, signal.SIGKILL)
    out["rc_killed"] = procs["n1"].wait(10)
    out["hello_after"] = request(f"{rdir}/nodes/n2.sock", {"cmd": "hello"}, timeout=5.0)
    again = fs.start([req("n4")])
    out["again"] = again
    out["hello_n4"] = hello("n4")
    for n, p in (("n2", procs["n2"]), ("n4", DaemonProcess(again[0]))):
        request(f"{rdir}/nodes/{n}.sock", {"cmd": "shutdown"}, timeout=5.0)
        out[f"rc_{n}"] = p.wait(10)
    fs.stop()
    out["server_rc"] = fs.proc.returncode
    print(json.dumps(out))
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="setns needs root")
def test_forked_daemons_are_separate_processes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "LNET_TESTBED_RUNROOT": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", CALLER, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=180, check=False)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    n1, n2, bad, n3 = out["started"]
    assert isinstance(n1, int) and isinstance(n2, int) and n1 != n2
    assert "request is not" in bad
    assert isinstance(n3, str) and "node n3" in n3 and "999999999" in n3
    assert out["hello"]["n1"]["node"] == "n1" and out["hello"]["n2"]["node"] == "n2"
    # re-parented to the caller, not the server's children
    assert out["parent"] == {"n1": out["me"], "n2": out["me"]}
    # SIGPIPE ignored, as in `python -m nodes.daemon` (the interpreter ignores it at start):
    # a send on a TCP connection its peer reset is EPIPE, not the daemon's death (the soak's
    # daemons died with -13 when the fork server reset it to SIG_DFL)
    assert all(mask & (1 << (signal.SIGPIPE - 1)) for mask in out["sigign"].values()), out
    assert out["rc_killed"] == -9
    assert out["hello_after"]["node"] == "n2"  # kill -9 of one: the other serves on
    assert isinstance(out["again"][0], int) and out["hello_n4"]["node"] == "n4"
    assert out["rc_n2"] == 0 and out["rc_n4"] == 0
    assert out["server_rc"] == 0
    for node in ("n1", "n2", "n4"):
        assert "node " + node + " up" in (tmp_path / f"{node}.log").read_text()
    pid_n2 = int((tmp_path / "nodes" / "n2.pid").read_text())
    assert pid_n2 == n2
    assert not (tmp_path / "nodes" / "n2.sock").exists()  # removed on shutdown
