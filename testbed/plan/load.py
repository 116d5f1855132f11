"""Topology YAML -> frozen, validated plan (STYLE rule 8: plan, then apply).

Theory of operation: this module reads a topology file and returns a :class:`Plan` made only of
frozen dataclasses, tuples and ``ipaddress`` values. It touches no namespace, needs no root and
has no side effects, so backends (mininet, sim, vagrant) only *realise* a plan and every check
here is unit-testable. Bad input is never skipped or logged-and-ignored: every problem is
reported at once in one :class:`TopologyError`, one line each naming file, line and YAML path
(at most 20, then ``and N more``)::

    topo.yaml:14: nodes.c1.interfaces[1]: unknown network 'lan9' (defined: lan0, lan1)
    topo.yaml:17: nodes.s1.helth_sensitivity: unknown key (did you mean 'health_sensitivity'?)

Independent units (each network, each node, each key of a node, each fault) are checked on
after one fails; a name whose definition failed is not reported again where it is used.
Before any of that, the file is read bounded and the YAML's alias expansion measured
(``source``), and the node count is held to the backend's limit (``schema.MAX_NODES``).

Schema (every mapping is closed: an unknown key is an error with a did-you-mean)::

    name: mr2                  # optional testbed name; else the file stem ("default" for text)
    global:                    # optional `lnetctl set <key> <value>` on every node
      health_sensitivity: 100
      retry_count: 2
      transaction_timeout: 10
    networks:                  # required, non-empty: L2 segments, one bridge each
      lan0: {lnet: tcp, subnet: 10.10.0.0/24}    # lnet: LNet net (tcp, tcp1, o2ib2...)
      lan1: {lnet: tcp, subnet: 10.11.0.0/24}    # subnet: IPv4 network, prefix <= 30
      lan2: {lnet: tcp2, subnet: 10.12.0.0/24, subnet6: "2001:db8:12::/64"}
                               # subnet6 (optional): interfaces get an IPv6 address too, the
                               # IPv4 host offset in it (10.12.0.5 -> 2001:db8:12::5); NIs stay
                               # IPv4 (lnetctl net add picks the IPv4 address without --large)
      lan6: {lnet: tcp6, subnet6: "2001:db8:16::/64"}
                               # subnet6 alone: IPv6-only, large NIDs (2001:db8:16::1@tcp6),
                               # its nodes run `lnet configure --large`
    nodes:                     # required, non-empty
      c1: {interfaces: [lan0, lan1]}             # eth0, eth1... one NI each, in list order
      s1:
        interfaces: [lan0, {lan1: 10.11.0.50}]   # {segment: address} pins the address
        global: {retry_count: 3}                 # per-node tunables override the top level
        peers: [c1]                              # static `lnetctl peer add` for these nodes

Addresses: explicit ones are reserved first; then, node by node in file order and interface by
interface, each segment hands out its next free host address from ``.1`` (network, broadcast
and reserved addresses skipped). Names of the testbed, nodes and networks must match
:data:`NAME_RE` because they reach commands and paths (STYLE rule 10).

To extend the schema (routes, routers, udsp, faults...), add the key to the ``*_KEYS`` table of
its mapping and a ``_parse_<key>`` step; the tables are the single source of allowed keys.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from testbed.plan.hosts import parse_hosts, place_nodes
from testbed.plan.model import IfacePlan, NodePlan, Plan, RoutePlan, TopologyError
from testbed.plan.nodes import (
    NodeIn,
    assign_addresses,
    check_peers,
    parse_node,
    route_plans,
)
from testbed.plan.schema import (
    MAX_NODES,
    TOP_KEYS,
    TUNABLES,
    Tunable,
    merge_tunables,
    module_params_of,
    parse_global,
    parse_segments,
)
from testbed.plan.source import default_topology, read_bounded, resolve
from testbed.plan.yamlload import Doc, LocDict, LocList, find_duplicate, kind_name, load_yaml


def parse_topology(text: str, *, source: str = "<string>", name: str | None = None,
                   backend: str | None = None) -> Plan:
    """Validate topology YAML text and expand it into a :class:`Plan`.

    Args:
        text: the YAML document.
        source: what error messages call the document (a file path, or ``<string>``).
        name: testbed name overriding the YAML ``name`` (else the source's file stem).
        backend: the backend it is for (its node limit, :data:`MAX_NODES`); None: the
            largest limit of any backend.
    Raises:
        TopologyError: every problem found (one line each), naming source, line and path.
    """
    doc = Doc(source)
    plan = None
    try:
        plan = _parse(doc, load_yaml(text, source), name, backend)
    except TopologyError as e:  # a fatal one: with every problem noted before it
        doc.errors.extend(e.errors)
    doc.check()
    assert plan is not None
    return plan


def _parse(doc: Doc, data: Any, name: str | None, backend: str | None) -> Plan:
    """``parse_topology``'s steps; a fatal problem raises, the others are noted (the plan
    returned is then partial, and ``parse_topology`` raises instead of returning it)."""
    source = doc.source
    if not isinstance(data, LocDict):
        doc.fail(getattr(data, "line", 1), "",
                 f"top level must be a mapping, got {kind_name(data)}")
    find_duplicate(doc, data, "", set())
    doc.mapping(data, data.line, "", TOP_KEYS)
    plan_name = "default"
    with doc.each():
        plan_name = _plan_name(doc, data, name)
    top: dict[str, Tunable] = {}
    if "global" in data:
        with doc.each():
            top = parse_global(doc, data["global"], data.vline("global"), "global")
    segs = parse_segments(doc, data["networks"], data.vline("networks"))
    nodes_map = doc.mapping(data["nodes"], data.vline("nodes"), "nodes")
    if not nodes_map:
        doc.fail(data.vline("nodes"), "nodes", "at least one node is required")
    _check_node_count(doc, len(nodes_map), data.vline("nodes"), backend)
    nodes = []
    for n in nodes_map:
        with doc.each(str(n)):
            nodes.append(parse_node(doc, nodes_map, n, segs))
    check_peers(doc, nodes)
    assign_addresses(doc, nodes)
    by_name = {n.name: n for n in nodes}
    node_plans = []
    for n in nodes:
        with doc.each(n.name):
            if any(i.ip is None for i in n.ifaces):
                doc.skip()  # its network ran out of addresses (noted)
            node_plans.append(_node_plan(doc, n, top, route_plans(doc, n, by_name)))
    faults: tuple[dict[str, Any], ...] = ()
    if "faults" in data:
        faults = _parse_faults(doc, data["faults"], data.vline("faults"), tuple(node_plans))
    hosts = parse_hosts(doc, data["hosts"], data.vline("hosts")) if "hosts" in data else ()
    placed = place_nodes(doc, nodes_map, tuple(node_plans), hosts)
    return Plan(plan_name, source, tuple(segs.values()), placed,
                tuple((k, top[k].value) for k in TUNABLES if k in top), faults, hosts)


def _check_node_count(doc: Doc, count: int, line: int, backend: str | None) -> None:
    """A node-count limit per backend (issue 11 item 10), before any node is read."""
    limit = MAX_NODES.get(backend or "", max(MAX_NODES.values()))
    if count > limit:
        others = ", ".join(f"{b} {n:,}" for b, n in MAX_NODES.items())
        doc.fail(line, "nodes", f"{count:,} nodes: more than the "
                 f"{backend + ' backend' if backend else 'testbed'} takes ({limit:,}; "
                 f"limits: {others})")


def _parse_faults(doc: Doc, value: Any, line: int,
                  nodes: tuple[NodePlan, ...]) -> tuple[dict[str, Any], ...]:
    """``faults:``: a list of fault mappings, each checked by ``faults.spec.parse_fault``."""
    from faults.spec import FaultError, parse_fault

    if not isinstance(value, LocList):
        doc.fail(line, "faults", f"expected a list, got {kind_name(value)}")
    known = {n.name: [i.name for i in n.interfaces] for n in nodes}
    out = []
    for i, item in enumerate(value):
        at = value.lines[i] if i < len(value.lines) else line
        try:
            spec = parse_fault(item, nodes=known)
        except FaultError as exc:
            if not _names_in(item) & doc.broken:  # a broken node's fault: said already
                doc.note(at, f"faults[{i}]", str(exc))
            continue
        out.append(spec.as_dict())
    return tuple(out)


def _names_in(item: Any) -> set[str]:
    """Node names a fault mapping refers to (``node``, a partition's ``a`` and ``b``)."""
    if not isinstance(item, dict):
        return set()
    refs = [item.get("node"), *(v for k in ("a", "b") if isinstance(item.get(k), list)
                                for v in item[k])]
    return {r for r in refs if isinstance(r, str)}


def _plan_name(doc: Doc, data: LocDict, name: str | None) -> str:
    if name is not None:
        return doc.name(name, None, "name", "testbed")
    if "name" in data:
        return doc.name(data["name"], data.vline("name"), "name", "testbed")
    stem = "default" if doc.source.startswith("<") else Path(doc.source).stem
    return doc.name(stem, None, "name", "testbed (from the file name; set `name:`)")


def _node_plan(doc: Doc, node: NodeIn, top: dict[str, Tunable],
               routes: tuple[RoutePlan, ...] = ()) -> NodePlan:
    ifaces = []
    count = {"eth": 0, "ib": 0}  # an o2ib net's interface is IPoIB-like: ib0, ib1, ...
    for iface in node.ifaces:
        assert iface.ip is not None  # assign_addresses filled every one
        seg = iface.segment
        kind = "ib" if seg.lnet.startswith("o2ib") else "eth"
        name = f"{kind}{count[kind]}"
        count[kind] += 1
        ifaces.append(IfacePlan(name, seg.name, seg.net, iface.ip, seg.subnet.prefixlen,
                                iface.numa, seg.ip6_of(iface.ip),
                                seg.subnet6.prefixlen if seg.subnet6 else 0, seg.ipv4,
                                seg.tunables, seg.lnd_tunables))
    return NodePlan(node.name, tuple(ifaces),
                    merge_tunables(doc, top, node.tunables) + tuple(node.router),
                    tuple(p for p, _, _ in node.peers),
                    module_params_of(doc, top, node.tunables), tuple(node.static_peers),
                    tuple(node.udsp), node.lnet, routes, node.multi_rail)


def load_topology(path: str | os.PathLike[str] | None = None, *,
                  name: str | None = None, backend: str | None = None) -> Plan:
    """Read and validate a topology: a file, or the name of a built-in one (``routed``);
    ``None``: the built-in ``default``. The file is read bounded (``source.read_bounded``).

    Raises:
        TopologyError: unreadable or oversized file, bad YAML or a refused topology.
    """
    file = default_topology() if path is None else resolve(path)
    text = read_bounded(file)
    plan = parse_topology(text, source=str(file), name=name, backend=backend)
    if path is None:
        plan = Plan(plan.name, "<default>", plan.segments, plan.nodes, plan.tunables,
                    plan.faults, plan.hosts)
    return plan
