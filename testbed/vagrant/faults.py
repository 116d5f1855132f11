"""Faults on the ``vagrant`` and ``hosts`` backends: the kinds that apply where nodes live.

Theory of operation: the same fault specs (``faults.spec``) and the same schedule
(``faults.sched.Timeline``) as on Mininet, with the same ``fault_*`` requests and events, but
each activation is carried out where the node is:

* ``carrier``, ``flap``: the link, from *outside* the node (the guest's host-side veth or
  ``virsh domif-setlink``; the bridge-side veth on a machine), so the node sees carrier loss;
* ``blackhole``, ``partition``, ``flap`` with ``style: blackhole``: tagged DROP rules in the
  node's own namespace on its host, through the host agent;
* ``kill``, ``stop``, ``restart``: signals to the daemon on its host (restart: a new daemon,
  configured again as at bring-up).

The packet-level kinds (loss, delay, reorder, duplicate, corrupt, stall, rst) and bandwidth
need the NFQUEUE interposer (or a qdisc) running beside the node; this backend refuses them
with a one-line reason rather than pretending. LNet's own rules (``lctl net_drop_add``,
``net_delay_add``) run in the engine and work on every backend.
"""

from __future__ import annotations

import json
import random
import time
import traceback
from typing import Any

from faults.sched import Timeline
from faults.spec import INTERPOSED, FaultError, FaultSpec, parse_fault
from nodes.echo import shown

TAG = "lntb:"
APPLIES = frozenset({"carrier", "flap", "blackhole", "partition", "kill", "stop", "restart"})


class _Fault:
    def __init__(self, fid: str, spec: FaultSpec, seed: int, added: float) -> None:
        self.fid, self.spec, self.seed = fid, spec, seed
        self.timeline = Timeline(spec, added, seed)
        self.applied: list[tuple[str, Any]] = []
        self.activations = 0
        self.error: str | None = None

    def describe(self) -> dict[str, Any]:
        state = "failed" if self.error else "active" if self.timeline.active else \
            "done" if self.timeline.done else "pending"
        return {"id": self.fid, "kind": self.spec.kind, "name": self.spec.name,
                "seed": self.seed, "state": state, "activations": self.activations,
                "spec": self.spec.as_dict(), "next": self.timeline.next_deadline(),
                "counters": {}, "error": self.error}


