"""The per-testbed supervisor: realises a plan on Mininet, then serves ``ctl.sock`` until down.

Theory of operation (STYLE rules 8-12): ``testbed up`` (``MininetTestbed.up``) validates the
topology, then spawns ``python -m testbed.mininet.supervisor --name NAME [--topology PATH]`` in
a new session with ``LNET_TESTBED=NAME`` in its environment, so that it and every process it
starts (Mininet host shells, node daemons) carries the owner tag. The supervisor:

1. creates the run directory (atomic mkdir: one ``up`` per name) and records, in state.json and
   *before* creating it, every bridge, veth, host and daemon;
2. builds the network with Mininet: one ``LinuxBridge`` per segment, one host (network
   namespace) per node, one veth per interface named eth0, eth1, ... inside the node and
   ``names.port_name`` outside; IPv6 off, ``arp_ignore=1``/``arp_announce=2``, no default route;
3. starts one node daemon per host and waits (bounded) for each to answer ``hello``;
4. applies the configuration through the lnetctl verbs (contract B) in the order a real
   cluster comes up: every node's NIs first, then peers and routes, then waits (bounded) for
   the routes (``testbed.bringup``);
5. reports progress as JSON lines on its stdout (``{"progress": ...}``, then ``{"ready": ...}``
   or ``{"error": ...}``) to the ``up`` process, then detaches stdout to supervisor.log;
6. serves JSON requests on a ZeroMQ ROUTER at ``ipc://RUNDIR/ctl.sock``: ``status``, ``link``,
   ``down``, ``fault_*``, each checked field by field first (``testbed.ctlproto``; a bad one
   is refused in one line and serving goes on), one at a time; a request whose client went
   away while it waited its turn is not served (``clientwatch.ClosedClients``). SIGTERM
   means ``down``.

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
import threading
import time
from pathlib import Path
from typing import IO, Any

import zmq

from nodes.daemon import etchosts
from nodes.daemon.clientwatch import ClosedClients, source_fd
from nodes.echo import listed, shown
from testbed import bringup, clean, ctlproto, names, runstate, sh
from testbed.mininet import daemons, faultctl, netbuild
from testbed.mininet.forkclient import DaemonProcess, ForkServer
from testbed.mininet.netbuild import BringUpError
from testbed.plan import Plan, TopologyError, load_topology
from testbed.spawn import child_env

#: Seconds a daemon gets to exit after ``shutdown`` before it is signalled.
SHUTDOWN_GRACE = 3.0
TOTAL_STEPS = 7


class Terminated(Exception):
    """SIGTERM arrived during bring-up."""


#: Set by SIGTERM once the testbed is up: the serve loop then takes it down.
_STOP = {"requested": False}


def _raise_terminated(_signum: int, _frame: object) -> None:
    raise Terminated("terminated by SIGTERM during bring-up")


def _request_stop(_signum: int, _frame: object) -> None:
    _STOP["requested"] = True


class Supervisor:
    """One testbed: its plan, what was created for it, and the Mininet objects."""

    def __init__(self, plan: Plan, rdir: Path, proto: IO[str] | None,
                 observe: list[str] | None = None) -> None:
        self.plan = plan
        #: the daemons' recorder and message trace options (issue 16, ``daemon_argv``)
        self.observe = list(observe or [])
        self.name = plan.name
        self.rdir = rdir
        self.proto = proto
        self.env = child_env(self.name, rdir)
        self.net: Any = None
        self.hosts: dict[str, Any] = {}
        self.daemons: dict[str, DaemonProcess] = {}
        self.forkserver: ForkServer | None = None  # starts the daemons (issue 13 item 4)
        self.zctx = zmq.Context()  # for the requests to the daemons (one per request: slow)
        self.link_state: dict[str, dict[str, str]] = {
            n.name: {i.name: "up" for i in n.interfaces} for n in plan.nodes
        }
        self.dead_reported: set[str] = set()
        self.clients: ClosedClients | None = None  # while serving
        self.warnings: list[str] = []  # routes still down after bring-up, with why
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
        daemons.start_forkserver(self)  # imports the daemon's code while the network is built
        self.progress(2, "creating network: " + listed(s.name for s in self.plan.segments))
        netbuild.build_network(self)
        self.progress(3, "starting daemons: " + listed(n.name for n in self.plan.nodes))
        daemons.start_daemons(self, list(self.plan.nodes))
        self.progress(4, "waiting for daemons: " + listed(n.name for n in self.plan.nodes))
        daemons.wait_hello(self)
        lnet_dir = self.rdir / "nodes"
        bringup.configure(self.plan, lambda node, step: daemons.send(self, node, step),
                          lnet_dir, progress=lambda text: self.progress(
                              5 if text.startswith("configuring NIs") else 6, text),
                          parallel=netbuild.PARALLEL)
        self.progress(7, "waiting for routes")
        self.warnings = bringup.wait_routes(
            self.plan, lambda node, argv: daemons.verb(self, node, argv),
            advance=time.sleep, now=time.monotonic)
        for line in self.warnings:
            runstate.append_event(self.rdir, "route_not_up", text=line)
        self.state["phase"] = "ready"
        self.save()
        runstate.append_event(self.rdir, "up", testbed=self.name,
                              seconds=round(time.time() - self.started, 3))
        for raw in self.plan.faults:  # the topology's `faults:` schedule starts now
            reply = self.faults.add(dict(raw))
            if not reply.get("ok"):
                raise BringUpError(f"faults: {reply.get('error')}")

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
        """``link``: its fields' types were checked (``ctlproto``); their values here."""
        node, iface, updown = msg["node"], msg["iface"], msg["state"]
        if node not in self.link_state:
            return {"ok": False, "error": f"no node {shown(node)} in testbed {self.name}"}
        if iface not in self.link_state[node]:
            return {"ok": False, "error": f"node {node} has no interface {shown(iface)} "
                                          f"(has {', '.join(self.link_state[node])})"}
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
        sock.setsockopt(zmq.MAXMSGSIZE, ctlproto.MAX_FRAME_BYTES)  # larger: dropped unread
        ctl = runstate.ctl_sock(self.rdir)
        clients = self.clients = ClosedClients(sock)  # gone before its turn: not served
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
                frames = sock.recv_multipart(copy=False)
                if clients.gone(source_fd(frames)):
                    continue
                reply, done = self.handle(frames[-1].bytes)
                if done:
                    self.teardown()
                sock.send_multipart([*frames[:-1], json.dumps(reply).encode()])
                if done:
                    return
            self.teardown()
        finally:
            clients.close()
            sock.close(linger=1000)
            ctx.term()

    def handle(self, body: bytes) -> tuple[dict[str, Any], bool]:
        """One request -> (reply, take the testbed down?). Never raises: a request must not
        end the supervisor (issue 11 item 3); what does not fit is refused in one line."""
        try:
            msg = ctlproto.parse(body)
        except ctlproto.RequestError as exc:
            return {"ok": False, "error": str(exc)}, False
        try:
            return self._dispatch(msg)
        except Exception as exc:  # a bug shows in the log and the reply, the testbed stays
            import traceback

            traceback.print_exc()
            return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}, False

    def _dispatch(self, msg: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        cmd = msg["cmd"]
        if cmd == "status":
            return self.status(), False
        if cmd == "link":
            return self.link(msg), False
        if cmd == "reload":
            return self.faults.reload(msg["node"], msg["modules"]), False
        if cmd == "down":
            return {"ok": True, "name": self.name}, True
        if cmd == "fault_add":
            return self.faults.add(msg.get("spec")), False
        if cmd == "fault_list":
            return self.faults.list(residue=bool(msg.get("residue"))), False
        if cmd == "fault_del":
            return self.faults.delete(msg["id"]), False
        if cmd == "fault_clear":
            return self.faults.clear(), False
        return {"ok": False, "error": f"unknown request {shown(cmd)}"}, False

    # -- teardown ------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Remove everything of this testbed; bounded; never raises."""
        if threading.current_thread() is threading.main_thread():  # (tests serve in a thread)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.state["phase"] = "stopping"
        with contextlib.suppress(OSError):
            self.save()
        self.faults.shutdown()  # held packets released, rules, qdiscs, interposers removed
        for proc in self.daemons.values():  # SIGTERM is the daemon's `shutdown` (its
            proc.send_signal(signal.SIGTERM)  # handler), to all at once: one request each
            # waited in turn, a second per 100 daemons (issue 34)
        deadline = time.monotonic() + SHUTDOWN_GRACE
        for proc in self.daemons.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        clean.terminate([p.pid for p in self.daemons.values() if p.poll() is None])
        for proc in self.daemons.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.5)
        daemons.stop_forkserver(self)
        self.zctx.term()
        netbuild.stop_mininet(self)
        removed = clean.kill_tagged(self.name)  # stray `testbed exec` children, shells
        removed += clean.delete_interfaces(clean.recorded_interfaces(self.state))
        print(json.dumps({"teardown": removed}), flush=True)
        runstate.append_event(self.rdir, "down", testbed=self.name)
        clean.remove_files(self.rdir)

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.mininet.supervisor")
    parser.add_argument("--name", required=True)
    parser.add_argument("--topology", default=None)
    parser.add_argument("--record-period", default="0", metavar="SECONDS",
                        help="each daemon's recorder period (0: no recorder)")
    parser.add_argument("--trace-messages", action="store_true",
                        help="each daemon writes its message trace")
    args = parser.parse_args(argv)
    # fd 1 is the pipe to `testbed up`: keep it for progress only; everything else we (and
    # Mininet, and any library) print goes to supervisor.log once the run directory exists.
    proto = os.fdopen(os.dup(1), "w")
    try:
        plan = load_topology(args.topology, name=args.name, backend="mininet")
        rdir = runstate.create_rundir(plan.name)
    except TopologyError as exc:
        proto.write(json.dumps({"error": str(exc)}) + "\n")
        return 1
    except FileExistsError:
        proto.write(json.dumps({"error": f"testbed {args.name} already has a run directory "
                                         f"{runstate.rundir(args.name)}: it is up, or a "
                                         f"leftover remains (testbed down -n {args.name})"})
                    + "\n")
        return 1
    # each node's /etc/hosts view (nodes/daemon/etchosts.py): the namespaces share the
    # machine's /etc/hosts, which lnetctl must not resolve node names against
    (rdir / etchosts.FILE).write_text(etchosts.plan_hosts(plan.nodes))
    logfd = os.open(rdir / runstate.SUPERVISOR_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(logfd, 1)
    os.dup2(logfd, 2)
    os.close(logfd)
    os.chdir("/")
    os.environ.update(child_env(plan.name, rdir))  # Mininet's shells inherit the owner tag
    signal.signal(signal.SIGTERM, _raise_terminated)
    sup = Supervisor(plan, rdir, proto, ["--record-period", args.record_period] + (
        ["--trace-messages"] if args.trace_messages else []))
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
                                  "seconds": round(time.time() - sup.started, 3),
                                  "warnings": sup.warnings}})
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
