"""``python -m testbed.sim.server``: a sim testbed that outlives the command that started it.

Theory of operation (the Mininet supervisor's contract, testbed/mininet/supervisor.py):
``testbed up --backend sim`` (``SimClient.up``) spawns this in its own session with the owner
tag in its environment. It creates the run directory (atomic mkdir; no root needed, see
``runstate.runroot``), records ``backend: sim`` and its pid in state.json, brings the topology
up in this process (``SimTestbed``: same verbs, same order as Mininet), reports progress lines
on stdout until ``ready``, then detaches stdout to ``server.log`` and serves one ZeroMQ ROUTER
on ``ipc://RUNDIR/ctl.sock`` until ``down`` or SIGTERM, when it removes its run directory (the
one control-server loop, ``testbed.ctlserver``). Requests are the supervisor's (``status``,
``link``, ``down``, ``fault_add|list|del|clear``) plus ``clock`` (``show``, ``advance``),
``flush`` (recorder rows to ``nodes/NODE.rec``) and node verbs carrying a ``node`` field
(``lnetctl``, ``lctl``, ``put``, ``get``, ``log``): one socket for every node, however many
there are. Each request runs in its own task (a paced ``ping`` does not block ``net show``).
The event log goes to ``events.jsonl`` (virtual ``t``) and the nodes' console lines to
``lnet.log`` after every request and every slice of paced time, and leave memory. With
``--record-period`` every node's recorder writes ``nodes/NODE.rec``; with ``--trace-messages``
the message trace is in the event log (issue 16). The clock is ``testbed.sim.pacer``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

from nodes.dlc import debuglog
from nodes.dlc.verbs import lst_verb
from nodes.echo import shown
from testbed import clean, runstate
from testbed.base import TestbedError
from testbed.ctlserver import CtlServer, Handler
from testbed.plan import TopologyError, load_topology
from testbed.sim import gcpolicy
from testbed.sim.inproc import SimTestbed
from testbed.sim.pacer import Pacer, parse_speed
from testbed.spawn import to_log

SERVER_LOG = "server.log"
LNET_LOG = "lnet.log"
NODE_VERBS = ("lnetctl", "lctl", "lst", "lstio", "put", "get", "log", "sysfs")
#: Most wall seconds ``status`` spends bringing the fabric up to the paced time first.
STATUS_CATCH_UP = 0.05
#: one encoder for every event line (sorted keys, as ``json.dumps(e, sort_keys=True)``, which
#: builds an encoder per call: ~17 % of each line's encoding; the message trace is most lines)
_ENCODE = json.JSONEncoder(sort_keys=True).encode


class SimServer:
    """One sim testbed and its control socket."""

    def __init__(self, tb: SimTestbed, rdir: Path, speed: float) -> None:
        self.tb = tb
        self.rdir = rdir
        self.speed = speed
        self.pacer = Pacer(tb, speed, self.flush)
        tb.fabric.keep_history = False  # a long life: logs go to files, not memory
        tb.served = True  # an unpaced verb lets other requests in (SimTestbed.share)
        self.ctl = CtlServer(rdir, self.handlers(), concurrent=True, after=self.flush,
                             refusals=(TestbedError, ValueError, TypeError, KeyError))

    def flush(self) -> None:
        """Move the new events and console lines from memory to their files."""
        fab = self.tb.fabric
        events = fab.event_log  # (each access turns new compact records into dicts)
        if events:
            with open(self.rdir / runstate.EVENTS_FILE, "a") as f:
                f.writelines(_ENCODE(e) + "\n" for e in events)
            events.clear()
        if fab.log:
            with open(self.rdir / LNET_LOG, "a") as f:
                f.writelines(f"{t:.6f} {name} lnet: {text}\n" for t, name, text in fab.log)
            for t, name, text in fab.log:  # and for the node's next ``lctl dk``
                rt = self.tb.runtimes.get(name)
                if rt is not None:
                    debuglog.keep(rt, t, text)
            fab.log.clear()

    async def serve(self) -> None:
        """Serve ``ctl.sock`` (``testbed.ctlserver``, each request in its own task) and pace
        the clock, until ``down`` or SIGTERM."""
        pacing = asyncio.ensure_future(self.pacer.run()) if self.speed > 0 else None
        try:
            await self.ctl.serve()
        finally:
            if pacing is not None:
                pacing.cancel()

    def handlers(self) -> dict[str, Handler]:
        """The control requests: the supervisor's, ``clock``, ``flush`` and node verbs.
        `status` answers within a bound however far behind a loaded fabric is (issue 27: its
        clock may lag then); every other request sees the time a user's sleep saw pass."""
        tb = self.tb

        def paced(handler: Handler, bound: float | None = None) -> Handler:
            def run(req: dict[str, Any]) -> Any:
                self.pacer.catch_up(bound)
                return handler(req)
            return run

        table: dict[str, Handler] = {
            "status": paced(lambda req: {**tb.status(), "speed": _speed_text(self.speed),
                                         "rundir": str(self.rdir)}, STATUS_CATCH_UP),
            "flush": paced(self.flush_recorders),
            "reload": paced(self.reload),
            "link": paced(self.link),
            "clock": paced(self.clock),
            "down": self.down,
        }
        for cmd in ("fault_add", "fault_list", "fault_del", "fault_clear"):
            table[cmd] = paced(tb.faults.request)
        for cmd in NODE_VERBS:
            table[cmd] = paced(functools.partial(self.node_verb, cmd))
        return table

    def down(self, _req: dict[str, Any]) -> dict[str, Any]:
        self.ctl.stop()
        return {"ok": True, "name": self.tb.name}

    def flush_recorders(self, _req: dict[str, Any]) -> dict[str, Any]:
        """Recorder rows to their files (a reader is about to look)."""
        self.tb.fabric.flush_recorders()
        return {"ok": True}

    def reload(self, req: dict[str, Any]) -> dict[str, Any]:
        self.tb.reload_modules(str(req["node"]), dict(req["modules"]))
        return {"ok": True, "node": req["node"]}

    def link(self, req: dict[str, Any]) -> dict[str, Any]:
        self.tb.link(str(req.get("node")), str(req.get("iface")), str(req.get("state")))
        return {"ok": True, "node": req["node"], "iface": req["iface"], "state": req["state"]}

    def clock(self, req: dict[str, Any]) -> dict[str, Any]:
        if req.get("op") == "advance":
            seconds = req.get("seconds")
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) \
                    or not 0 <= seconds <= 1e6:
                raise ValueError(f"clock advance: seconds must be 0..1e6, not {shown(seconds)}")
            self.pacer.advance(float(seconds))
        elif req.get("op", "show") != "show":
            raise ValueError(f"clock: op must be show or advance, not {shown(req.get('op'))}")
        return {"ok": True, "now": self.tb.fabric.now, "speed": _speed_text(self.speed)}

    async def node_verb(self, cmd: str, req: dict[str, Any]) -> dict[str, Any]:
        node = self.tb.node(str(req.get("node")))
        if cmd == "log":
            self.flush()
            return {"ok": True, "text": node_log(self.rdir, node.name)}
        if cmd in ("put", "get"):
            return await node.aburst(cmd, str(req.get("dst", "")), req.get("count", 1),
                                     req.get("size", 4096), req.get("src"), req.get("numa"))
        if cmd == "lstio":  # one lst console ioctl (nodes/dlc/verbs/lst_verb.py)
            self.tb.check_alive(node.name)
            return await lst_verb.ioctl(node.rt, req)
        argv = req.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("'argv' must be a list of strings")
        res = await node.averb(cmd, argv)
        return {"ok": True, "rc": res.rc, "out": res.out, "err": res.err}


