"""Topology YAML -> frozen, validated plan (STYLE rule 8: plan, then apply).

Theory of operation: this module reads a topology file and returns a :class:`Plan` made only of
frozen dataclasses, tuples and ``ipaddress`` values. It touches no namespace, needs no root and
has no side effects, so backends (mininet, sim, vagrant) only *realise* a plan and every check
here is unit-testable. Bad input is never skipped or logged-and-ignored: the first problem
raises :class:`TopologyError`, whose one-line message names file, line and YAML path::

    topo.yaml:14: nodes.c1.interfaces[1]: unknown network 'lan9' (defined: lan0, lan1)

Schema (every mapping is closed: an unknown key is an error that lists the allowed ones)::

    name: mr2                  # optional testbed name; else the file stem ("default" for text)
    global:                    # optional `lnetctl set <key> <value>` on every node
      health_sensitivity: 100
      retry_count: 2
      transaction_timeout: 10
    networks:                  # required, non-empty: L2 segments, one bridge each
      lan0: {lnet: tcp, subnet: 10.10.0.0/24}    # lnet: LNet net (tcp, tcp1, o2ib2...)
      lan1: {lnet: tcp, subnet: 10.11.0.0/24}    # subnet: IPv4 network, prefix <= 30
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
    _assign_addresses,
    _check_peers,
    _NodeIn,
    _parse_node,
    _route_plans,
)
from testbed.plan.schema import (
    DEFAULT_TOPOLOGY,
    TOP_KEYS,
    TUNABLES,
    _merge_tunables,
    _module_params,
    _parse_global,
    _parse_networks,
    _Tunable,
)
from testbed.plan.yamlload import _Doc, _find_duplicate, _kind, _load_yaml, _LocDict, _LocList


def parse_topology(text: str, *, source: str = "<string>", name: str | None = None) -> Plan:
    """Validate topology YAML text and expand it into a :class:`Plan`.

    Args:
        text: the YAML document.
        source: what error messages call the document (a file path, or ``<string>``).
        name: testbed name overriding the YAML ``name`` (else the source's file stem).
    Raises:
        TopologyError: on the first problem, naming source, line and YAML path.
    """
    doc = _Doc(source)
    data = _load_yaml(text, source)
    if not isinstance(data, _LocDict):
        doc.fail(getattr(data, "line", 1), "", f"top level must be a mapping, got {_kind(data)}")
    _find_duplicate(doc, data, "", set())
    doc.mapping(data, data.line, "", TOP_KEYS)
    plan_name = _plan_name(doc, data, name)
    top = _parse_global(doc, data["global"], data.vline("global"), "global") \
        if "global" in data else {}
    segs = _parse_networks(doc, data["networks"], data.vline("networks"))
    nodes_map = doc.mapping(data["nodes"], data.vline("nodes"), "nodes")
    if not nodes_map:
        doc.fail(data.vline("nodes"), "nodes", "at least one node is required")
    nodes = [_parse_node(doc, nodes_map, n, segs) for n in nodes_map]
    _check_peers(doc, nodes)
    _assign_addresses(doc, nodes)
    by_name = {n.name: n for n in nodes}
    node_plans = tuple(_node_plan(doc, n, top, _route_plans(doc, n, by_name)) for n in nodes)
    faults = _parse_faults(doc, data["faults"], data.vline("faults"), node_plans) \
        if "faults" in data else ()
    hosts = parse_hosts(doc, data["hosts"], data.vline("hosts")) if "hosts" in data else ()
    node_plans = place_nodes(doc, nodes_map, node_plans, hosts)
    return Plan(plan_name, source, tuple(segs.values()), node_plans,
                tuple((k, top[k].value) for k in TUNABLES if k in top), faults, hosts)


def _parse_faults(doc: _Doc, value: Any, line: int,
                  nodes: tuple[NodePlan, ...]) -> tuple[dict[str, Any], ...]:
    """``faults:``: a list of fault mappings, each checked by ``faults.spec.parse_fault``."""
    from faults.spec import FaultError, parse_fault

    if not isinstance(value, _LocList):
        doc.fail(line, "faults", f"expected a list, got {_kind(value)}")
    known = {n.name: [i.name for i in n.interfaces] for n in nodes}
    out = []
    for i, item in enumerate(value):
        at = value.lines[i] if i < len(value.lines) else line
        try:
            spec = parse_fault(item, nodes=known)
        except FaultError as exc:
            doc.fail(at, f"faults[{i}]", str(exc))
        out.append(spec.as_dict())
    return tuple(out)


def _plan_name(doc: _Doc, data: _LocDict, name: str | None) -> str:
    if name is not None:
        return doc.name(name, None, "name", "testbed")
    if "name" in data:
        return doc.name(data["name"], data.vline("name"), "name", "testbed")
    stem = "default" if doc.source.startswith("<") else Path(doc.source).stem
    return doc.name(stem, None, "name", "testbed (from the file name; set `name:`)")


def _node_plan(doc: _Doc, node: _NodeIn, top: dict[str, _Tunable],
               routes: tuple[RoutePlan, ...] = ()) -> NodePlan:
    ifaces = []
    for i, iface in enumerate(node.ifaces):
        assert iface.ip is not None  # _assign_addresses filled every one
        seg = iface.segment
        ifaces.append(IfacePlan(f"eth{i}", seg.name, seg.lnet, iface.ip, seg.subnet.prefixlen,
                                iface.numa))
    return NodePlan(node.name, tuple(ifaces),
                    _merge_tunables(doc, top, node.tunables) + tuple(node.router),
                    tuple(p for p, _, _ in node.peers),
                    _module_params(top, node.tunables), tuple(node.static_peers),
                    tuple(node.udsp), node.lnet, routes, node.multi_rail)


def load_topology(path: str | os.PathLike[str] | None = None, *,
                  name: str | None = None) -> Plan:
    """Read and validate a topology file (``None``: the built-in ``topologies/default.yaml``).

    Raises:
        TopologyError: unreadable file, bad YAML or a refused topology.
    """
    file = Path(path) if path is not None else DEFAULT_TOPOLOGY
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TopologyError(f"cannot read topology: {e}", path=str(file)) from None
    plan = parse_topology(text, source=str(file), name=name)
    if path is None:
        plan = Plan(plan.name, "<default>", plan.segments, plan.nodes, plan.tunables,
                    plan.faults, plan.hosts)
    return plan
