"""The ``nodes:`` section: interfaces and addresses, peers, UDSP rules, routes, raw blocks.

Theory of operation: ``parse_node`` reads one node's mapping into a mutable ``NodeIn``;
``load.parse_topology`` then assigns addresses over every node (``assign_addresses``),
resolves route gateways (``route_plans``) and freezes each into a ``NodePlan``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from nodes.dlc.commands import CommandError, UdspAdd
from nodes.echo import shown
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID, ipv6_problem, parse_net, parse_nid
from testbed.plan.model import PeerPlan, RoutePlan, SegmentPlan
from testbed.plan.schema import (
    BUFFER_KEYS,
    IFACE_KEYS,
    NODE_KEYS,
    PEER_KEYS,
    ROUTE_KEYS,
    UDSP_KEYS,
    Tunable,
    parse_global,
)
from testbed.plan.yamlload import Doc, LocDict, LocList, join_field, kind_name, suggest, unknown


@dataclass
class _IfaceIn:
    segment: SegmentPlan
    ip: ipaddress.IPv4Address | None
    line: int
    field: str
    numa: int | None = None


@dataclass
class NodeIn:
    name: str
    ifaces: list[_IfaceIn]
    tunables: dict[str, Tunable]
    peers: list[tuple[str, int, str]] = field(default_factory=list)
    static_peers: list[PeerPlan] = field(default_factory=list)
    udsp: list[UdspAdd] = field(default_factory=list)
    lnet: dict[str, Any] | None = None
    routes: list[tuple[LocDict, int, str]] = field(default_factory=list)
    router: list[tuple[str, int]] = field(default_factory=list)  # forwarding, *_buffers
    multi_rail: bool = True


def parse_node(doc: Doc, m: LocDict, name: Any, segs: dict[str, SegmentPlan]) -> NodeIn:
    fld = join_field("nodes", name)
    doc.name(name, m.key_lines[name], fld, "node")
    spec = doc.mapping(m[name], m.vline(name), fld, NODE_KEYS)
    ifaces = _list(doc, spec, "interfaces", fld)
    if not ifaces:
        doc.fail(spec.vline("interfaces"), f"{fld}.interfaces", "at least one interface "
                 "is required")
    node = NodeIn(name, [], {})
    used: dict[str, str] = {}
    for i, item in enumerate(ifaces):
        with doc.each():
            iface = _parse_iface(doc, item, ifaces.lines[i], f"{fld}.interfaces[{i}]", segs)
            seg = iface.segment.name
            if seg in used:
                doc.fail(iface.line, iface.field, f"network {shown(seg)} already used by "
                         f"{used[seg]}: one interface per network per node (two would make "
                         "Mininet host routing ambiguous)")
            used[seg] = iface.field
            node.ifaces.append(iface)
    if "global" in spec:
        with doc.each():
            node.tunables = parse_global(doc, spec["global"], spec.vline("global"),
                                          f"{fld}.global")
    if "peers" in spec:
        with doc.each():
            _parse_peers(doc, spec, fld, node)
    if "udsp" in spec:
        with doc.each():
            rules = _list(doc, spec, "udsp", fld)
            for i, r in enumerate(rules):
                with doc.each():
                    node.udsp.append(_parse_udsp(doc, r, rules.lines[i], f"{fld}.udsp[{i}]"))
    with doc.each():
        _parse_routing(doc, spec, fld, node)
    if "multi_rail" in spec:
        with doc.each():
            _parse_multi_rail(doc, spec, fld, node)
    if "lnet" in spec:
        with doc.each():
            node.lnet = _parse_lnet(doc, spec["lnet"], spec.vline("lnet"), f"{fld}.lnet")
    if len(node.ifaces) < len(ifaces):
        doc.skip()  # an interface failed (recorded): the node cannot be built
    return node


def _parse_peers(doc: Doc, spec: LocDict, fld: str, node: NodeIn) -> None:
    """``peers:``: node names (static peers by name) or long-form ``{prim_nid: ...}``."""
    peers = _list(doc, spec, "peers", fld)
    for i, peer in enumerate(peers):
        pfield = f"{fld}.peers[{i}]"
        with doc.each():
            if isinstance(peer, LocDict):
                node.static_peers.append(_parse_peer(doc, peer, peers.lines[i], pfield))
                continue
            node.peers.append((doc.string(peer, peers.lines[i], pfield), peers.lines[i],
                               pfield))


def _parse_multi_rail(doc: Doc, spec: LocDict, fld: str, node: NodeIn) -> None:
    """``multi_rail: false``: a downrev node has one NI per LNet net (seed 000 bck-*)."""
    value = spec["multi_rail"]
    if not isinstance(value, bool):
        doc.fail(spec.vline("multi_rail"), f"{fld}.multi_rail",
                 f"must be true or false, got {shown(value)}")
    node.multi_rail = value
    if value:
        return
    nets: dict[str, str] = {}
    for iface in node.ifaces:
        net = iface.segment.lnet
        if net in nets:
            doc.fail(iface.line, iface.field, f"a non-Multi-Rail node has one NI per LNet net: "
                     f"{shown(net)} is already used by {nets[net]}")
        nets[net] = iface.field


def _nid(doc: Doc, value: Any, line: int, fld: str) -> NID:
    text = doc.string(value, line, fld)
    nid = parse_nid(text)
    if nid is None or "@" not in text:
        why = ipv6_problem(text)
        doc.fail(line, fld, f"bad NID {shown(text)} " + (f"({why})" if why else
                 "(expected address@net, e.g. 10.10.0.2@tcp or 2001:db8::2@tcp)"))
    return nid


def _parse_peer(doc: Doc, m: LocDict, line: int, fld: str) -> PeerPlan:
    """``{prim_nid: NID, nids: [NID...], non_mr: bool, lock_prim: bool}`` (cfg-070)."""
    doc.mapping(m, line, fld, PEER_KEYS)
    prim = _nid(doc, m["prim_nid"], m.vline("prim_nid"), f"{fld}.prim_nid")
    nids: list[NID] = []
    if "nids" in m:
        items = _list(doc, m, "nids", fld)
        nids = [_nid(doc, n, items.lines[i], f"{fld}.nids[{i}]") for i, n in enumerate(items)]
    flags = []
    for key in ("non_mr", "lock_prim"):
        val = m.get(key, False)
        if not isinstance(val, bool):
            doc.fail(m.vline(key), f"{fld}.{key}", f"expected true or false, got {kind_name(val)}")
        flags.append(val)
    return PeerPlan(prim, tuple(n for n in nids if n != prim), flags[0], flags[1])


def _parse_udsp(doc: Doc, item: Any, line: int, fld: str) -> UdspAdd:
    """One rule ``{src|dst|rte: RANGE, priority: P, idx: N}`` checked as lnetctl does (§7.1),
    as the typed ``udsp add`` command bring-up sends."""
    from nodes.lnet.udsp import make_rule

    m = doc.mapping(item, line, fld, UDSP_KEYS)
    for key in ("priority", "idx"):
        if key in m and (isinstance(m[key], bool) or not isinstance(m[key], int)
                         or m[key] < 0):
            doc.fail(m.vline(key), f"{fld}.{key}", f"expected an integer >= 0, got {shown(m[key])}")
    texts = {}
    for key in ("src", "dst", "rte"):
        if key in m:
            texts[key] = doc.string(m[key], m.vline(key), f"{fld}.{key}")
    try:
        make_rule(texts.get("src"), texts.get("dst"), texts.get("rte"), m.get("priority"))
    except LNetConfigError as e:
        doc.fail(line, fld, e.descr)
    try:
        return UdspAdd(src=texts.get("src"), dst=texts.get("dst"), rte=texts.get("rte"),
                       priority=m.get("priority", -1), idx=m.get("idx", -1))
    except CommandError as e:
        doc.fail(line, fld, str(e))


def _parse_lnet(doc: Doc, value: Any, line: int, fld: str) -> dict[str, Any]:
    """A raw ``lnetctl export`` block, imported on the node last (spec §9.4, cfg-170)."""
    from nodes.dlc.verbs.lnetctl_config import import_verbs

    m = doc.mapping(value, line, fld)
    plain = _plain(m)
    try:
        import_verbs(plain)
    except LNetConfigError as e:
        doc.fail(line, fld, e.descr)
    return plain


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _list(doc: Doc, spec: LocDict, key: str, fld: str) -> LocList:
    value = spec[key]
    if not isinstance(value, LocList):
        doc.fail(spec.vline(key), f"{fld}.{key}", f"expected a list, got {kind_name(value)}")
    return value


def _parse_iface(doc: Doc, item: Any, line: int, fld: str,
                 segs: dict[str, SegmentPlan]) -> _IfaceIn:
    """``lan0``, ``{lan0: 10.10.0.7}`` or ``{lan0: {ip: 10.10.0.7, numa: 1}}`` (both optional)."""
    pinned = isinstance(item, LocDict) and len(item) == 1
    numa: int | None = None
    if pinned:
        seg_name, ip_text = next(iter(item.items()))
        line, ip_line = item.key_lines[seg_name], item.vline(seg_name)
        if isinstance(ip_text, dict):
            opts = doc.mapping(ip_text, ip_line, join_field(fld, seg_name), IFACE_KEYS)
            if "numa" in opts:
                numa = opts["numa"]
                if isinstance(numa, bool) or not isinstance(numa, int) or not 0 <= numa < 1024:
                    doc.fail(opts.vline("numa"), join_field(join_field(fld, seg_name), "numa"),
                             f"NUMA node must be an integer 0..1023, got {shown(numa)}")
            if "ip" not in opts:
                pinned = False
            else:
                ip_text, ip_line = opts["ip"], opts.vline("ip")
    elif isinstance(item, str):
        seg_name, ip_text, ip_line = item, None, line
    else:
        doc.fail(line, fld, "expected a network name or a one-key mapping {network: address}, "
                 f"got {kind_name(item)}" + (f" with {len(item)} keys" if isinstance(item, dict)
                                         else ""))
    seg = segs.get(seg_name) if isinstance(seg_name, str) else None
    if seg is None:
        if doc.refers_to_broken(seg_name):
            doc.skip()
        doc.fail(line, fld, unknown("network", seg_name, segs))
    if not pinned:
        return _IfaceIn(seg, None, line, fld, numa)
    ip_field = join_field(fld, seg_name)
    ip_text = doc.string(ip_text, ip_line, ip_field)
    if not seg.ipv4:
        doc.fail(ip_line, ip_field, f"network {shown(seg.name)} is IPv6-only: its addresses "
                 "are handed out in order from its subnet6 and cannot be pinned")
    try:
        ip = ipaddress.IPv4Address(ip_text.strip())
    except ValueError:
        doc.fail(ip_line, ip_field, f"bad IPv4 address {shown(ip_text)}")
    net = seg.subnet
    if ip not in net:
        doc.fail(ip_line, ip_field, f"address {ip} is outside network {shown(seg.name)} ({net})")
    if ip in (net.network_address, net.broadcast_address):
        what = "network" if ip == net.network_address else "broadcast"
        doc.fail(ip_line, ip_field, f"address {ip} is the {what} address of {net}")
    return _IfaceIn(seg, ip, ip_line, ip_field, numa)


def assign_addresses(doc: Doc, nodes: list[NodeIn]) -> None:
    """Reserve explicit addresses, then hand out the lowest free host address per segment."""
    taken: dict[ipaddress.IPv4Address, _IfaceIn] = {}
    for node in nodes:
        for iface in node.ifaces:
            if iface.ip is None:
                continue
            if iface.ip in taken:
                first = taken[iface.ip]
                doc.note(iface.line, iface.field, f"duplicate address {iface.ip}: also given "
                         f"at {first.field} (line {first.line})")
            taken.setdefault(iface.ip, iface)
    pools: dict[str, Iterator[ipaddress.IPv4Address]] = {}
    full: set[str] = set()
    for node in nodes:
        for iface in node.ifaces:
            if iface.ip is not None:
                continue
            seg = iface.segment
            pool = pools.setdefault(seg.name, (h for h in seg.subnet.hosts() if h not in taken))
            iface.ip = next(pool, None)
            if iface.ip is None and seg.name not in full:
                full.add(seg.name)
                doc.note(iface.line, iface.field, f"network {shown(seg.name)} ({seg.subnet}) has "
                         "no free address left")


def _int_in(doc: Doc, m: LocDict, key: str, fld: str, lo: int, hi: int) -> int:
    val, line = m[key], m.vline(key)
    if isinstance(val, bool) or not isinstance(val, int) or not lo <= val <= hi:
        doc.fail(line, join_field(fld, key), f"expected an integer in {lo}..{hi}, got {shown(val)}")
    return val


def _parse_routing(doc: Doc, spec: LocDict, fld: str, node: NodeIn) -> None:
    """``routing: true``, ``buffers: {tiny, small, large}``, ``routes: [...]`` (spec §6)."""
    if "routing" in spec:
        if not isinstance(spec["routing"], bool):
            doc.fail(spec.vline("routing"), f"{fld}.routing",
                     f"expected true or false, got {kind_name(spec['routing'])}")
        if spec["routing"]:
            node.router.append(("forwarding", 1))
    if "buffers" in spec:
        m = doc.mapping(spec["buffers"], spec.vline("buffers"), f"{fld}.buffers", BUFFER_KEYS)
        for key in m:
            node.router.insert(0, (f"{key}_buffers",
                                   _int_in(doc, m, key, f"{fld}.buffers", 1, 2**31 - 1)))
    if "routes" in spec:
        items = _list(doc, spec, "routes", fld)
        for i, item in enumerate(items):
            rfld = f"{fld}.routes[{i}]"
            with doc.each():
                node.routes.append((doc.mapping(item, items.lines[i], rfld, ROUTE_KEYS),
                                    items.lines[i], rfld))


def route_plans(doc: Doc, node: NodeIn, by_name: dict[str, NodeIn]
                 ) -> tuple[RoutePlan, ...]:
    """Resolve ``gateway:`` (a node name -> its NID on a net both nodes share; or a NID);
    ``by_name``: every node by name (built once: a topology of n nodes costs O(n))."""
    own = {i.segment.lnet for i in node.ifaces}
    out: list[RoutePlan] = []
    seen: set[tuple[str, str]] = set()
    for m, _line, fld in node.routes:
        with doc.each():
            out.append(_route_plan(doc, node, m, fld, by_name, own, seen))
    return tuple(out)


def _route_plan(doc: Doc, node: NodeIn, m: LocDict, fld: str, by_name: dict[str, NodeIn],
                own: set[str], seen: set[tuple[str, str]]) -> RoutePlan:
    """One ``routes:`` item, its gateway resolved (see ``route_plans``)."""
    net_text = doc.string(m["net"], m.vline("net"), f"{fld}.net")
    net = parse_net(net_text)
    if net is None or str(net) == "lo":
        doc.fail(m.vline("net"), f"{fld}.net", f"bad LNet net {shown(net_text)}")
    if str(net) in own:
        doc.fail(m.vline("net"), f"{fld}.net", f"net {net} is local to node "
                 f"{shown(node.name)}: a route is for a remote net")
    gw_text = doc.string(m["gateway"], m.vline("gateway"), f"{fld}.gateway")
    gfld, gline = f"{fld}.gateway", m.vline("gateway")
    if "@" in gw_text:
        gw = _nid(doc, gw_text, gline, gfld)
        gw_net = str(gw.net)
        if gw in {i.segment.nid_of(i.ip) for i in node.ifaces if i.ip is not None}:
            doc.fail(gline, gfld, f"gateway {gw} is a NID of node {shown(node.name)} itself: "
                     "a route's gateway is another node, a router on a net they share")
    else:
        other = by_name.get(gw_text)
        if other is None and doc.refers_to_broken(gw_text):
            doc.skip()
        if other is node:  # (issue 27 item 8: was "unknown ... did you mean 'c1'?")
            doc.fail(gline, gfld, f"gateway {shown(gw_text)} is node {shown(node.name)} itself: "
                     "a route's gateway is another node, a router on a net they share")
        if other is None:
            near = suggest(gw_text, by_name)
            doc.fail(gline, gfld, f"unknown gateway node {shown(gw_text)} (give a node name "
                     "or a NID" + (f"; did you mean {shown(near)}?)" if near else ")"))
        shared = [i for i in other.ifaces if i.segment.lnet in own]
        if not shared:
            doc.fail(gline, gfld, f"gateway {shown(gw_text)} shares no net with {shown(node.name)}")
        assert shared[0].ip is not None  # addresses are assigned before routes are read
        gw, gw_net = shared[0].segment.nid_of(shared[0].ip), shared[0].segment.lnet
    if gw_net not in own:
        doc.fail(gline, gfld, f"gateway {gw} is not on a net of node {shown(node.name)} "
                 f"({', '.join(sorted(own))})")
    if gw_net == str(net):
        doc.fail(gline, gfld, f"gateway {gw} is on the route's own net {net}")
    if (str(net), str(gw)) in seen:
        doc.fail(m.line, fld, f"route to {net} through {gw} listed twice")
    seen.add((str(net), str(gw)))
    hop = _int_in(doc, m, "hop", fld, 1, 255) if "hop" in m else None
    prio = _int_in(doc, m, "priority", fld, 0, 2**32 - 1) if "priority" in m else None
    return RoutePlan(net, gw, hop, prio)


def check_peers(doc: Doc, nodes: list[NodeIn]) -> None:
    names = {n.name: None for n in nodes}
    for node in nodes:
        seen: set[str] = set()
        for peer, line, pfield in node.peers:
            if peer == node.name:
                doc.note(line, pfield, f"node {shown(peer)} cannot be its own peer")
            elif peer not in names:
                if not doc.refers_to_broken(peer):
                    doc.note(line, pfield, unknown("node", peer, names))
            elif peer in seen:
                doc.note(line, pfield, f"peer {shown(peer)} listed twice")
            seen.add(peer)
