"""The per-testbed supervisor of the ``vagrant`` and ``hosts`` backends.

Theory of operation: the same process contract as the Mininet supervisor
(``testbed/supervisor.py``): ``testbed up`` spawns ``python -m testbed.vagrant.supervisor`` in
its own session with ``LNET_TESTBED=NAME``; it creates the run directory, records every
resource before making it, reports progress as JSON lines on fd 1 until ``ready`` or
``error``, then serves JSON requests on ``ipc://RUNDIR/ctl.sock`` (``status``, ``link``,
``events_sync``, ``flush``, ``fault_*``, ``down``; the one control-server loop,
``testbed.ctlserver``: each checked by ``testbed.ctlproto`` first) and takes everything
down on ``down`` or SIGTERM.
What differs is where nodes live: guests made by Vagrant (``guests``) or machines as they are
(``machines``), both driven through ``hostset``; node requests go straight from the client to
each daemon over CURVE TCP, never through here. Between requests the loop reads every
host's events (``eventmerge``) and notices dead daemons.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

from nodes.echo import listed, shown
from testbed import runstate
from testbed.ctlserver import CtlServer, Handler
from testbed.spawn import server_options, to_log
from testbed.vagrant import clean, deploy, guests, machines, placement
from testbed.vagrant.curve import TestbedKeys
from testbed.vagrant.faults import FaultTable
from testbed.vagrant.hostset import HostSet

POLL_INTERVAL = 1.0
#: Longest wait for a request before the next tick (seconds).
POLL_WAIT = 0.2
ALIVE_INTERVAL = 5.0
_STOP = {"requested": False}


class Terminated(Exception):
    """SIGTERM during bring-up."""


def _raise(_s: int, _f: object) -> None:
    raise Terminated("terminated by SIGTERM during bring-up")


def _stop(_s: int, _f: object) -> None:
    _STOP["requested"] = True


class Supervisor:
    def __init__(self, plan: Any, rdir: Path, backend: str, provider: str,
                 clock_skew: dict[str, float], proto: IO[str] | None,
                 observe: list[str] | None = None) -> None:
        self.plan, self.rdir, self.backend, self.provider = plan, rdir, backend, provider
        self.clock_skew, self.proto = clock_skew, proto
        self.observe = observe or []  # the daemons' recorder and trace options
        self.started = time.time()
        self.hosts, self.placement = placement.place(plan, backend)
        self.state: dict[str, Any] = {
            "name": plan.name, "backend": backend, "provider": provider,
            "topology": plan.source, "supervisor_pid": os.getpid(), "phase": "starting",
            "started": self.started, "created": [], "nodes": {}, "placement": self.placement,
            "hosts": {h.name: self._reach(h) for h in self.hosts}}
        self.save()
        self.guests: guests.Guests | None = None
        self.set: HostSet | None = None
        self.link_state = {n.name: {i.name: "up" for i in n.interfaces} for n in plan.nodes}
        self.dead: set[str] = set()
        self.warnings: list[str] = []  # routes still down after bring-up, with why
        self.faults = FaultTable(self)
        self.downed = False

    def _reach(self, h: placement.Host) -> dict[str, Any]:
        """How the host is reached, as far as known before bring-up (clean.shell_record)."""
        if self.backend == "vagrant":
            return {"reach": "pending"}  # known once vagrant made the guest
        if h.local:
            return {"reach": "local"}
        return {"reach": "ssh", "ssh": h.ssh, "port": h.port, "key": h.key, "user": h.user}

    # -- bookkeeping -------------------------------------------------------------------------
    def save(self) -> None:
        runstate.write_state(self.rdir, self.state)

    def record(self, kind: str, **fields: Any) -> None:
        self.state["created"].append({"kind": kind, **fields})
        self.save()

    def event(self, kind: str, *, at: float | None = None, **fields: Any) -> None:
        """An event of the orchestrator, stamped ``at`` (default: now) on its clock."""
        ev = {"t": time.time() if at is None else at, "kind": kind, **fields}
        if self.set is not None:
            self.set.merger.push(ev)
        else:
            runstate.append_event(self.rdir, kind, **fields)

    def flush_events(self, everything: bool = False) -> None:
        if self.set is None:
            return
        lines = [json.dumps(e, sort_keys=True) + "\n"
                 for e in self.set.merger.release(time.time(), everything)]
        if lines:
            with open(self.rdir / runstate.EVENTS_FILE, "a") as f:
                f.write("".join(lines))

    def progress(self, text: str) -> None:
        msg = {"progress": text, "step": 0, "total": 0}
        if self.proto is not None:
            self.proto.write(json.dumps(msg) + "\n")
            self.proto.flush()
        print(json.dumps(msg), flush=True)

    # -- bring-up ----------------------------------------------------------------------------
    def bring_up(self) -> None:
        where = "guests" if self.backend == "vagrant" else "hosts"
        self.progress(f"topology {self.plan.name}: {len(self.plan.nodes)} nodes on "
                      f"{len(self.hosts)} {where} ({self.backend}"
                      f"{'/' + self.provider if self.backend == 'vagrant' else ''})")
        keys = TestbedKeys(self.rdir)
        keys.generate([n.name for n in self.plan.nodes])
        wheels = deploy.build_wheels(self.rdir / "wheels")
        for h in self.hosts:
            self.record("host_agent", name=h.name, ssh=h.ssh, port=h.port, key=h.key)
        if self.backend == "vagrant":
            self.guests = guests.Guests(self.plan, self.hosts, self.placement, self.provider,
                                        self.rdir, self.record, self.progress)
            runtimes = self.guests.prepare()
            for rt in runtimes:
                rt.clock_skew = self.clock_skew.get(rt.name, 0.0)
        else:
            runtimes = machines.runtimes(self.hosts, self.rdir / "ssh", self.clock_skew)
        for rt in runtimes:
            self.state["hosts"][rt.name] = clean.shell_record(rt.shell)
        self.save()
        self.set = HostSet(self.plan, self.placement, runtimes, keys, self.event, self.observe)
        self.progress("installing the project: " + listed(r.name for r in runtimes))
        self.set.install(wheels)
        self.progress("namespaces and daemons: " + listed(r.name for r in runtimes))
        self.set.setup()
        for node, ep in self.set.endpoints.items():
            host = self.placement[node]
            self.state["nodes"][node] = {
                "host": host, "endpoint": ep, "pid": self.set.pids[node],
                "netns": f"lntb-{self.set.hash}-{node}",
                "pythonpath": self.set.hosts[host].pythonpath,
                "hostdir": self.set.hdir(host), "nids": list(self.plan.node(node).nids)}
        self.save()
        self.progress("waiting for daemons (CURVE): " + listed(self.set.endpoints))
        self.set.wait_hello()
        self.warnings = self.set.configure(self.progress)
        for line in self.warnings:
            self.event("route_not_up", text=line)
        self.state["phase"] = "ready"
        self.save()
        self.event("up", testbed=self.plan.name, seconds=round(time.time() - self.started, 3))
        for raw in self.plan.faults:
            reply = self.faults.add(dict(raw))
            if not reply.get("ok"):
                raise guests.GuestError(f"faults: {reply.get('error')}")

    # -- serving -----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        nodes = {}
        for node in self.plan.nodes:
            info = self.state["nodes"].get(node.name, {})
            nodes[node.name] = {
                "pid": info.get("pid"), "host_pid": None, "host": self.placement[node.name],
                "alive": node.name not in self.dead and bool(info), "sock": info.get("endpoint"),
                "endpoint": info.get("endpoint"), "nids": list(node.nids),
                "interfaces": {i.name: {"kernel": i.name, "segment": i.segment, "nid": i.nid,
                                        "state": self.link_state[node.name][i.name]}
                               for i in node.interfaces}}
        segments = {s.name: {"lnet": s.lnet, "subnet": str(s.subnet), "bridge": ""}
                    for s in self.plan.segments}
        return {"ok": True, "name": self.plan.name, "topology": self.plan.source,
                "backend": self.backend, "provider": self.provider,
                "phase": self.state["phase"], "supervisor_pid": os.getpid(),
                "rundir": str(self.rdir), "started": self.started, "nodes": nodes,
                "segments": segments, "hosts": self.state["hosts"],
                "clocks": self.set.merger.offsets() if self.set else {}}

    def link(self, node: Any, iface: Any, updown: Any) -> dict[str, Any]:
        if node not in self.link_state:
            return {"ok": False, "error": f"no node {shown(node)} in testbed {self.plan.name}"}
        if iface not in self.link_state[node]:
            return {"ok": False, "error": f"node {node} has no interface {shown(iface)} "
                                          f"(has {', '.join(self.link_state[node])})"}
        if updown not in ("up", "down"):
            return {"ok": False, "error": f"link state must be up or down, not {updown!r}"}
        issued = time.time()  # the node may see its carrier change before we hear back
        try:
            if self.guests is not None:
                self.guests.link(node, iface, updown)
            else:
                assert self.set is not None
                self.set.agent(self.placement[node], "link", "--node", node, "--iface", iface,
                               "--state", updown)
        except Exception as exc:
            return {"ok": False, "error": str(exc)}
        self.link_state[node][iface] = updown
        self.event(f"link_{updown}", at=issued, node=node, iface=iface)
        return {"ok": True, "node": node, "iface": iface, "state": updown}

    def handlers(self) -> dict[str, Handler]:
        """The control requests (their fields checked by ``ctlproto`` first)."""
        table: dict[str, Handler] = {
            "status": lambda msg: self.status(),
            "link": lambda msg: self.link(msg["node"], msg["iface"], msg["state"]),
            "events_sync": self.events_sync,
            "flush": self.flush,
            "down": self.down,
        }
        for cmd in ("fault_add", "fault_list", "fault_del", "fault_clear"):
            table[cmd] = functools.partial(self.faults.handle, cmd)
        return table

    def events_sync(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.tick(force=True)
        self.flush_events(everything=bool(msg.get("all")))
        return {"ok": True}

    def flush(self, _msg: dict[str, Any]) -> dict[str, Any]:
        """A reader of nodes/*.rec, *.trace.jsonl is about to look."""
        assert self.set is not None
        return {"ok": True, "copied": self.set.gather(self.rdir / "nodes",
                                                      self.faults.silenced() |
                                                      frozenset(self.dead))}

    def down(self, _msg: dict[str, Any]) -> dict[str, Any]:
        """``down``: everything removed, then the reply, then serving ends."""
        self.downed = True
        self.teardown()
        self.ctl.stop()
        return {"ok": True, "name": self.plan.name}

    def tick(self, force: bool = False) -> None:
        assert self.set is not None
        now = time.time()
        quiet = self.faults.silenced() | frozenset(self.dead)
        if force or now - self._polled >= POLL_INTERVAL:
            self._polled = now
            self.set.poll_events(quiet)
        if now - self._checked >= ALIVE_INTERVAL:
            self._checked = now
            for node, up in self.set.alive(quiet).items():
                if not up and node not in self.dead and not self.faults.expects_dead(node):
                    self.dead.add(node)
                    self.event("node_died", node=node)
        self.faults.tick()
        self.flush_events()

    def idle(self) -> float:
        """Between requests (``testbed.ctlserver``): events, dead daemons, fault schedule."""
        self.tick()
        return POLL_WAIT

    def serve(self) -> None:
        self._polled = self._checked = 0.0
        self.ctl = CtlServer(self.rdir, self.handlers(), tick=self.idle,
                             should_stop=lambda: _STOP["requested"])
        self.ctl.run()
        if not self.downed:
            self.teardown()

    # -- teardown ----------------------------------------------------------------------------
    def teardown(self) -> None:
        """Remove everything of this testbed on every host and here; never raises."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.state["phase"] = "stopping"
        with contextlib.suppress(OSError):
            self.save()
        removed: list[str] = []
        with contextlib.suppress(Exception):
            self.faults.shutdown()
        if self.set is not None:
            with contextlib.suppress(Exception):
                self.set.poll_events()
            removed += self.set.teardown()
        else:  # failed before the hosts were known: agents by record
            removed += clean.agents(self.state, self.rdir)
        removed += guests.destroy_recorded(self.plan.name, self.rdir, self.state["created"])
        self.event("down", testbed=self.plan.name)
        self.flush_events(everything=True)
        print(json.dumps({"teardown": removed}), flush=True)
        from testbed import clean as tbclean

        tbclean.kill_tagged(self.plan.name)
        tbclean.remove_files(self.rdir)


def _skews(words: list[str]) -> dict[str, float]:
    out = {}
    for w in words:
        host, _, secs = w.partition("=")
        out[host] = float(secs)
    return out


def main(argv: list[str] | None = None) -> int:
    from testbed.plan import TopologyError, load_topology

    p = server_options("python -m testbed.vagrant.supervisor")
    p.add_argument("--backend", choices=("vagrant", "hosts"), default="vagrant")
    p.add_argument("--provider", choices=("lxc", "libvirt"), default="lxc")
    p.add_argument("--clock-skew", action="append", default=[], metavar="HOST=SECONDS",
                   help="test-only: HOST reports its clock SECONDS ahead")
    args = p.parse_args(argv)
    proto = os.fdopen(os.dup(1), "w")
    try:
        plan = load_topology(args.topology, name=args.name)
        placement.place(plan, args.backend)
        rdir = runstate.create_rundir(plan.name)
    except (TopologyError, placement.PlacementError) as exc:
        proto.write(json.dumps({"error": str(exc)}) + "\n")
        return 1
    except FileExistsError:
        proto.write(json.dumps({"error": f"testbed {args.name} already has a run directory "
                                f"{runstate.rundir(args.name)}: it is up, or a leftover "
                                "remains (run `testbed clean`)"}) + "\n")
        return 1
    to_log(rdir / runstate.SUPERVISOR_LOG)
    signal.signal(signal.SIGTERM, _raise)
    sup = Supervisor(plan, rdir, args.backend, args.provider, _skews(args.clock_skew), proto,
                     ["--record-period", args.record_period] + (
                         ["--trace-messages"] if args.trace_messages else []))
    try:
        sup.bring_up()
        signal.signal(signal.SIGTERM, _stop)
    except (Exception, Terminated, KeyboardInterrupt) as exc:
        import traceback

        traceback.print_exc()
        sup.proto = None
        sup.teardown()
        _final(proto, {"error": str(exc) or type(exc).__name__})
        return 1
    _final(proto, {"ready": {"name": plan.name, "rundir": str(rdir), "warnings": sup.warnings,
                             "seconds": round(time.time() - sup.started, 3)}})
    sup.proto = None
    sup.serve()
    return 0


def _final(proto: IO[str], msg: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        proto.write(json.dumps(msg) + "\n")
        proto.close()


if __name__ == "__main__":
    sys.exit(main())
