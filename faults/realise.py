"""From a fault spec to the resources that realise it: a pure function (issue 12 item 3).

Theory of operation: :func:`resources_for` maps one activation of a :class:`FaultSpec` on a
:class:`Site` (a frozen view of the testbed: each node's namespace pid, interfaces, addresses,
NIDs, bridge ports, daemon pid) to the list of :mod:`faults.resources` values its owner records
and creates in order, and undoes in reverse. Nothing here touches the system, so what any fault
becomes is testable without root. ``BUILDERS`` is the one place a fault kind is realised: one
entry per kind (the process faults ``kill`` and ``restart`` are actions of the owner on its
daemons, not resources). Every iptables rule is built by :func:`rule`, which tags it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from faults.interposer import MARK
from faults.interposer_spec import InterposerSpec
from faults.resources import (
    TAG,
    Interposer,
    IptablesRule,
    LinkDown,
    Qdisc,
    Resource,
    StoppedProcess,
)
from faults.spec import INTERPOSED, FaultError, FaultSpec

#: TCP port of the LNet acceptor (``match.proto: lnet``).
LNET_PORT = 988


@dataclass(frozen=True, slots=True)
class NodeSite:
    """What faults need to know of one node of a running testbed."""

    name: str
    ns_pid: int
    interfaces: tuple[str, ...]
    ips: tuple[str, ...]
    nids: tuple[str, ...]
    #: interface -> its bridge-side veth in the root namespace
    ports: Mapping[str, str]
    daemon_pid: int | None = None


@dataclass(frozen=True, slots=True)
class Site:
    """The testbed a fault lands on: its nodes and the directory for interposer files."""

    nodes: Mapping[str, NodeSite]
    fault_dir: str


@dataclass(frozen=True, slots=True)
class Activation:
    """One activation ``k`` of fault ``fid``: its seed and the NFQUEUE number it may use."""

    fid: str
    k: int
    seed: int
    queue: int


def rule(fid: str, chain: str, *matches: str, target: tuple[str, ...]) -> tuple[str, ...]:
    """An iptables rule (argv after ``-I``): chain, matches, the ``lntb:<fid>`` tag, target."""
    return (chain, *matches, "-m", "comment", "--comment", f"{TAG}{fid}", *target)


def _chains(direction: str) -> list[tuple[str, str]]:
    """(chain, interface option) per direction."""
    return {"out": [("OUTPUT", "-o")], "in": [("INPUT", "-i")],
            "both": [("OUTPUT", "-o"), ("INPUT", "-i")]}[direction]


def match_args(spec: FaultSpec) -> list[str]:
    """iptables match options that narrow what reaches the queue (the rest is the prefilter's)."""
    m = spec.match
    if m.proto in ("tcp", "lnet"):
        port = LNET_PORT if m.proto == "lnet" else m.port
        ports = [] if port is None else ["-m", "multiport", "--ports", str(port)]
        return ["-p", "tcp", *ports]
    if m.proto in ("udp", "icmp"):
        return ["-p", m.proto]
    if m.port is not None:
        return ["-p", "tcp", "-m", "multiport", "--ports", str(m.port)]
    return []


def _node_rules(spec: FaultSpec, site: Site, act: Activation, target: tuple[str, ...],
                extra: list[str]) -> list[Resource]:
    """The fault's rules on its node, one per chain of its direction; our own injected
    packets (fwmark ``MARK``) pass."""
    node = site.nodes[spec.node or ""]
    out: list[Resource] = []
    for tool in _tools(node.ips):
        if tool == "ip6tables":  # ip6tables names ICMPv6 so
            extra = ["ipv6-icmp" if x == "icmp" else x for x in extra]
        for chain, ifopt in _chains(spec.direction):
            iface = [ifopt, spec.iface] if spec.iface else ["!", ifopt, "lo"]
            out.append(IptablesRule(node=node.name, ns_pid=node.ns_pid, rule=rule(
                act.fid, chain, *iface, *extra, "-m", "mark", "!", "--mark", str(MARK),
                target=target), tool=tool))
    return out


def tool_of(ip: str) -> str:
    """``ip6tables`` for an IPv6 address (a large NID's), else ``iptables``."""
    return "ip6tables" if ":" in ip else "iptables"


def _tools(ips: tuple[str, ...]) -> list[str]:
    """The tables a node's traffic goes through: IPv4 (always, as before), and IPv6 when it
    has an IPv6 address."""
    return ["iptables", *(["ip6tables"] if any(":" in ip for ip in ips) else [])]


def _interposed(spec: FaultSpec, site: Site, act: Activation) -> list[Resource]:
    node = site.nodes[spec.node or ""]
    base = f"{site.fault_dir}/{act.fid}-{act.k}"
    inter = InterposerSpec(kind=spec.kind, params=spec.params, seed=act.seed + act.k,
                           match=spec.match, queue=act.queue,
                           counters=f"{base}.counters.json", local_nids=node.nids)
    proc = Interposer(node=node.name, ns_pid=node.ns_pid, interposer=inter,
                      spec_path=f"{base}.spec.json", counters=inter.counters,
                      log=f"{base}.log")
    target = ("-j", "NFQUEUE", "--queue-num", str(act.queue))
    return [proc, *_node_rules(spec, site, act, target, match_args(spec))]


def _blackhole(spec: FaultSpec, site: Site, act: Activation) -> list[Resource]:
    return _node_rules(spec, site, act, ("-j", "DROP"), [])


def _carrier(spec: FaultSpec, site: Site, act: Activation) -> list[Resource]:
    node = site.nodes[spec.node or ""]
    return [LinkDown(node=node.name, ns_pid=node.ns_pid, iface=spec.iface or "")]


def _flap(spec: FaultSpec, site: Site, act: Activation) -> list[Resource]:
    style = _blackhole if spec.params["style"] == "blackhole" else _carrier
    return style(spec, site, act)


def _bandwidth(spec: FaultSpec, site: Site, act: Activation) -> list[Resource]:
    node = site.nodes[spec.node or ""]
    p = spec.params
    out: list[Resource] = []
    for iface in [spec.iface] if spec.iface else node.interfaces:
        if spec.direction == "out":
            ns_pid, dev = node.ns_pid, iface
        else:  # the bridge-side veth's egress is the node's ingress
            ns_pid, dev = None, node.ports[iface]
        out.append(Qdisc(node=node.name, iface=iface, dev=dev, ns_pid=ns_pid, bw=p["bw"],
                         burst=p["burst"], latency=p["latency"]))
    return out


def _partition(spec: FaultSpec, site: Site, act: Activation) -> list[Resource]:
    """DROP between the sides, on each node's OUTPUT. One way (a -> b): a's packets to b are
    dropped unless they answer a connection b opened (only ``--ctdir ORIGINAL`` is dropped),
    so b's requests to a still get their replies."""
    p = spec.params
    pairs = [(a, b, p["oneway"]) for a in p["a"] for b in p["b"]]
    if not p["oneway"]:
        pairs += [(b, a, False) for a in p["a"] for b in p["b"]]
    out: list[Resource] = []
    for src, dst, oneway in pairs:
        for ip in site.nodes[dst].ips:
            ct = ["-m", "conntrack", "--ctdir", "ORIGINAL"] if oneway else []
            out.append(IptablesRule(node=src, ns_pid=site.nodes[src].ns_pid, rule=rule(
                act.fid, "OUTPUT", "-d", ip, *ct, target=("-j", "DROP")), tool=tool_of(ip)))
    return out


def _stop(spec: FaultSpec, site: Site, act: Activation) -> list[Resource]:
    node = site.nodes[spec.node or ""]
    if node.daemon_pid is None:
        raise FaultError(f"stop: node {node.name} has no daemon")
    return [StoppedProcess(node=node.name, pid=node.daemon_pid)]


Builder = Callable[[FaultSpec, Site, Activation], list[Resource]]
#: fault kind -> what realises it (the one place a kind is realised)
BUILDERS: dict[str, Builder] = {
    **dict.fromkeys(sorted(INTERPOSED), _interposed),
    "blackhole": _blackhole,
    "carrier": _carrier,
    "port-down": _carrier,  # the ib* link down: linkwatch -> NI fatal, the port's QPs stop
    "flap": _flap,
    "bandwidth": _bandwidth,
    "partition": _partition,
    "stop": _stop,
}


def resources_for(spec: FaultSpec, site: Site, act: Activation) -> list[Resource]:
    """The resources of one activation of ``spec`` on ``site``, in creation order.

    Raises:
        FaultError: the kind has no resources (``kill``/``restart``), or a target is missing.
    """
    build = BUILDERS.get(spec.kind)
    if build is None:
        raise FaultError(f"{spec.kind}: not applicable")
    return build(spec, site, act)
