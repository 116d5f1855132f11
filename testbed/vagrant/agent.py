"""``python3 -m testbed.vagrant.agent``: what the orchestrator runs *on* a host or guest.

Theory of operation: the orchestrator keeps no shell open on a host; it runs this agent once per
operation (over SSH, or directly on this machine), with a JSON request on stdin where there is
one, and reads one JSON line back. The agent keeps the host's side of a testbed in
``/run/lnet-testbed-hosts/<testbed>/<host>/``: ``state.json`` (every object recorded before it
is made, STYLE rule 9), ``curve/<node>/`` (the daemon's keys, 0600), ``nodes/<node>.log``, and
``events.jsonl`` the daemons append to. Verbs:

* ``setup``: namespaces and interfaces (``agentnet``), then one node daemon per node, each in
  its namespace (``ip netns exec``) with its control port on the *management* address: the
  agent makes the listening socket here, in the host's own namespace, and hands it to the
  daemon (``--ctl-fd``, ZeroMQ's ``ZMQ_USE_FD``), so the port exists on that address only;
* ``poll``: new event lines since a byte offset and this host's clock, for the merged log;
* ``link``, ``signal``, ``restart``, ``status``: faults and checks on this host's nodes;
* ``fault-apply``, ``fault-revert``, ``fault-counters``: a fault's resources on this host's
  nodes, made and undone as on Mininet (``agentfaults``);
* ``teardown``: daemons (TERM, then KILL), namespaces, interfaces, files; prints what went.

``clock_skew`` (setup) is a test-only offset added to every time this host reports, standing
in for a host whose clock is wrong (containers share the kernel's clock).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from faults.nfqproc import pid_running as _alive
from testbed.vagrant import agentfaults, agentnet

ROOT = Path(os.environ.get("LNET_TESTBED_HOSTS_ROOT", "/run/lnet-testbed-hosts"))
SITE_ROOT = Path("/var/lib/lnet-testbed-hosts")  # hostset.SITE_ROOT (no import: stdlib only)
TERM_GRACE = 3.0
MAX_POLL_BYTES = 4 << 20


def host_dir(testbed: str, host: str) -> Path:
    return ROOT / testbed / host


class HostState:
    """``state.json`` of one host of one testbed, rewritten atomically at each change."""

    def __init__(self, hdir: Path) -> None:
        self.dir = hdir
        self.path = hdir / "state.json"
        try:
            self.data: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {"created": [], "daemons": {}, "nodes": {}}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)

    def record(self, kind: str, **fields: Any) -> None:
        self.data["created"].append({"kind": kind, **fields})
        self.save()


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def start_daemon(st: HostState, node: dict[str, Any]) -> dict[str, Any]:
    """One node daemon in its namespace; its CURVE port on the management address."""
    spec = st.data["spec"]
    cdir = st.dir / "curve" / node["name"]
    for rel, text in node["keys"].items():
        _write_private(cdir / rel, text)
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((spec["mgmt_address"], 0))
    lsock.listen(64)
    endpoint = f"tcp://{spec['mgmt_address']}:{lsock.getsockname()[1]}"
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LNET_TESTBED": spec["testbed"],
           "LNET_TESTBED_RUNDIR": str(st.dir), "PYTHONPATH": spec["pythonpath"],
           "LNET_TESTBED_CLOCK_SKEW": str(float(spec.get("clock_skew", 0.0)))}
    argv = ["ip", "netns", "exec", node["netns"], spec["python"], "-m", "nodes.daemon",
            "--testbed", spec["testbed"], "--node", node["name"], "--rundir", str(st.dir),
            "--ctl-tcp", endpoint, "--ctl-fd", str(lsock.fileno()), "--curve-dir", str(cdir),
            # `ip netns exec` gives the daemon a mount namespace of its own (and the netns's
            # /sys): it serves /sys/module there, never in the agent's (nodes/daemon/fusefs.py)
            f"--sysfs={os.stat('/proc/self/ns/mnt').st_ino}", *node.get("args", [])]
    (st.dir / "nodes").mkdir(exist_ok=True, mode=0o700)
    with open(st.dir / "nodes" / f"{node['name']}.log", "ab") as log:
        proc = subprocess.Popen(argv, pass_fds=(lsock.fileno(),), env=env, cwd="/",
                                stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    lsock.close()
    info = {"pid": proc.pid, "endpoint": endpoint}
    st.data["daemons"][node["name"]] = info
    st.save()
    return info


def setup(req: dict[str, Any]) -> dict[str, Any]:
    hdir = host_dir(req["testbed"], req["host"])
    hdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = HostState(hdir)
    # the nodes' /etc/hosts view, read by their daemons as RUNDIR/hosts (nodes/daemon/etchosts)
    _write_private(hdir / "hosts", str(req.get("etchosts", "")))
    st.data["spec"] = {k: v for k, v in req.items() if k not in ("nodes", "etchosts")}
    st.data["nodes"] = {n["name"]: n for n in req["nodes"]}
    st.save()
    guest = req["kind"] == "guest"
    for seg in req.get("segments", []):
        agentnet.make_segment(seg, st.record)
    for node in req["nodes"]:
        agentnet.make_node(node, guest, st.record)
    daemons = {n["name"]: start_daemon(st, n) for n in req["nodes"]}
    return {"ok": True, "daemons": daemons, "time": now(st)}


def now(st: HostState) -> float:
    return time.time() + float(st.data.get("spec", {}).get("clock_skew", 0.0))


def _ours(pid: int, testbed: str) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"LNET_TESTBED={testbed}".encode() in env


def stop_daemons(st: HostState, nodes: list[str] | None = None) -> list[str]:
    testbed = st.data.get("spec", {}).get("testbed", "")
    pids = {n: d["pid"] for n, d in st.data.get("daemons", {}).items()
            if (nodes is None or n in nodes) and _alive(d["pid"]) and _ours(d["pid"], testbed)}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig) if sig == signal.SIGKILL else os.kill(pid, sig)
                os.kill(pid, signal.SIGCONT)  # a stopped daemon must see its TERM
        deadline = time.monotonic() + TERM_GRACE
        while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not any(_alive(p) for p in pids.values()):
            break
    return [f"daemon {n} (pid {p})" for n, p in pids.items()]


def teardown(testbed: str, host: str) -> dict[str, Any]:
    hdir = host_dir(testbed, host)
    if not hdir.exists() and not (SITE_ROOT / testbed / host).exists():
        return {"ok": True, "removed": []}
    st = HostState(hdir)
    removed = agentfaults.undo_all(st)  # interposers and rules first, while nodes run
    removed += stop_daemons(st)
    removed += agentnet.remove(st.data.get("created", []))
    shutil.rmtree(hdir, ignore_errors=True)
    removed.append(f"directory {hdir}")
    site = SITE_ROOT / testbed / host  # the installed wheels (testbed/vagrant/deploy.py)
    if site.exists():
        shutil.rmtree(site, ignore_errors=True)
        removed.append(f"directory {site}")
    for top in (ROOT / testbed, SITE_ROOT / testbed):
        with contextlib.suppress(OSError):
            top.rmdir()
    return {"ok": True, "removed": removed}


def poll(st: HostState, offset: int) -> dict[str, Any]:
    """Event lines after byte ``offset`` (whole lines only), times as this host tells them."""
    skew = float(st.data.get("spec", {}).get("clock_skew", 0.0))
    events, end = [], offset
    try:
        with open(st.dir / "events.jsonl", "rb") as f:
            f.seek(offset)
            chunk = f.read(MAX_POLL_BYTES)
    except OSError:
        chunk = b""
    cut = chunk.rfind(b"\n") + 1
    for line in chunk[:cut].splitlines():
        with contextlib.suppress(ValueError):
            ev = json.loads(line)
            if isinstance(ev, dict) and isinstance(ev.get("t"), int | float):
                ev["t"] = ev["t"] + skew
                events.append(ev)
    end = offset + cut
    return {"ok": True, "events": events, "offset": end, "time": now(st)}


def status(st: HostState) -> dict[str, Any]:
    nodes = {}
    for name, node in st.data.get("nodes", {}).items():
        d = st.data["daemons"].get(name, {})
        nodes[name] = {"pid": d.get("pid"), "alive": _alive(d.get("pid", 0)),
                       "endpoint": d.get("endpoint"),
                       "carrier": agentnet.carriers(node["netns"])}
    return {"ok": True, "nodes": nodes, "time": now(st)}


def link(st: HostState, node: str, iface: str, state: str) -> dict[str, Any]:
    """On a machine: the bridge-side veth end, so the node sees carrier loss."""
    for item in st.data.get("created", []):
        if item.get("kind") == "veth" and item.get("node") == node and \
                item.get("iface") == iface:
            agentnet.sh("ip", "link", "set", "dev", item["name"], state)
            return {"ok": True}
    return {"ok": False, "error": f"no host-side port for {node} {iface} on this host"}


def send_signal(st: HostState, node: str, sig: str) -> dict[str, Any]:
    d = st.data.get("daemons", {}).get(node)
    if d is None or not _alive(d["pid"]):
        return {"ok": False, "error": f"daemon of {node} is not running"}
    os.kill(d["pid"], getattr(signal, f"SIG{sig}"))
    return {"ok": True, "pid": d["pid"]}


def restart(st: HostState, node: str) -> dict[str, Any]:
    stop_daemons(st, [node])
    return {"ok": True, **start_daemon(st, st.data["nodes"][node])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="testbed.vagrant.agent")
    p.add_argument("verb", choices=("setup", "teardown", "poll", "status", "link", "signal",
                                    "restart", "clock", "fault-apply", "fault-revert",
                                    "fault-counters"))
    p.add_argument("--testbed")
    p.add_argument("--host")
    p.add_argument("--node")
    p.add_argument("--iface")
    p.add_argument("--state", choices=("up", "down"))
    p.add_argument("--signal", choices=("STOP", "CONT", "KILL", "TERM"))
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--fault", help="fault id (fault-revert)")
    a = p.parse_args(argv)
    try:
        if a.verb == "setup":
            reply = setup(json.load(sys.stdin))
        elif a.verb.startswith("fault-"):
            body = json.load(sys.stdin) if a.verb == "fault-apply" else None
            reply = agentfaults.main_verb(HostState(host_dir(a.testbed, a.host)), a.verb,
                                          a.fault, body)
        elif a.verb == "teardown":
            reply = teardown(a.testbed, a.host)
        else:
            st = HostState(host_dir(a.testbed, a.host))
            reply = {"poll": lambda: poll(st, a.offset), "status": lambda: status(st),
                     "link": lambda: link(st, a.node, a.iface, a.state),
                     "signal": lambda: send_signal(st, a.node, a.signal),
                     "restart": lambda: restart(st, a.node),
                     "clock": lambda: {"ok": True, "time": now(st)}}[a.verb]()
    except (agentnet.AgentError, OSError, KeyError, ValueError) as exc:
        reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(reply), flush=True)
    return 0 if reply.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