class FaultTable:
    """Faults of one testbed, driven by its supervisor's loop."""

    def __init__(self, sup: Any) -> None:
        self.sup = sup
        self.faults: dict[str, _Fault] = {}
        self.next_id = 1

    def handle(self, cmd: str, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            if cmd == "fault_add":
                return self.add(msg.get("spec"))
            if cmd == "fault_list":
                return {"ok": True, "faults": [f.describe() for f in self.faults.values()],
                        "residue": []}
            if cmd == "fault_del":
                return self.delete(str(msg.get("id")))
            if cmd == "fault_clear":
                return {"ok": True, "faults": [self.delete(k)["fault"]
                                               for k in list(self.faults)]}
        except Exception as exc:
            traceback.print_exc()
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return {"ok": False, "error": f"unknown request {cmd!r}"}

    def add(self, raw: Any) -> dict[str, Any]:
        nodes = {n.name: [i.name for i in n.interfaces] for n in self.sup.plan.nodes}
        try:
            spec = parse_fault(raw, nodes=nodes)
        except FaultError as exc:
            return {"ok": False, "error": str(exc)}
        if spec.kind not in APPLIES:
            why = "the NFQUEUE interposer" if spec.kind in INTERPOSED else "a qdisc"
            return {"ok": False, "error": f"fault {spec.kind} needs {why} beside the node, "
                    f"which the {self.sup.backend} backend does not run (applies here: "
                    f"{', '.join(sorted(APPLIES))}; LNet's own lctl net_drop_add/"
                    "net_delay_add work everywhere)"}
        seed = spec.seed if spec.seed is not None else random.SystemRandom().randrange(2**31)
        f = _Fault(f"f{self.next_id}", spec, seed, time.time())
        self.next_id += 1
        self.faults[f.fid] = f
        self.sup.event("fault_added", id=f.fid, spec=spec.as_dict(), seed=seed)
        self.tick()
        if f.error:
            self.faults.pop(f.fid, None)
            return {"ok": False, "error": f"{f.fid} ({spec.kind}): {f.error}"}
        return {"ok": True, "fault": f.describe()}

    def delete(self, key: str) -> dict[str, Any]:
        f = self.faults.get(key) or next((x for x in self.faults.values()
                                          if x.spec.name == key), None)
        if f is None:
            return {"ok": False, "error": f"no fault {shown(key)} (have: "
                                          f"{', '.join(self.faults) or 'none'})"}
        if f.timeline.active:
            self._revert(f)
        self.faults.pop(f.fid, None)
        self.sup.event("fault_deleted", id=f.fid, counters={})
        return {"ok": True, "fault": f.describe()}

    def tick(self) -> None:
        now = time.time()
        for f in list(self.faults.values()):
            if f.error:
                continue
            try:
                for what, k in f.timeline.due(now):
                    if what == "apply":
                        self._apply(f, k)
                    else:
                        self._revert(f)
            except Exception as exc:
                traceback.print_exc()
                f.error = f"{type(exc).__name__}: {exc}"
                self._revert(f)

    def expects_dead(self, node: str) -> bool:
        """A daemon a kill/stop fault took down is not reported as crashed."""
        return any(f.spec.node == node and f.spec.kind in ("kill", "stop") and
                   f.activations for f in self.faults.values())

    def silenced(self) -> frozenset[str]:
        """Nodes whose daemon a fault stopped or killed now: not to be asked anything."""
        return frozenset(f.spec.node or "" for f in self.faults.values()
                         if f.spec.kind in ("kill", "stop") and f.timeline.active)

    def shutdown(self) -> None:
        for f in list(self.faults.values()):
            if f.timeline.active:
                self._revert(f)

    # -- carrying out ------------------------------------------------------------------------
    def _apply(self, f: _Fault, k: int) -> None:
        spec, sup = f.spec, self.sup
        f.activations += 1
        node = spec.node or ""
        host = sup.placement.get(node, "")
        if spec.kind in ("carrier", "flap") and spec.params.get("style", "carrier") == "carrier":
            ifaces = [spec.iface] if spec.iface else list(sup.link_state[node])
            for iface in ifaces:
                f.applied.append(("link", (node, iface)))
                self._ok(sup.link(node, iface, "down"))
        elif spec.kind in ("blackhole", "flap"):
            self._rules(f, [(node, r) for r in self._drop_rules(f, node)])
        elif spec.kind == "partition":
            self._rules(f, self._partition_rules(f))
        elif spec.kind in ("kill", "stop"):
            sig = "KILL" if spec.kind == "kill" else "STOP"
            self._signal(node, sig)
            if spec.kind == "stop":
                f.applied.append(("signal", (host, node)))
        elif spec.kind == "restart":
            self.restart(node)
        sup.event("fault_applied", id=f.fid, activation=k, fault=spec.kind, node=spec.node)

    def _rules(self, f: _Fault, rules: list[tuple[str, list[str]]]) -> None:
        for node, rule in rules:
            f.applied.append(("iptables", (node, rule)))
            self.sup.set.agent(self.sup.placement[node], "iptables", "--node", node,
                               "--op=-I", "--rule", json.dumps(rule))

    def _drop_rules(self, f: _Fault, node: str) -> list[list[str]]:
        tag = ["-m", "comment", "--comment", f"{TAG}{f.fid}"]
        direction = f.spec.direction
        chains = {"out": [("OUTPUT", "-o")], "in": [("INPUT", "-i")],
                  "both": [("OUTPUT", "-o"), ("INPUT", "-i")]}[direction]
        return [[chain, *([opt, f.spec.iface] if f.spec.iface else []), *tag, "-j", "DROP"]
                for chain, opt in chains]

    def _partition_rules(self, f: _Fault) -> list[tuple[str, list[str]]]:
        p = f.spec.params
        ips = {n.name: [str(i.ip) for i in n.interfaces] for n in self.sup.plan.nodes}
        tag = ["-m", "comment", "--comment", f"{TAG}{f.fid}"]
        pairs = [(a, b, p["oneway"]) for a in p["a"] for b in p["b"]]
        if not p["oneway"]:
            pairs += [(b, a, False) for a in p["a"] for b in p["b"]]
        out = []
        for src, dst, oneway in pairs:
            for ip in ips[dst]:
                ct = ["-m", "conntrack", "--ctdir", "ORIGINAL"] if oneway else []
                out.append((src, ["OUTPUT", "-d", ip, *ct, *tag, "-j", "DROP"]))
        return out

    def _revert(self, f: _Fault) -> None:
        sup = self.sup
        while f.applied:
            what, arg = f.applied.pop()
            try:
                if what == "link":
                    sup.link(arg[0], arg[1], "up")
                elif what == "iptables":
                    sup.set.agent(sup.placement[arg[0]], "iptables", "--node", arg[0],
                                  "--op=-D", "--rule", json.dumps(arg[1]))
                elif what == "signal":
                    self._signal(arg[1], "CONT")
            except Exception as exc:  # revert what can be reverted
                print(f"fault {f.fid}: revert {what}: {exc}", flush=True)
        sup.event("fault_reverted", id=f.fid, activation=max(0, f.activations - 1),
                  counters={})

    def _signal(self, node: str, sig: str) -> None:
        """``kill -s SIG`` on the daemon's host: one SSH channel, no agent start (a stopped
        daemon's peers time out on the wall clock, so the revert must not lag)."""
        host = self.sup.placement[node]
        pid = self.sup.set.pids[node]
        res = self.sup.set.hosts[host].shell.run(["kill", "-s", sig, str(pid)], timeout=30)
        if not res.ok:
            raise RuntimeError(f"kill -s {sig} {pid} on {host}: {res.err.strip()}")

    def restart(self, node: str) -> None:
        """A new daemon for ``node`` on its host, configured again (both phases)."""
        sup = self.sup
        host = sup.placement[node]
        reply = sup.set.agent(host, "restart", "--node", node)
        sup.set.endpoints[node] = reply["endpoint"]
        sup.set.pids[node] = reply["pid"]
        sup.state["nodes"][node].update(endpoint=reply["endpoint"], pid=reply["pid"])
        sup.save()
        sup.dead.discard(node)
        sup.set.wait_hello(nodes=[node])
        sup.set.reconfigure(node)
        sup.event("node_restarted", node=node, pid=reply["pid"])

    @staticmethod
    def _ok(reply: dict[str, Any]) -> None:
        if not reply.get("ok"):
            raise RuntimeError(reply.get("error", "failed"))
