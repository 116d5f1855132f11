"""The supervisor's side of fault resources: the testbed as a ``Site``, and what is left.

Theory of operation: ``faults.realise.resources_for`` is pure; it needs a frozen view of the
running testbed (:class:`faults.realise.Site`: each node's namespace pid, interfaces,
addresses, NIDs, bridge ports and daemon pid), which :meth:`FaultResources.site` builds from
the supervisor. ``residue`` lists every fault artefact still present on the testbed. Mixed into
``testbed.mininet.faultctl.FaultManager``, which owns ``sup`` (the supervisor), ``fdir`` and
the NFQUEUE number counter ``next_queue``.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from faults import resources
from faults.realise import Activation, NodeSite, Site, resources_for
from faults.spec import FaultError
from testbed import needs, runstate

if TYPE_CHECKING:
    from testbed.faultbook import FaultRecord as _Fault


class FaultResources:
    """Resources of fault activations on a Mininet testbed."""

    sup: Any
    fdir: Any
    next_queue: int

    def _ns(self, node: str) -> int:
        return int(self.sup.hosts[node].pid)

    def site(self) -> Site:
        """The testbed as the fault layer sees it, now."""
        nodes = {}
        for n in self.sup.plan.nodes:
            daemon = self.sup.daemons.get(n.name)
            nodes[n.name] = NodeSite(
                name=n.name, ns_pid=self._ns(n.name),
                interfaces=tuple(i.name for i in n.interfaces),
                ips=tuple(a for i in n.interfaces for a in
                          ([str(i.ip)] if i.ipv4 else []) + ([str(i.ip6)] if i.ip6 else [])),
                nids=tuple(n.nids),
                ports=dict(self.sup.state["nodes"][n.name]["interfaces"]),
                daemon_pid=None if daemon is None else daemon.pid)
        return Site(nodes=nodes, fault_dir=str(self.fdir))

    def _resources(self, f: _Fault, k: int) -> list[resources.Resource]:
        """Activation ``k`` of ``f`` as resources; an interposer takes the next queue.

        Raises:
            FaultError: the host lacks what the resources need (iptables, the NFQUEUE
                bindings), in one line (issue 18).
        """
        out = resources_for(f.spec, self.site(), Activation(f.fid, k, f.seed, self.next_queue))
        for tool in sorted({r.tool for r in out if isinstance(r, resources.IptablesRule)}):
            problem = needs.program(tool, f"the {f.spec.kind} fault")
            if problem is not None:
                raise FaultError(problem)
        if any(isinstance(r, resources.Interposer) for r in out):
            require_nfqueue(f.spec.kind)
            self.next_queue += 1
        self.fdir.mkdir(exist_ok=True)
        return out

    # -- what is left -------------------------------------------------------------------------

    def residue(self) -> list[str]:
        """Every fault artefact still present: tagged iptables rules and tbf qdiscs in the
        node namespaces and on the bridge ports, interposer processes."""
        found = []
        for node in self.sup.plan.nodes:
            ns = self._ns(node.name)
            found += [f"{node.name}: iptables {r}" for r in resources.tagged_rules(ns)]
            for iface in node.interfaces:
                found += [f"{node.name} {iface.name}: {q}"
                          for q in resources.tagged_qdiscs(iface.name, ns)]
                port = self.sup.state["nodes"][node.name]["interfaces"].get(iface.name)
                if port:
                    found += [f"{port}: {q}" for q in resources.tagged_qdiscs(port, None)]
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
