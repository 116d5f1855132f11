"""Faults on the ``vagrant`` and ``hosts`` backends: every kind, where the node lives.

Theory of operation: the same fault specs (``faults.spec``), the same schedule
(``faults.sched.Timeline``) and the same ``fault_*`` requests and event records
(``fault_added``, ``fault_applied``, ``fault_reverted`` with the interposer's counters,
``fault_deleted``) as on Mininet (``testbed/mininet/faultctl.py``), but each activation is
carried out where the node is:

* ``carrier``, ``flap``: the link, from *outside* the node (the guest's host-side veth or
  ``virsh domif-setlink``; the bridge-side veth on a machine), so the node sees carrier loss;
* the packet kinds (loss, delay, reorder, duplicate, corrupt, stall, rst: the NFQUEUE
  interposer), ``bandwidth`` (tbf), ``blackhole``, ``partition`` and ``flap`` with
  ``style: blackhole``: the Mininet path (``faults.realise`` -> ``faults.netops``) run by the
  host agent on the node's guest or host (``agentfaults``), which records each resource in its
  ``state.json`` before making it and undoes them on revert, ``fault del``, ``down`` and
  ``clean`` (agent ``teardown``);
* ``bandwidth`` on a guest's ingress: a tbf on the guest NIC's device on this machine (its
  egress is the node's ingress), recorded in the testbed's ``state.json``;
* ``kill``, ``stop``, ``restart``: signals to the daemon on its host (restart: a new daemon,
  configured again as at bring-up).
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from faults import netops
from faults.realise import Activation, NodeSite, Site, resources_for
from faults.spec import FaultError, FaultSpec, parse_fault
from nodes.echo import shown
from testbed.faultbook import FaultBook, FaultRecord


def _counts(totals: dict[str, int], more: dict[str, Any]) -> None:
    for k, v in more.items():
        if isinstance(v, int) and not isinstance(v, bool):
            totals[k] = totals.get(k, 0) + v


def _ips(node: Any) -> list[str]:
    """The addresses a node's traffic carries: each interface's IPv4 address unless its network
    is IPv6-only, and its IPv6 one where the plan gives one (``faults.realise`` then writes
    ip6tables rules for those, as on Mininet)."""
    return [a for i in node.interfaces
            for a in ([str(i.ip)] if i.ipv4 else []) + ([str(i.ip6)] if i.ip6 else [])]


class FaultTable:
    """Faults of one testbed, driven by its supervisor's loop."""

    def __init__(self, sup: Any) -> None:
        self.sup = sup
        #: the faults and their schedule; this class applies and undoes what they make
        self.book = FaultBook(self._apply, lambda f, _k: self._revert(f), self._failed)
        self.faults = self.book.faults
        self.applied: dict[str, list[tuple[str, Any]]] = {}
        self.next_queue = 1

    def handle(self, cmd: str, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            if cmd == "fault_add":
                return self.add(msg.get("spec"))
            if cmd == "fault_list":
                live = self._live()
                return {"ok": True, "faults": [self.describe(f, live)
                                               for f in self.faults.values()], "residue": []}
            if cmd == "fault_del":
                return self.delete(str(msg.get("id")))
            if cmd == "fault_clear":
                return {"ok": True, "faults": [self.delete(k)["fault"]
                                               for k in list(self.faults)]}
        except Exception as exc:
            traceback.print_exc()
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return {"ok": False, "error": f"unknown request {cmd!r}"}

    def describe(self, f: FaultRecord, live: dict[str, Any] | None = None) -> dict[str, Any]:
        counters = dict(f.totals)
        _counts(counters, (live or {}).get(f.fid, {}))
        return {"id": f.fid, "kind": f.spec.kind, "name": f.spec.name, "seed": f.seed,
                "state": f.state, "activations": f.activations, "spec": f.spec.as_dict(),
                "next": f.timeline.next_deadline(), "counters": counters, "error": f.error}

    def _live(self, only: FaultRecord | None = None) -> dict[str, dict[str, int]]:
        """Interposer counters of the applied faults, current when read, summed over hosts."""
        hosts = {h for f in self.faults.values() if only in (None, f)
                 for what, h in self.applied.get(f.fid, []) if what == "agent"}
        out: dict[str, dict[str, int]] = {}
        for host in sorted(hosts):
            for fid, c in self.sup.set.agent(host, "fault-counters")["counters"].items():
                _counts(out.setdefault(fid, {}), c)
        return out

    def add(self, raw: Any) -> dict[str, Any]:
        try:
            spec = parse_fault(raw, nodes=self._nodes())
        except FaultError as exc:
            return {"ok": False, "error": str(exc)}
        f = self.book.create(spec, time.time())
        if isinstance(f, str):
            return {"ok": False, "error": f}
        self.sup.event("fault_added", id=f.fid, spec=spec.as_dict(), seed=f.seed)
        self.tick()
        if f.error:
            self.faults.pop(f.fid, None)
            return {"ok": False, "error": f"{f.fid} ({spec.kind}): {f.error}"}
        return {"ok": True, "fault": self.describe(f)}

    def _nodes(self) -> dict[str, list[str]]:
        return {n.name: [i.name for i in n.interfaces] for n in self.sup.plan.nodes}

    def delete(self, key: str) -> dict[str, Any]:
        f = self.book.find(key)
        if f is None:
            return {"ok": False, "error": f"no fault {shown(key)} (have: "
                                          f"{', '.join(self.faults) or 'none'})"}
        if f.timeline.active:
            self._revert(f)
        self.faults.pop(f.fid, None)
        self.sup.event("fault_deleted", id=f.fid, counters=dict(f.totals))
        return {"ok": True, "fault": self.describe(f)}

    def tick(self) -> None:
        """Due transitions (``FaultBook.tick``)."""
        self.book.tick(time.time())

    def _failed(self, f: FaultRecord) -> None:
        """A transition raised: what the fault made is undone, the failure logged."""
        self._revert(f, error=f.error)
        self.sup.event("fault_failed", id=f.fid, error=f.error)

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
            if f.timeline.active or self.applied.get(f.fid):
                self._revert(f)

    # -- carrying out ------------------------------------------------------------------------
    def _apply(self, f: FaultRecord, k: int) -> None:
        spec, sup = f.spec, self.sup
        f.activations += 1
        node = spec.node or ""
        host = sup.placement.get(node, "")
        applied = self.applied.setdefault(f.fid, [])
        # before its effects, so the events it causes follow it (issue 27 item 13); one that
        # fails is reverted by ``tick`` (``fault_reverted`` with the error)
        sup.event("fault_applied", id=f.fid, activation=k, fault_kind=spec.kind,
                  spec=spec.as_dict(), seed=f.seed)
        style = spec.params.get("style", "carrier")
        if spec.kind == "carrier" or (spec.kind == "flap" and style == "carrier"):
            ifaces = [spec.iface] if spec.iface else list(sup.link_state[node])
            for iface in ifaces:
                applied.append(("link", (node, iface)))
                self._ok(sup.link(node, iface, "down"))
        elif spec.kind in ("kill", "stop"):
            sig = "KILL" if spec.kind == "kill" else "STOP"
            self._signal(node, sig)
            if spec.kind == "stop":
                applied.append(("signal", (host, node)))
        elif spec.kind == "restart":
            self.restart(node)
        elif spec.kind == "bandwidth" and spec.direction != "out" and sup.guests is not None:
            self._guest_ingress(f, k, applied)
        else:
            self._agents(f, k, applied)

    def _involved(self, spec: FaultSpec) -> list[str]:
        """Hosts of the nodes a fault acts on (a partition: both sides)."""
        nodes = [*spec.params["a"], *spec.params["b"]] if spec.kind == "partition" else \
            [spec.node or ""]
        return sorted({self.sup.placement[n] for n in nodes})

    def _agents(self, f: FaultRecord, k: int, applied: list[tuple[str, Any]]) -> None:
        """The Mininet path on each involved host (``agentfaults.apply``)."""
        body = {"spec": f.spec.as_dict(), "fid": f.fid, "k": k, "seed": f.seed,
                "queue": self.next_queue,
                "nodes": {n.name: {"interfaces": [i.name for i in n.interfaces],
                                   "ips": _ips(n),
                                   "nids": list(n.nids)} for n in self.sup.plan.nodes}}
        self.next_queue += 1
        for host in self._involved(f.spec):
            applied.append(("agent", host))  # its records are on the host before they exist
            self.sup.set.agent(host, "fault-apply", body=body)

    def _guest_ingress(self, f: FaultRecord, k: int, applied: list[tuple[str, Any]]) -> None:
        """A guest's ingress: tbf on its NIC's device on this machine, recorded first."""
        sup = self.sup
        nodes = {n.name: NodeSite(
            name=n.name, ns_pid=0, interfaces=tuple(i.name for i in n.interfaces),
            ips=tuple(_ips(n)), nids=tuple(n.nids),
            ports={i.name: sup.guests.host_port(n.name, i.name) for i in n.interfaces
                   if n.name == f.spec.node}) for n in sup.plan.nodes}
        site = Site(nodes=nodes, fault_dir=str(sup.rdir))
        for res in resources_for(f.spec, site, Activation(f.fid, k, f.seed, 0)):
            rec = res.to_dict()
            applied.append(("local", rec))
            sup.state.setdefault("faults", {}).setdefault(f.fid, []).append(rec)
            sup.save()  # recorded before it is made
            netops.create(rec, {})

    def _revert(self, f: FaultRecord, error: str | None = None) -> None:
        sup = self.sup
        counters: dict[str, int] = {}
        applied = self.applied.pop(f.fid, [])
        while applied:
            what, arg = applied.pop()
            try:
                if what == "link":
                    sup.link(arg[0], arg[1], "up")
                elif what == "agent":
                    reply = sup.set.agent(arg, "fault-revert", "--fault", f.fid)
                    _counts(counters, reply.get("counters", {}))
                    for problem in reply.get("problems", []):
                        sup.event("fault_revert_problem", id=f.fid, problems=[problem])
                elif what == "local":
                    problem = netops.undo(arg)
                    if problem:
                        sup.event("fault_revert_problem", id=f.fid, problems=[problem])
                elif what == "signal":
                    self._signal(arg[1], "CONT")
            except Exception as exc:  # revert what can be reverted
                print(f"fault {f.fid}: revert {what}: {exc}", flush=True)
        if "faults" in sup.state:
            sup.state["faults"].pop(f.fid, None)
            sup.save()
        _counts(f.totals, counters)
        extra = {"error": error} if error else {}
        sup.event("fault_reverted", id=f.fid, activation=max(0, f.activations - 1),
                  fault_kind=f.spec.kind, counters=counters, seed=f.seed, **extra)

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
