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
   ``down``, ``fault_*``, through the one control-server loop (``testbed.ctlserver``: each
   request checked field by field first, a bad one refused in one line and serving goes on;
   one at a time; a request whose client went away while it waited its turn is not
   served). SIGTERM means ``down``.

If anything fails midway, everything created so far is removed before exiting non-zero.
Teardown does not use ``Mininet.stop()``: that talks to each host through its pty shell with
unbounded waits; here every step is an argv command or a signal with a timeout.
"""

from __future__ import annotations

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
from nodes.echo import listed, shown
from testbed import bringup, clean, names, runstate, sh
from testbed.ctlserver import CtlServer, Handler
from testbed.mininet import daemons, faultctl, netbuild
from testbed.mininet.forkclient import DaemonProcess, ForkServer
from testbed.mininet.netbuild import BringUpError
from testbed.plan import Plan, TopologyError, load_topology
from testbed.spawn import child_env, server_options, to_log

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
        self.downed = False
        self.ctl = CtlServer(rdir, self.handlers(), tick=self.idle,
                             should_stop=lambda: _STOP["requested"])
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
        """Answer control requests until ``down`` or SIGTERM (``testbed.ctlserver``)."""
        self.ctl.run()
        if not self.downed:
            self.teardown()

    def idle(self) -> float:
        """Between requests: dead daemons, the fault schedule; seconds to the next deadline."""
        self.watch_daemons()
        self.faults.tick()
        due = self.faults.next_deadline()
        return 0.5 if due is None else due - time.time()

    def handlers(self) -> dict[str, Handler]:
        """The control requests (their fields checked by ``ctlproto`` first)."""
        return {
            "status": lambda msg: self.status(),
            "link": self.link,
            "reload": lambda msg: self.faults.reload(msg["node"], msg["modules"]),
            "down": self.down,
            "fault_add": lambda msg: self.faults.add(msg.get("spec")),
            "fault_list": lambda msg: self.faults.list(residue=bool(msg.get("residue"))),
            "fault_del": lambda msg: self.faults.delete(msg["id"]),
            "fault_clear": lambda msg: self.faults.clear(),
        }

    def down(self, _msg: dict[str, Any]) -> dict[str, Any]:
        """``down``: everything removed, then the reply, then serving ends."""
        self.downed = True
        self.teardown()
        self.ctl.stop()
        return {"ok": True, "name": self.name}

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
    args = server_options("python -m testbed.mininet.supervisor").parse_args(argv)
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
    to_log(rdir / runstate.SUPERVISOR_LOG)
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
