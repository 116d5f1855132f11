"""What a fault on the wire is made of: iptables rules, interposers, qdiscs, link changes.

Theory of operation: ``FaultResources`` turns one activation of a fault spec into the list
of resources ``faults.netops`` creates and undoes (each recorded in state.json by
``FaultManager`` before it is made), and lists what is left of them (``residue``). Mixed into
``testbed.mininet.faultctl.FaultManager``, which owns ``sup`` (the supervisor), ``fdir`` and
the NFQUEUE number counter ``next_queue``.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from faults import netops
from faults.spec import INTERPOSED, FaultError
from testbed import needs, runstate

if TYPE_CHECKING:
    from testbed.mininet.faultctl import _Fault


class FaultResources:
    """Resources of fault activations on a Mininet testbed."""

    sup: Any
    fdir: Any
    next_queue: int

    def _ns(self, node: str) -> int:
        return int(self.sup.hosts[node].pid)

    def _resources(self, f: _Fault, k: int) -> list[dict[str, Any]]:
        spec, kind = f.spec, f.spec.kind
        if kind in INTERPOSED or kind in ("blackhole", "flap", "partition"):
            problem = needs.program("iptables", f"the {kind} fault")
            if problem is not None:
                raise FaultError(problem)
        if kind in INTERPOSED:
            return self._interposed(f, k)
        if kind == "blackhole" or (kind == "flap" and spec.params["style"] == "blackhole"):
            ns = self._ns(spec.node or "")
            return [{"type": "iptables", "ns_pid": ns, "node": spec.node, "rule": rule}
                    for rule in netops.rule_specs(f.fid, spec, ["-j", "DROP"])]
        if kind in ("carrier", "flap"):
            return [{"type": "link", "ns_pid": self._ns(spec.node or ""), "node": spec.node,
                     "iface": spec.iface}]
        if kind == "bandwidth":
            return self._bandwidth(f)
        if kind == "partition":
            return self._partition(f)
        if kind == "stop":
            return [{"type": "signal", "node": spec.node,
                     "pid": self.sup.daemons[spec.node].pid}]
        raise FaultError(f"{kind}: not applicable")  # pragma: no cover

    def _interposed(self, f: _Fault, k: int) -> list[dict[str, Any]]:
        spec = f.spec
        require_nfqueue(spec.kind)
        node = spec.node or ""
        queue = self.next_queue
        self.next_queue += 1
        self.fdir.mkdir(exist_ok=True)
        base = self.fdir / f"{f.fid}-{k}"
        inter = {"kind": spec.kind, "params": spec.params, "seed": f.seed + k,
                 "match": spec.match.as_dict(), "queue": queue,
                 "counters": str(base) + ".counters.json",
                 "local_nids": list(self.sup.plan.node(node).nids)}
        ns = self._ns(node)
        out: list[dict[str, Any]] = [
            {"type": "interposer", "ns_pid": ns, "node": node, "interposer": inter,
             "spec_path": str(base) + ".spec.json", "counters": inter["counters"],
             "log": str(base) + ".log"}]
        target = ["-j", "NFQUEUE", "--queue-num", str(queue)]
        for rule in netops.rule_specs(f.fid, spec, target, netops.match_args(spec)):
            out.append({"type": "iptables", "ns_pid": ns, "node": node, "rule": rule})
        return out

    def _bandwidth(self, f: _Fault) -> list[dict[str, Any]]:
        spec = f.spec
        node = spec.node or ""
        ifaces = [spec.iface] if spec.iface else [i.name for i in
                                                  self.sup.plan.node(node).interfaces]
        p = spec.params
        out = []
        for iface in ifaces:
            if spec.direction == "out":
                where: dict[str, Any] = {"ns_pid": self._ns(node), "dev": iface}
            else:  # the bridge-side veth's egress is the node's ingress
                where = {"ns_pid": None,
                         "dev": self.sup.state["nodes"][node]["interfaces"][iface]}
            out.append({"type": "qdisc", "node": node, "iface": iface, "bw": p["bw"],
                        "burst": p["burst"], "latency": p["latency"], **where})
        return out

    def _partition(self, f: _Fault) -> list[dict[str, Any]]:
        """DROP between the sides, on each node's OUTPUT. One way (a -> b): a's packets to
        b are dropped unless they answer a connection b opened (only ``--ctdir ORIGINAL``
        is dropped), so b's requests to a still get their replies."""
        p = f.spec.params
        ips = {n.name: [str(i.ip) for i in n.interfaces] for n in self.sup.plan.nodes}
        tag = ["-m", "comment", "--comment", f"{netops.TAG}{f.fid}"]
        pairs = [(a, b, p["oneway"]) for a in p["a"] for b in p["b"]]
        if not p["oneway"]:
            pairs += [(b, a, False) for a in p["a"] for b in p["b"]]
        out = []
        for src, dst, oneway in pairs:
            for ip in ips[dst]:
                rule = ["OUTPUT", "-d", ip]
                if oneway:
                    rule += ["-m", "conntrack", "--ctdir", "ORIGINAL"]
                out.append({"type": "iptables", "ns_pid": self._ns(src), "node": src,
                            "rule": [*rule, *tag, "-j", "DROP"]})
        return out

    # -- what is left -------------------------------------------------------------------------

    def residue(self) -> list[str]:
        """Every fault artefact still present: tagged iptables rules and tbf qdiscs in the
        node namespaces and on the bridge ports, interposer processes."""
        found = []
        for node in self.sup.plan.nodes:
            ns = self._ns(node.name)
            found += [f"{node.name}: iptables {r}" for r in netops.tagged_rules(ns)]
            for iface in node.interfaces:
                found += [f"{node.name} {iface.name}: {q}"
                          for q in netops.tagged_qdiscs(iface.name, ns)]
                port = self.sup.state["nodes"][node.name]["interfaces"].get(iface.name)
                if port:
                    found += [f"{port}: {q}" for q in netops.tagged_qdiscs(port, None)]
        found += [f"interposer process {pid}" for pid in interposer_pids(self.sup.name)]
        return found


def interposer_pids(name: str) -> list[int]:
    """Live interposer processes tagged with testbed ``name``."""
    out = []
    for pid in runstate.tagged_pids(name):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if b"faults.interposer" in cmd:
            out.append(pid)
    return sorted(out)


def require_nfqueue(kind: str) -> None:
    """A packet fault's interposer needs the NFQUEUE bindings, an optional extra (issue 18:
    the simulator and every other fault kind work without them).

    Raises:
        FaultError: they are not installed, in one line saying how to get them.
    """
    if importlib.util.find_spec("netfilterqueue") is None:
        raise FaultError(f"{kind}: packet faults on the mininet backend need the NFQUEUE "
                         "bindings (netfilterqueue): pip install 'lnet-testbed[faults]' "
                         "(builds against libnetfilter-queue-dev)")