def node_log(rdir: Path, node: str) -> str:
    """Node ``node``'s console lines from ``lnet.log`` (``T NODE lnet: TEXT``)."""
    try:
        text = (rdir / LNET_LOG).read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "".join(ln for ln in text.splitlines(keepends=True)
                   if ln.split(" ", 2)[1:2] == [node])


def _speed_text(speed: float) -> str:
    return "max" if math.isinf(speed) else f"{speed:g}"


def _send(proto: IO[str] | None, msg: dict[str, Any]) -> None:
    if proto is not None:
        with contextlib.suppress(OSError):
            proto.write(json.dumps(msg) + "\n")
            proto.flush()


def _terminated(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt("terminated by SIGTERM during bring-up")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.sim.server")
    p.add_argument("--name", required=True)
    p.add_argument("--topology", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speed", default="1")
    p.add_argument("--record-period", type=float, default=0.0, metavar="SECONDS",
                   help="recorder period in virtual seconds (0: no recorder files)")
    p.add_argument("--trace-messages", action="store_true",
                   help="the engines' message trace in the event log")
    args = p.parse_args(argv)
    proto: IO[str] | None = os.fdopen(os.dup(1), "w")
    try:
        speed = parse_speed(args.speed)
        plan = load_topology(args.topology, name=args.name)
        rdir = runstate.create_rundir(plan.name)
    except (TopologyError, ValueError, OSError) as exc:
        msg = (f"testbed {args.name} already has a run directory: it is up, or a leftover "
               f"remains (testbed down -n {args.name})") if isinstance(exc, FileExistsError) \
            else str(exc)
        _send(proto, {"error": msg})
        return 1
    to_log(rdir / SERVER_LOG)
    started = time.time()
    state = {"name": plan.name, "backend": "sim", "supervisor_pid": os.getpid(),
             "phase": "starting", "started": started, "topology": plan.source,
             "seed": args.seed, "speed": _speed_text(speed), "nodes": {}, "created": []}
    runstate.write_state(rdir, state)
    signal.signal(signal.SIGTERM, _terminated)  # an interrupted `up`: undo, exit
    try:
        tb = SimTestbed(plan, seed=args.seed, trace_messages=args.trace_messages,
                        record_dir=rdir if args.record_period > 0 else None,
                        record_period=args.record_period or 0.1)
        tb.bring_up(lambda step, total, text: _send(
            proto, {"progress": text, "step": step, "total": total}))
    except (Exception, KeyboardInterrupt) as exc:
        traceback.print_exc()
        _send(proto, {"error": str(exc) if isinstance(exc, TestbedError)
                      else f"{type(exc).__name__}: {exc}"})
        clean.remove_files(rdir)
        return 1
    state["phase"] = "ready"
    runstate.write_state(rdir, state)
    gcpolicy.settle()  # bring-up's objects out of the GC's scans, fewer collections
    server = SimServer(tb, rdir, speed)
    server.flush()
    _send(proto, {"ready": {"name": plan.name, "rundir": str(rdir), "backend": "sim",
                            "nodes": len(plan.nodes), "seconds": round(time.time() - started, 3),
                            "warnings": tb.warnings}})
    if proto is not None:
        proto.close()
    return run(server, rdir)


def run(server: SimServer, rdir: Path) -> int:
    """Serve until ``down`` or SIGTERM; then the run directory goes."""
    async def go() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, server.ctl.stop)
        await server.serve()

    try:
        asyncio.run(go())
    finally:
        server.tb.down()
        clean.remove_files(rdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
