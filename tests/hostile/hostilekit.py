"""Shared header of the hostile-input suite (issue 11): raw requests, the after-checks.

Theory of operation: every real-process test of ``tests/hostile`` attacks one node daemon
(``c1`` of ``pair.yaml``) through one door -- its control socket, its socklnd listener --
and then asks what a Lustre engineer would ask of a node that was attacked: does it still
answer an LNet ping from its peer, did its RSS grow by at most ``RSS_SLACK_KB``, and did it
create anything (files in the run directory, interfaces in its namespace or the host's)?
``Baseline`` takes the picture before, ``Baseline.verify`` compares after. Hypothesis runs
derandomized with bounded example counts (``FUZZ``): the corpus is the same on every run, and
CI time is bounded.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from hypothesis import HealthCheck, settings

HERE = Path(__file__).resolve().parent
PAIR = HERE / "pair.yaml"
#: issue 11: an attacked daemon's RSS grows by at most 20 MB
RSS_SLACK_KB = 20 * 1024
#: derandomized (fixed seed), no per-example deadline (the machine is shared), bounded count
FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"pid {pid} has no VmRSS")


def raw_request(path: str | Path, body: bytes, timeout: float = 20.0) -> dict[str, Any] | None:
    """Send ``body`` as one ZeroMQ REQ frame; the decoded reply, None if none came."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"ipc://{path}")
        sock.send(body)
        if not sock.poll(int(timeout * 1000)):
            return None
        reply = json.loads(sock.recv())
        assert isinstance(reply, dict), reply
        return reply
    finally:
        sock.close(0)
        ctx.term()


def zmtp_garbage(path: str | Path, data: bytes, wait: float = 0.5) -> None:
    """Write ``data`` straight to a ZeroMQ ipc socket (below ZMTP: a peer that speaks no
    ZeroMQ at all), then read whatever comes back until EOF or ``wait`` seconds."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(wait)
    try:
        s.connect(str(path))
        s.sendall(data)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not s.recv(65536):
                break
    except OSError:
        pass  # refused, reset or timed out: all fine, the server is asked afterwards
    finally:
        s.close()


def one_line_refusal(reply: dict[str, Any] | None, what: str) -> None:
    """A refusal is ``{"ok": false, "error": <one line>}``, never a traceback."""
    assert reply is not None, f"{what}: no reply"
    if reply.get("ok") is False:
        err = reply.get("error")
        assert isinstance(err, str) and err and "\n" not in err, f"{what}: {reply!r}"[:500]
        assert "Traceback" not in err and "internal error" not in err, f"{what}: {err}"[:500]
        assert len(err) < 2000, f"{what}: a {len(err)}-character error echoes its input"


def interfaces(ns_pid: int | None) -> set[str]:
    """Interface names in the namespace of ``ns_pid`` (None: the host's)."""
    cmd = ["ip", "-o", "link", "show"]
    if ns_pid is not None:
        cmd = ["nsenter", "-t", str(ns_pid), "-n", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return {ln.split(":")[1].strip().split("@")[0] for ln in out.splitlines() if ":" in ln}


def files(rdir: Path) -> set[str]:
    return {str(p.relative_to(rdir)) for p in rdir.rglob("*")}


@dataclass
class Baseline:
    """What node ``victim`` of testbed ``tb`` looks like before an attack."""

    tb: Any
    victim: str
    pinger: str
    pid: int
    rss: int
    ns_ifaces: set[str]
    rundir_files: set[str]

    @classmethod
    def take(cls, tb: Any, victim: str = "c1", pinger: str = "s1") -> Baseline:
        node = tb.node(victim)
        ping_ok(tb, victim, pinger)  # connections up before the RSS is read
        return cls(tb, victim, pinger, node.pid, rss_kb(node.pid), interfaces(node.host_pid),
                   files(Path(tb.rundir)))

    def verify(self) -> None:
        """The daemon answers an LNet ping, grew <= 20 MB, created nothing; same process."""
        node = self.tb.node(self.victim)
        assert node.pid == self.pid and os.path.exists(f"/proc/{self.pid}"), \
            f"{self.victim}'s daemon {self.pid} is gone"
        ping_ok(self.tb, self.victim, self.pinger)
        grown = rss_kb(self.pid) - self.rss
        assert grown <= RSS_SLACK_KB, f"{self.victim}'s RSS grew by {grown} kB"
        new_if = interfaces(node.host_pid) - self.ns_ifaces
        assert not new_if, f"new interfaces in {self.victim}'s namespace: {new_if}"
        rdir = Path(self.tb.rundir)
        new_files = {f for f in files(rdir) - self.rundir_files
                     if not f.endswith((".log", ".jsonl", ".csv", ".rec"))}  # observations
        assert not new_files, f"new files in the run directory: {sorted(new_files)}"


def ping_ok(tb: Any, victim: str, pinger: str) -> None:
    """``pinger`` LNet-pings every NID of ``victim`` (a bounded wait, retried once: the
    attack may just have made it drop a connection)."""
    for nid in tb.node(victim).nids:
        res = tb.node(pinger).lnetctl("ping", nid, "--timeout", "10")
        if res.rc != 0:
            res = tb.node(pinger).lnetctl("ping", nid, "--timeout", "10")
        assert res.rc == 0 and nid in res.out, f"ping {nid} from {pinger}: {res}"
