"""The per-testbed supervisor: realises a plan on Mininet, then serves ``ctl.sock`` until down.

Theory of operation (STYLE rules 8-12): ``testbed up`` (``testbed.api.Testbed.up``) validates
the topology, then spawns ``python -m testbed.supervisor --name NAME [--topology PATH]`` in a
new session with ``LNET_TESTBED=NAME`` in its environment, so that it and every process it
starts (Mininet host shells, node daemons) carries the owner tag. The supervisor:

1. creates the run directory (atomic mkdir: one ``up`` per name) and records, in state.json and
   *before* creating it, every bridge, veth, host and daemon;
2. builds the network with Mininet: one ``LinuxBridge`` per segment, one host (network
   namespace) per node, one veth per interface named eth0, eth1, ... inside the node and
   ``names.port_name`` outside; IPv6 off, ``arp_ignore=1``/``arp_announce=2``, no default route;
3. starts one node daemon per host and waits (bounded) for each to answer ``hello``;
4. applies each node's configuration through the lnetctl verbs (contract B);
5. reports progress as JSON lines on its stdout (``{"progress": ...}``, then ``{"ready": ...}``
   or ``{"error": ...}``) to the ``up`` process, then detaches stdout to supervisor.log;
6. serves JSON requests on a ZeroMQ ROUTER at ``ipc://RUNDIR/ctl.sock``: ``status``, ``link``,
   ``down``. SIGTERM means ``down``.

If anything fails midway, everything created so far is removed before exiting non-zero.
Teardown does not use ``Mininet.stop()``: that talks to each host through its pty shell with
unbounded waits; here every step is an argv command or a signal with a timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import zmq

from nodes.daemon.client import DaemonUnreachable, request
from testbed import clean, faultctl, names, runstate, sh
from testbed.nodeconfig import config_verbs
from testbed.topology import NodePlan, Plan, TopologyError, load_topology

#: Seconds every daemon gets to answer its first ``hello``.
HELLO_TIMEOUT = 30.0
#: Seconds one configuration verb may take.
CONFIG_TIMEOUT = 30.0
#: Seconds a daemon gets to exit after ``shutdown`` before it is signalled.
SHUTDOWN_GRACE = 3.0
TOTAL_STEPS = 5
NODE_SYSCTLS = (
    "net.ipv6.conf.all.disable_ipv6=1",
    "net.ipv6.conf.default.disable_ipv6=1",
    "net.ipv4.conf.all.arp_ignore=1",
    "net.ipv4.conf.all.arp_announce=2",
)
PROJECT_ROOT = Path(__file__).resolve().parent.parent


class BringUpError(Exception):
    """Bring-up cannot continue; the message is the one-line reason shown to the user."""


class Terminated(Exception):
    """SIGTERM arrived during bring-up."""


#: Set by SIGTERM once the testbed is up: the serve loop then takes it down.
_STOP = {"requested": False}


def _raise_terminated(_signum: int, _frame: object) -> None:
    raise Terminated("terminated by SIGTERM during bring-up")


def _request_stop(_signum: int, _frame: object) -> None:
    _STOP["requested"] = True


def child_env(name: str, rdir: Path) -> dict[str, str]:
    """Environment of every process of this testbed: the owner tag and the import path."""
    env = dict(os.environ)
    env[runstate.ENV_NAME] = name
    env[runstate.ENV_RUNDIR] = str(rdir)
    env[runstate.ENV_RUNROOT] = str(rdir.parent)
    paths = [str(PROJECT_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(tail) if tail else "(empty log)"


class Supervisor:
    """One testbed: its plan, what was created for it, and the Mininet objects."""

    def __init__(self, plan: Plan, rdir: Path, proto: IO[str] | None) -> None:
        self.plan = plan
        self.name = plan.name
        self.rdir = rdir
        self.proto = proto
        self.env = child_env(self.name, rdir)
        self.net: Any = None
        self.hosts: dict[str, Any] = {}
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.link_state: dict[str, dict[str, str]] = {
            n.name: {i.name: "up" for i in n.interfaces} for n in plan.nodes
        }
        self.dead_reported: set[str] = set()
        self.started = time.time()
        self.state: dict[str, Any] = {
            "name": self.name,
            "hash": names.short_hash(self.name),
            "topology": plan.source,
            "supervisor_pid": os.getpid(),
            "phase": "starting",
            "started": self.started,
            "created": [],
            "nodes": {},
        }
        self.save()
        self.faults = faultctl.FaultManager(self)  # faults of this testbed (issue 5)

    # -- bookkeeping ---------------------------------------------------------------------------

    def save(self) -> None:
        runstate.write_state(self.rdir, self.state)

    def record(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Record that ``kind`` is about to be created (STYLE rule 9: before, not after)."""
        item = {"kind": kind, **fields}
        self.state["created"].append(item)
        self.save()
        return item

    def progress(self, step: int, text: str) -> None:
        self.send({"progress": text, "step": step, "total": TOTAL_STEPS})

    def send(self, msg: dict[str, Any]) -> None:
        if self.proto is not None:
            self.proto.write(json.dumps(msg) + "\n")
            self.proto.flush()
        print(json.dumps(msg), flush=True)  # the log (fd 1 is supervisor.log)

    # -- bring-up ------------------------------------------------------------------------------

    def bring_up(self) -> None:
        names.check_free(self.name)
        self.progress(1, f"topology {self.name}: {len(self.plan.nodes)} nodes, "
                         f"{len(self.plan.segments)} segments ({self.plan.source})")
        self.progress(2, "creating network: " + " ".join(s.name for s in self.plan.segments))
        self.build_network()
        self.progress(3, "starting daemons: " + " ".join(n.name for n in self.plan.nodes))
        for node in self.plan.nodes:
            self.start_daemon(node)
        self.progress(4, "waiting for daemons: " + " ".join(n.name for n in self.plan.nodes))
        self.wait_hello()
        self.progress(5, "configuring LNet: " + " ".join(n.name for n in self.plan.nodes))
        for node in self.plan.nodes:
            self.configure(node)
        self.state["phase"] = "ready"
        self.save()
        runstate.append_event(self.rdir, "up", testbed=self.name,
                              seconds=round(time.time() - self.started, 3))
        for raw in self.plan.faults:  # the topology's `faults:` schedule starts now
            reply = self.faults.add(dict(raw))
            if not reply.get("ok"):
                raise BringUpError(f"faults: {reply.get('error')}")

    def build_network(self) -> None:
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.nodelib import LinuxBridge

        setLogLevel("warning")
        # Mininet.init() would run fixLimits(), rewriting host-wide sysctls and rlimits.
        Mininet.inited = True
        net = Mininet(topo=None, controller=None, switch=LinuxBridge, build=False,
                      autoSetMacs=False, waitConnected=False)
        self.net = net
        switches = {}
        for i, seg in enumerate(self.plan.segments):
            br = names.bridge_name(self.name, i)
            self.record("bridge", name=br, segment=seg.name)
            switches[seg.name] = net.addSwitch(br, cls=LinuxBridge)
        for node in self.plan.nodes:
            self.record("host", node=node.name)
            host = net.addHost(node.name, ip=None, inNamespace=True)
            self.hosts[node.name] = host
            self.state["nodes"][node.name] = {"host_pid": host.pid, "interfaces": {},
                                              "nids": list(node.nids)}
            self.save()
            sh.run_checked(["sysctl", "-q", "-w", *NODE_SYSCTLS], ns_pid=host.pid)
        seg_index = {s.name: i for i, s in enumerate(self.plan.segments)}
        for j, node in enumerate(self.plan.nodes):
            for iface in node.interfaces:
                port = names.port_name(self.name, seg_index[iface.segment], j)
                self.record("veth", name=port, node=node.name, iface=iface.name)
                self.state["nodes"][node.name]["interfaces"][iface.name] = port
                net.addLink(self.hosts[node.name], switches[iface.segment],
                            intfName1=iface.name, intfName2=port,
                            params1={"ip": f"{iface.ip}/{iface.prefixlen}"})
        self.save()
        net.start()
        for node in self.plan.nodes:
            self.check_addresses(node)

    def check_addresses(self, node: NodePlan) -> None:
        """A node has exactly its planned IPv4 addresses, its links up, no default route."""
        pid = self.hosts[node.name].pid
        sh.run_checked(["ip", "route", "flush", "exact", "0.0.0.0/0"], ns_pid=pid)
        out = sh.run_checked(["ip", "-4", "-o", "addr", "show"], ns_pid=pid).out
        have = set()
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 4 and fields[1] != "lo":
                have.add((fields[1], fields[3]))
        want = {(i.name, f"{i.ip}/{i.prefixlen}") for i in node.interfaces}
        if have != want:
            raise BringUpError(f"node {node.name}: addresses {sorted(have)} != {sorted(want)}")

    def daemon_argv(self, node: NodePlan) -> list[str]:
        return [sys.executable, "-m", "nodes.daemon", "--testbed", self.name,
                "--node", node.name, "--rundir", str(self.rdir)] + [
                    f"--lnet-param={k}={v}" for k, v in node.module_params]  # spec §0

    def start_daemon(self, node: NodePlan) -> None:
        host = self.hosts[node.name]
        argv = self.daemon_argv(node)
        self.record("daemon", node=node.name)
        with open(runstate.node_log(self.rdir, node.name), "ab") as log:
            proc = host.popen(argv, mncmd=["mnexec", "-a", str(host.pid)], env=self.env,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                              cwd="/", start_new_session=True)
        self.daemons[node.name] = proc
        info = self.state["nodes"][node.name]
        info["daemon_pid"] = proc.pid
        info["sock"] = str(runstate.node_sock(self.rdir, node.name))
        self.save()
        runstate.append_event(self.rdir, "node_started", node=node.name, pid=proc.pid)

    def wait_hello(self) -> None:
        pending = [n.name for n in self.plan.nodes]
        deadline = time.monotonic() + HELLO_TIMEOUT
        while pending:
            for node in list(pending):
                proc = self.daemons[node]
                if proc.poll() is not None:
                    raise BringUpError(
                        f"daemon of node {node} exited with rc {proc.returncode}: "
                        f"{log_tail(runstate.node_log(self.rdir, node))}")
                sock = runstate.node_sock(self.rdir, node)
                if not sock.exists():
                    continue
                try:
                    reply = request(str(sock), {"cmd": "hello"}, timeout=1.0)
                except DaemonUnreachable:
                    continue
                if reply.get("ok") and reply.get("node") == node:
                    pending.remove(node)
            if not pending:
                break
            if time.monotonic() >= deadline:
                node = pending[0]
                raise BringUpError(
                    f"daemon of node {node} did not answer hello within {HELLO_TIMEOUT:g}s: "
                    f"{log_tail(runstate.node_log(self.rdir, node))}")
            time.sleep(0.05)

    def configure(self, node: NodePlan) -> None:
        """Contract B: lnet configure, net add per interface, set per tunable, peer add."""
        verbs = config_verbs(self.plan, node, self.rdir / "nodes")
        sock = str(runstate.node_sock(self.rdir, node.name))
        for verb in verbs:
            try:
                reply = request(sock, {"cmd": "lnetctl", "argv": verb}, timeout=CONFIG_TIMEOUT)
            except DaemonUnreachable as exc:
                raise BringUpError(f"node {node.name}: lnetctl {' '.join(verb)}: {exc}") from exc
            if reply.get("rc") != 0:
                output = " ".join(f"{reply.get('out', '')} {reply.get('err', '')}".split())
                raise BringUpError(f"node {node.name}: lnetctl {' '.join(verb)} failed with "
                                   f"rc {reply.get('rc')}: {output}")

    # -- serving -------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        nodes = {}
        for node in self.plan.nodes:
            info = self.state["nodes"].get(node.name, {})
            proc = self.daemons.get(node.name)
            nodes[node.name] = {
                "pid": info.get("daemon_pid"),
                "host_pid": info.get("host_pid"),
                "alive": proc is not None and proc.poll() is None,
                "sock": info.get("sock"),
                "nids": list(node.nids),
                "interfaces": {
                    i.name: {"kernel": info.get("interfaces", {}).get(i.name),
                             "segment": i.segment, "nid": i.nid,
                             "state": self.link_state[node.name][i.name]}
                    for i in node.interfaces
                },
            }
        segments = {s.name: {"lnet": s.lnet, "subnet": str(s.subnet),
                             "bridge": names.bridge_name(self.name, i)}
                    for i, s in enumerate(self.plan.segments)}
        return {"ok": True, "name": self.name, "topology": self.plan.source,
                "phase": self.state["phase"], "supervisor_pid": os.getpid(),
                "rundir": str(self.rdir), "started": self.started,
                "nodes": nodes, "segments": segments}

    def link(self, msg: dict[str, Any]) -> dict[str, Any]:
        node, iface, updown = msg.get("node"), msg.get("iface"), msg.get("state")
        if node not in self.link_state:
            return {"ok": False, "error": f"no node {node!r} in testbed {self.name}"}
        if iface not in self.link_state[node]:
            return {"ok": False, "error": f"node {node} has no interface {iface!r} "
                                          f"(has {', '.join(self.link_state[node])})"}
        if updown not in ("up", "down"):
            return {"ok": False, "error": f"link state must be up or down, not {updown!r}"}
        result = sh.run(["ip", "link", "set", "dev", iface, updown],
                        ns_pid=self.hosts[node].pid)
        if result.rc != 0:
            return {"ok": False, "error": str(sh.CommandError(["ip", "link", "set", "dev",
                                                               iface, updown], result))}
        self.link_state[node][iface] = updown
        runstate.append_event(self.rdir, f"link_{updown}", node=node, iface=iface)
        return {"ok": True, "node": node, "iface": iface, "state": updown}

    def watch_daemons(self) -> None:
        for node, proc in self.daemons.items():
            if node not in self.dead_reported and proc.poll() is not None:
                self.dead_reported.add(node)
                runstate.append_event(self.rdir, "node_died", node=node, rc=proc.returncode)

    def serve(self) -> None:
        """Answer control requests until ``down`` or SIGTERM."""
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 1000)
        ctl = runstate.ctl_sock(self.rdir)
        sock.bind(f"ipc://{ctl}")
        os.chmod(ctl, 0o600)
        try:
            while not _STOP["requested"]:
                self.watch_daemons()
                self.faults.tick()
                due = self.faults.next_deadline()
                wait = 500 if due is None else int(min(500, max(0.0, due - time.time()) * 1000))
                if not sock.poll(wait):
                    continue
                frames = sock.recv_multipart()
                reply, done = self.handle(frames[-1])
                if done:
                    self.teardown()
                sock.send_multipart([*frames[:-1], json.dumps(reply).encode()])
                if done:
                    return
            self.teardown()
        finally:
            sock.close(linger=1000)
            ctx.term()

    def handle(self, body: bytes) -> tuple[dict[str, Any], bool]:
        try:
            msg = json.loads(body)
        except ValueError:
            return {"ok": False, "error": "request is not JSON"}, False
        cmd = msg.get("cmd") if isinstance(msg, dict) else None
        if cmd == "status":
            return self.status(), False
        if cmd == "link":
            return self.link(msg), False
        if cmd == "down":
            return {"ok": True, "name": self.name}, True
        if cmd == "fault_add":
            return self.faults.add(msg.get("spec")), False
        if cmd == "fault_list":
            return self.faults.list(residue=bool(msg.get("residue"))), False
        if cmd == "fault_del":
            return self.faults.delete(msg.get("id")), False
        if cmd == "fault_clear":
            return self.faults.clear(), False
        return {"ok": False, "error": f"unknown request {cmd!r}"}, False

    # -- teardown ------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Remove everything of this testbed; bounded; never raises."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.state["phase"] = "stopping"
        with contextlib.suppress(OSError):
            self.save()
        self.faults.shutdown()  # held packets released, rules, qdiscs, interposers removed
        for node, proc in self.daemons.items():
            if proc.poll() is None:
                with contextlib.suppress(DaemonUnreachable):
                    request(str(runstate.node_sock(self.rdir, node)), {"cmd": "shutdown"},
                            timeout=1.0)
        deadline = time.monotonic() + SHUTDOWN_GRACE
        for proc in self.daemons.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        clean.terminate([p.pid for p in self.daemons.values() if p.poll() is None])
        for proc in self.daemons.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.5)
        self.stop_mininet()
        removed = clean.kill_tagged(self.name)  # stray `testbed exec` children, shells
        removed += clean.delete_interfaces(clean.recorded_interfaces(self.state))
        print(json.dumps({"teardown": removed}), flush=True)
        runstate.append_event(self.rdir, "down", testbed=self.name)
        clean.remove_files(self.rdir)

    def stop_mininet(self) -> None:
        """End the Mininet host and switch shells (their namespaces go with them)."""
        if self.net is None:
            return
        shells = [n.shell for n in (*self.net.hosts, *self.net.switches)
                  if getattr(n, "shell", None) is not None]
        for shell in shells:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(shell.pid, signal.SIGHUP)
        clean.terminate([s.pid for s in shells if s.poll() is None], grace=1.0)
        for shell in shells:
            with contextlib.suppress(subprocess.TimeoutExpired):
                shell.wait(timeout=0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.supervisor")
    parser.add_argument("--name", required=True)
    parser.add_argument("--topology", default=None)
    args = parser.parse_args(argv)
    # fd 1 is the pipe to `testbed up`: keep it for progress only; everything else we (and
    # Mininet, and any library) print goes to supervisor.log once the run directory exists.
    proto = os.fdopen(os.dup(1), "w")
    try:
        plan = load_topology(args.topology, name=args.name)
        rdir = runstate.create_rundir(plan.name)
    except TopologyError as exc:
        proto.write(json.dumps({"error": str(exc)}) + "\n")
        return 1
    except FileExistsError:
        proto.write(json.dumps({"error": f"testbed {args.name} already has a run directory "
                                         f"{runstate.rundir(args.name)}: it is up, or a "
                                         "leftover remains (run `testbed clean`)"}) + "\n")
        return 1
    logfd = os.open(rdir / runstate.SUPERVISOR_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(logfd, 1)
    os.dup2(logfd, 2)
    os.close(logfd)
    os.chdir("/")
    os.environ.update(child_env(plan.name, rdir))  # Mininet's shells inherit the owner tag
    signal.signal(signal.SIGTERM, _raise_terminated)
    sup = Supervisor(plan, rdir, proto)
    try:
        sup.bring_up()
        signal.signal(signal.SIGTERM, _request_stop)
    except (Exception, Terminated, KeyboardInterrupt) as exc:
        import traceback

        traceback.print_exc()
        message = str(exc) if isinstance(exc, BringUpError | Terminated | names.NameCollision
                                          | sh.CommandError) else f"{type(exc).__name__}: {exc}"
        sup.proto = None
        sup.teardown()
        _send_final(proto, {"error": message})
        return 1
    summary = {n.name: list(n.nids) for n in plan.nodes}
    _send_final(proto, {"ready": {"name": plan.name, "rundir": str(rdir), "nodes": summary,
                                  "seconds": round(time.time() - sup.started, 3)}})
    sup.proto = None
    sup.serve()
    return 0


def _send_final(proto: IO[str], msg: dict[str, Any]) -> None:
    try:
        proto.write(json.dumps(msg) + "\n")
        proto.close()
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
