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

import ipaddress
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import parse_net, parse_nid
from nodes.lnet.tunables import MODULE_PARAMS, module_param_value

#: Testbed, node and network names: they reach commands, interface names and paths.
#: Match with ``NAME_RE.fullmatch`` (``$`` alone would accept a trailing newline).
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")

DEFAULT_TOPOLOGY = Path(__file__).resolve().parent.parent / "topologies" / "default.yaml"

_U32 = 2**32 - 1
#: `lnetctl set` tunables -> inclusive range, in the order a backend should apply them
#: (retry_count before transaction_timeout: with LNet's default timeout of 150 s that order
#: fails only for retry counts above it; the reverse fails for any timeout <= 2).
TUNABLES: dict[str, tuple[int, int]] = {
    "numa_range": (0, _U32),
    "max_interfaces": (0, _U32),  # LNet itself raises values below 16 to its default
    "discovery": (0, 1),
    "drop_asym_route": (0, 1),
    "retry_count": (0, _U32),
    "transaction_timeout": (1, _U32),  # api-ni.c transaction_to_set refuses 0
    "health_sensitivity": (0, 1000),
    "recovery_interval": (1, _U32),  # api-ni.c: "must be at least 1 second"
    "router_sensitivity": (0, 100),
    "response_tracking": (0, 3),
    "recovery_limit": (0, _U32),
    "max_recovery_ping_interval": (1, _U32),
    "routing": (0, 1),
    # router buffer counts: the engine (nodes/lnet/tunables.py) refuses 0 as lnetctl does
    "tiny_buffers": (1, _U32),
    "small_buffers": (1, _U32),
    "large_buffers": (1, _U32),
}
#: Allowed keys per mapping -> required?
TOP_KEYS: dict[str, bool] = {"name": False, "global": False, "networks": True, "nodes": True,
                             "faults": False}
NETWORK_KEYS: dict[str, bool] = {"lnet": True, "subnet": True}
NODE_KEYS: dict[str, bool] = {"interfaces": True, "global": False, "peers": False,
                              "udsp": False, "lnet": False, "routing": False,
                              "buffers": False, "routes": False, "multi_rail": False}
#: one route of a node's ``routes:`` list (``lnetctl route add``, spec §6.1)
ROUTE_KEYS: dict[str, bool] = {"net": True, "gateway": True, "hop": False, "priority": False}
#: a node's router buffer pools ``buffers: {tiny: N, small: N, large: N}`` (spec §1.6)
BUFFER_KEYS: dict[str, bool] = {"tiny": False, "small": False, "large": False}
#: long-form static peer ``{prim_nid: NID, nids: [NID...], non_mr: bool, lock_prim: bool}``
PEER_KEYS: dict[str, bool] = {"prim_nid": True, "nids": False, "non_mr": False,
                              "lock_prim": False}
#: one UDSP rule of a node's ``udsp:`` list (spec §7.1): ``lnetctl udsp add`` options
UDSP_KEYS: dict[str, bool] = {"src": False, "dst": False, "rte": False, "priority": False,
                              "idx": False}
#: keys of an interface's option mapping ``{lan0: {ip: ..., numa: ...}}``
IFACE_KEYS: dict[str, bool] = {"ip": False, "numa": False}
MAX_PREFIXLEN = 30  # /31 and /32 leave no room for two hosts plus network and broadcast


class TopologyError(Exception):
    """A refused topology; ``str(e)`` is one line: ``file:line: field: reason``."""

    def __init__(self, reason: str, *, path: str, line: int | None = None, field: str = ""):
        self.reason = reason
        self.path = path
        self.line = line
        self.field = field
        where = path if line is None else f"{path}:{line}"
        parts = [where, field, reason] if field else [where, reason]
        super().__init__(_one_line(": ".join(parts)))


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class SegmentPlan:
    """One L2 segment (a bridge) carrying one LNet net on one IPv4 subnet."""

    name: str
    lnet: str
    subnet: ipaddress.IPv4Network


@dataclass(frozen=True)
class IfacePlan:
    """One node interface and the NI configured on it."""

    name: str
    segment: str
    net: str
    ip: ipaddress.IPv4Address
    prefixlen: int
    numa: int | None = None  # emulated NUMA node of the device (lnetctl net add --numa)

    @property
    def nid(self) -> str:
        return f"{self.ip}@{self.net}"


@dataclass(frozen=True)
class PeerPlan:
    """A long-form static peer: ``lnetctl peer add --prim_nid P [--nid ...] [--non_mr]
    [--lock_prim]`` (cfg-070)."""

    prim_nid: str
    nids: tuple[str, ...] = ()
    non_mr: bool = False
    lock_prim: bool = False

    def argv(self) -> list[str]:
        verb = ["peer", "add", "--prim_nid", self.prim_nid]
        if self.nids:
            verb += ["--nid", ",".join(self.nids)]
        return verb + (["--non_mr"] if self.non_mr else []) + \
            (["--lock_prim"] if self.lock_prim else [])


@dataclass(frozen=True)
class RoutePlan:
    """``lnetctl route add --net N --gateway NID [--hop H] [--priority P]`` (spec §6.1)."""

    net: str
    gateway: str
    hop: int | None = None
    priority: int | None = None

    def argv(self) -> list[str]:
        verb = ["route", "add", "--net", self.net, "--gateway", self.gateway]
        if self.hop is not None:
            verb += ["--hop", str(self.hop)]
        return verb + ([] if self.priority is None else ["--priority", str(self.priority)])


@dataclass(frozen=True)
class NodePlan:
    """One emulated node: its interfaces (NIs), merged tunables and static peers.

    ``module_params`` are LNet module parameters given to the daemon before LNet starts;
    ``static_peers`` the long-form peers, ``udsp`` the rules (``lnetctl udsp add`` options, in
    order) and ``lnet`` a raw ``lnetctl export``-format block imported last (spec §9.4).
    """

    name: str
    interfaces: tuple[IfacePlan, ...]
    tunables: tuple[tuple[str, int], ...]
    peers: tuple[str, ...]
    module_params: tuple[tuple[str, str], ...] = ()
    static_peers: tuple[PeerPlan, ...] = ()
    udsp: tuple[tuple[str, ...], ...] = ()
    lnet: dict[str, Any] | None = None
    #: ``routes:`` (gateway names resolved to NIDs); ``routing: true`` and ``buffers:`` are
    #: in ``tunables`` as ``forwarding``/``*_buffers`` (module parameter forwarding=enabled)
    routes: tuple[RoutePlan, ...] = ()
    #: ``multi_rail: false``: a non-Multi-Rail ("downrev") node, configured with the
    #: testbed-only ``lnetctl set multi_rail 0`` before ``lnet configure`` (bck-025)
    multi_rail: bool = True

    @property
    def nids(self) -> tuple[str, ...]:
        return tuple(i.nid for i in self.interfaces)


@dataclass(frozen=True)
class Plan:
    """A whole validated testbed; backends realise it and nothing else."""

    name: str
    source: str
    segments: tuple[SegmentPlan, ...]
    nodes: tuple[NodePlan, ...]
    tunables: tuple[tuple[str, int], ...]
    #: validated ``faults:`` items (faults.spec mappings), applied once the testbed is up
    faults: tuple[dict[str, Any], ...] = ()

    def node(self, name: str) -> NodePlan:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in testbed {self.name!r}")

    def segment(self, name: str) -> SegmentPlan:
        for s in self.segments:
            if s.name == name:
                return s
        raise KeyError(f"no network {name!r} in testbed {self.name!r}")


# --------------------------------------------------------------------------- YAML with lines


class _LocDict(dict):  # type: ignore[type-arg]
    """A mapping that remembers where its keys and values start (1-based lines)."""

    line: int
    key_lines: dict[Any, int]
    value_lines: dict[Any, int]
    duplicate: tuple[Any, int, int] | None  # (key, first line, repeated line)

    def vline(self, key: Any) -> int:
        """Line of a value; an empty value points at its key instead of the next line."""
        return self.key_lines[key] if self[key] is None else self.value_lines[key]


class _LocList(list):  # type: ignore[type-arg]
    line: int
    lines: list[int]


class _Loader(yaml.SafeLoader):
    """SafeLoader whose mappings and sequences carry line numbers and flag duplicate keys."""


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _LocDict:
    out = _LocDict()
    out.line, out.key_lines, out.value_lines = node.start_mark.line + 1, {}, {}
    out.duplicate = None
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:  # own keys only: merged (<<) ones may be overridden
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = _hashable_key(loader, node, key_node)
        line = key_node.start_mark.line + 1
        if key in seen and out.duplicate is None:
            out.duplicate = (key, seen[key], line)
        seen.setdefault(key, line)
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = _hashable_key(loader, node, key_node)
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
        out.value_lines[key] = value_node.start_mark.line + 1
    return out


def _hashable_key(loader: _Loader, node: yaml.Node, key_node: yaml.Node) -> Any:
    key = loader.construct_object(key_node, deep=True)
    try:
        hash(key)
    except TypeError:
        raise yaml.constructor.ConstructorError(
            "while constructing a mapping", node.start_mark, "found unhashable key",
            key_node.start_mark) from None
    return key


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> _LocList:
    out = _LocList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.lines = [child.start_mark.line + 1 for child in node.value]
    return out


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)
# Nothing in a topology is a date: keep `2020-13-45` a string the validator can place and name.
_Loader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_scalar)


def _load_yaml(text: str, source: str) -> Any:
    """Parse one YAML document; every parser failure becomes a TopologyError with its line."""
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        reason = e.problem or "invalid YAML"
        cmark = e.context_mark  # e.g. "while parsing a flow sequence" opened lines earlier
        if e.context:
            moved = cmark is not None and mark is not None and cmark.line != mark.line
            reason = f"{e.context}{f' (line {cmark.line + 1})' if moved else ''}: {reason}"
        line = mark.line + 1 if mark is not None else None
        kind = "error" if isinstance(e, yaml.constructor.ConstructorError) else "syntax error"
        raise TopologyError(f"YAML {kind}: {reason}", path=source, line=line) from None
    except yaml.reader.ReaderError as e:  # bad bytes or a control character
        line = text.count("\n", 0, e.position) + 1 if isinstance(text, str) else None
        char = f" #x{e.character:04x}" if isinstance(e.character, int) else ""
        raise TopologyError(f"YAML error: unacceptable character{char}: {e.reason}",
                            path=source, line=line) from None
    except yaml.YAMLError as e:
        raise TopologyError(f"YAML error: {e}", path=source) from None
    except (ValueError, TypeError, OverflowError) as e:  # a scalar PyYAML cannot construct
        raise TopologyError(f"YAML value error: {e}", path=source) from None
    except RecursionError:
        raise TopologyError("YAML nested too deeply", path=source) from None


def _one_line(text: str) -> str:
    """Escape every character ``str.splitlines`` would break on, keeping messages one line."""
    return "".join(repr(c)[1:-1] if len(f"a{c}b".splitlines()) > 1 else c for c in text)


# --------------------------------------------------------------------------- validation helpers


def _join(parent: str, key: Any) -> str:
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_-]+", key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{key!r}]"


def _kind(value: Any) -> str:
    names = {_LocDict: "a mapping", _LocList: "a list", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "nothing (null)"}
    return names.get(type(value), f"a {type(value).__name__}")


@dataclass
class _Doc:
    """The source being validated, so every failure can say where it is."""

    source: str

    def fail(self, line: int | None, field: str, reason: str) -> NoReturn:
        raise TopologyError(reason, path=self.source, line=line, field=field)

    def mapping(self, value: Any, line: int, field: str,
                keys: Mapping[str, bool] | None = None) -> _LocDict:
        """Check ``value`` is a mapping and, given a key table, that its keys are allowed."""
        if not isinstance(value, _LocDict):
            self.fail(line, field, f"expected a mapping, got {_kind(value)}")
        if keys is None:
            return value
        for key in value:
            if key not in keys:
                self.fail(value.key_lines[key], _join(field, key),
                          f"unknown key {key!r} (allowed: {', '.join(keys)})")
        for key, required in keys.items():
            if required and key not in value:
                self.fail(value.line, field, f"missing required key {key!r}")
        return value

    def name(self, value: Any, line: int | None, field: str, what: str) -> str:
        if not isinstance(value, str) or not NAME_RE.fullmatch(value):
            self.fail(line, field, f"bad {what} name {value!r}: must match {NAME_RE.pattern}"
                      " (a lower-case letter, then up to 31 of a-z, 0-9, '-')")
        return value

    def string(self, value: Any, line: int, field: str) -> str:
        if not isinstance(value, str):
            self.fail(line, field, f"expected a string, got {_kind(value)}")
        return value


def _find_duplicate(doc: _Doc, value: Any, field: str, seen: set[int]) -> None:
    """Refuse the first repeated key anywhere: PyYAML would silently keep the last one."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, _LocDict):
        if value.duplicate is not None:
            key, first, again = value.duplicate
            doc.fail(again, _join(field, key), f"duplicate key {key!r} (first at line {first})")
        for key, child in value.items():
            _find_duplicate(doc, child, _join(field, key), seen)
    elif isinstance(value, _LocList):
        for i, child in enumerate(value):
            _find_duplicate(doc, child, f"{field}[{i}]", seen)


# --------------------------------------------------------------------------- sections


@dataclass
class _Tunable:
    value: int
    line: int
    field: str


def _parse_global(doc: _Doc, value: Any, line: int, field: str) -> dict[str, _Tunable]:
    """``lnetctl set`` tunables and LNet module parameters (spec §0, tunables.MODULE_PARAMS)."""
    m = doc.mapping(value, line, field, dict.fromkeys([*TUNABLES, *MODULE_PARAMS], False))
    out: dict[str, _Tunable] = {}
    for key, val in m.items():
        if key in MODULE_PARAMS:
            try:
                module_param_value(key, val if not isinstance(val, bool) else "bool")
            except LNetConfigError as e:
                doc.fail(m.vline(key), _join(field, key), e.descr)
            out[key] = _Tunable(val, m.vline(key), _join(field, key))
            continue
        lo, hi = TUNABLES[key]
        vline, vfield = m.vline(key), _join(field, key)
        if isinstance(val, bool) or not isinstance(val, int):
            doc.fail(vline, vfield, f"expected an integer in {lo}..{hi}, got {_kind(val)}")
        if not lo <= val <= hi:
            doc.fail(vline, vfield, f"{key} must be in {lo}..{hi}, got {val}")
        out[key] = _Tunable(val, vline, vfield)
    return out


def _merge_tunables(doc: _Doc, top: dict[str, _Tunable],
                    own: dict[str, _Tunable]) -> tuple[tuple[str, int], ...]:
    """Node values win; then the cross-checks LNet's setters make (api-ni.c)."""
    merged = {**top, **own}
    retry, timeout = merged.get("retry_count"), merged.get("transaction_timeout")
    health = merged.get("health_sensitivity")
    if retry is not None and timeout is not None and timeout.value <= retry.value:
        bad = own.get("transaction_timeout") or own.get("retry_count") or timeout
        doc.fail(bad.line, bad.field, f"transaction_timeout ({timeout.value}) must be greater "
                 f"than retry_count ({retry.value})")
    if retry is not None and health is not None and health.value == 0 and retry.value > 0:
        bad = own.get("retry_count") or own.get("health_sensitivity") or retry
        doc.fail(bad.line, bad.field, "retry_count must be 0 when health_sensitivity is 0 "
                 "(LNet refuses retries with the health feature off)")
    return tuple((k, merged[k].value) for k in TUNABLES if k in merged)  # type: ignore[misc]


def _module_params(top: dict[str, _Tunable],
                   own: dict[str, _Tunable]) -> tuple[tuple[str, str], ...]:
    merged = {**top, **own}
    return tuple((k, str(merged[k].value)) for k in MODULE_PARAMS if k in merged)


def _parse_networks(doc: _Doc, value: Any, line: int) -> dict[str, SegmentPlan]:
    m = doc.mapping(value, line, "networks")
    if not m:
        doc.fail(line, "networks", "at least one network is required")
    out: dict[str, SegmentPlan] = {}
    for seg_name, body in m.items():
        fld = _join("networks", seg_name)
        doc.name(seg_name, m.key_lines[seg_name], fld, "network")
        spec = doc.mapping(body, m.vline(seg_name), fld, NETWORK_KEYS)
        lnet = doc.string(spec["lnet"], spec.vline("lnet"), f"{fld}.lnet")
        net = parse_net(lnet)
        if net is None or not net.ip_addressed:
            doc.fail(spec.vline("lnet"), f"{fld}.lnet", f"bad LNet net {lnet!r} (expected an "
                     "IP-addressed net such as tcp, tcp1, o2ib2)")
        subnet = _parse_subnet(doc, spec, f"{fld}.subnet")
        for other in out.values():
            if subnet.overlaps(other.subnet):
                doc.fail(spec.vline("subnet"), f"{fld}.subnet", f"subnet {subnet} overlaps "
                         f"network {other.name!r} ({other.subnet})")
        out[seg_name] = SegmentPlan(seg_name, str(net), subnet)
    return out


def _parse_subnet(doc: _Doc, spec: _LocDict, fld: str) -> ipaddress.IPv4Network:
    line = spec.vline("subnet")
    text = doc.string(spec["subnet"], line, fld)
    try:
        subnet = ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        doc.fail(line, fld, f"bad subnet {text!r}: not an IPv4 network like 10.10.0.0/24")
    if subnet.prefixlen > MAX_PREFIXLEN:
        doc.fail(line, fld, f"subnet {text!r} is too small: prefix must be /{MAX_PREFIXLEN} "
                 "or shorter")
    if str(subnet.network_address) != text.split("/")[0].strip():
        doc.fail(line, fld, f"bad subnet {text!r}: host bits set (did you mean {subnet}?)")
    return subnet


@dataclass
class _IfaceIn:
    segment: SegmentPlan
    ip: ipaddress.IPv4Address | None
    line: int
    field: str
    numa: int | None = None


@dataclass
class _NodeIn:
    name: str
    ifaces: list[_IfaceIn]
    tunables: dict[str, _Tunable]
    peers: list[tuple[str, int, str]] = field(default_factory=list)
    static_peers: list[PeerPlan] = field(default_factory=list)
    udsp: list[tuple[str, ...]] = field(default_factory=list)
    lnet: dict[str, Any] | None = None
    routes: list[tuple[_LocDict, int, str]] = field(default_factory=list)
    router: list[tuple[str, int]] = field(default_factory=list)  # forwarding, *_buffers
    multi_rail: bool = True


def _parse_node(doc: _Doc, m: _LocDict, name: Any, segs: dict[str, SegmentPlan]) -> _NodeIn:
    fld = _join("nodes", name)
    doc.name(name, m.key_lines[name], fld, "node")
    spec = doc.mapping(m[name], m.vline(name), fld, NODE_KEYS)
    ifaces = _list(doc, spec, "interfaces", fld)
    if not ifaces:
        doc.fail(spec.vline("interfaces"), f"{fld}.interfaces", "at least one interface "
                 "is required")
    node = _NodeIn(name, [], {})
    used: dict[str, str] = {}
    for i, item in enumerate(ifaces):
        iface = _parse_iface(doc, item, ifaces.lines[i], f"{fld}.interfaces[{i}]", segs)
        seg = iface.segment.name
        if seg in used:
            doc.fail(iface.line, iface.field, f"network {seg!r} already used by {used[seg]}: "
                     "one interface per network per node (two would make Mininet host "
                     "routing ambiguous)")
        used[seg] = iface.field
        node.ifaces.append(iface)
    if "global" in spec:
        node.tunables = _parse_global(doc, spec["global"], spec.vline("global"), f"{fld}.global")
    if "peers" in spec:
        peers = _list(doc, spec, "peers", fld)
        for i, peer in enumerate(peers):
            pfield = f"{fld}.peers[{i}]"
            if isinstance(peer, _LocDict):
                node.static_peers.append(_parse_peer(doc, peer, peers.lines[i], pfield))
                continue
            node.peers.append((doc.string(peer, peers.lines[i], pfield), peers.lines[i], pfield))
    if "udsp" in spec:
        rules = _list(doc, spec, "udsp", fld)
        node.udsp = [_parse_udsp(doc, r, rules.lines[i], f"{fld}.udsp[{i}]")
                     for i, r in enumerate(rules)]
    _parse_routing(doc, spec, fld, node)
    if "multi_rail" in spec:
        _parse_multi_rail(doc, spec, fld, node)
    if "lnet" in spec:
        node.lnet = _parse_lnet(doc, spec["lnet"], spec.vline("lnet"), f"{fld}.lnet")
    return node


def _parse_multi_rail(doc: _Doc, spec: _LocDict, fld: str, node: _NodeIn) -> None:
    """``multi_rail: false``: a downrev node has one NI per LNet net (seed 000 bck-*)."""
    value = spec["multi_rail"]
    if not isinstance(value, bool):
        doc.fail(spec.vline("multi_rail"), f"{fld}.multi_rail",
                 f"must be true or false, got {value!r}")
    node.multi_rail = value
    if value:
        return
    nets: dict[str, str] = {}
    for iface in node.ifaces:
        net = iface.segment.lnet
        if net in nets:
            doc.fail(iface.line, iface.field, f"a non-Multi-Rail node has one NI per LNet net: "
                     f"{net!r} is already used by {nets[net]}")
        nets[net] = iface.field


def _nid(doc: _Doc, value: Any, line: int, fld: str) -> str:
    text = doc.string(value, line, fld)
    nid = parse_nid(text)
    if nid is None or "@" not in text:
        doc.fail(line, fld, f"bad NID {text!r} (expected address@net, e.g. 10.10.0.2@tcp)")
    return str(nid)


def _parse_peer(doc: _Doc, m: _LocDict, line: int, fld: str) -> PeerPlan:
    """``{prim_nid: NID, nids: [NID...], non_mr: bool, lock_prim: bool}`` (cfg-070)."""
    doc.mapping(m, line, fld, PEER_KEYS)
    prim = _nid(doc, m["prim_nid"], m.vline("prim_nid"), f"{fld}.prim_nid")
    nids: list[str] = []
    if "nids" in m:
        items = _list(doc, m, "nids", fld)
        nids = [_nid(doc, n, items.lines[i], f"{fld}.nids[{i}]") for i, n in enumerate(items)]
    flags = []
    for key in ("non_mr", "lock_prim"):
        val = m.get(key, False)
        if not isinstance(val, bool):
            doc.fail(m.vline(key), f"{fld}.{key}", f"expected true or false, got {_kind(val)}")
        flags.append(val)
    return PeerPlan(prim, tuple(n for n in nids if n != prim), flags[0], flags[1])


def _parse_udsp(doc: _Doc, item: Any, line: int, fld: str) -> tuple[str, ...]:
    """One rule ``{src|dst|rte: RANGE, priority: P, idx: N}`` checked as lnetctl does (§7.1)."""
    from nodes.lnet.udsp import make_rule

    m = doc.mapping(item, line, fld, UDSP_KEYS)
    argv = ["udsp", "add"]
    for key in ("priority", "idx"):
        if key in m and (isinstance(m[key], bool) or not isinstance(m[key], int)
                         or m[key] < 0):
            doc.fail(m.vline(key), f"{fld}.{key}", f"expected an integer >= 0, got {m[key]!r}")
    texts = {}
    for key in ("src", "dst", "rte"):
        if key in m:
            texts[key] = doc.string(m[key], m.vline(key), f"{fld}.{key}")
            argv += [f"--{key}", texts[key]]
    try:
        make_rule(texts.get("src"), texts.get("dst"), texts.get("rte"), m.get("priority"))
    except LNetConfigError as e:
        doc.fail(line, fld, e.descr)
    for key in ("priority", "idx"):
        if key in m:
            argv += [f"--{key}", str(m[key])]
    return tuple(argv)


def _parse_lnet(doc: _Doc, value: Any, line: int, fld: str) -> dict[str, Any]:
    """A raw ``lnetctl export`` block, imported on the node last (spec §9.4, cfg-170)."""
    from nodes.daemon.lnetctl_config import import_verbs

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


def _list(doc: _Doc, spec: _LocDict, key: str, fld: str) -> _LocList:
    value = spec[key]
    if not isinstance(value, _LocList):
        doc.fail(spec.vline(key), f"{fld}.{key}", f"expected a list, got {_kind(value)}")
    return value


def _parse_iface(doc: _Doc, item: Any, line: int, fld: str,
                 segs: dict[str, SegmentPlan]) -> _IfaceIn:
    """``lan0``, ``{lan0: 10.10.0.7}`` or ``{lan0: {ip: 10.10.0.7, numa: 1}}`` (both optional)."""
    pinned = isinstance(item, _LocDict) and len(item) == 1
    numa: int | None = None
    if pinned:
        seg_name, ip_text = next(iter(item.items()))
        line, ip_line = item.key_lines[seg_name], item.vline(seg_name)
        if isinstance(ip_text, dict):
            opts = doc.mapping(ip_text, ip_line, _join(fld, seg_name), IFACE_KEYS)
            if "numa" in opts:
                numa = opts["numa"]
                if isinstance(numa, bool) or not isinstance(numa, int) or not 0 <= numa < 1024:
                    doc.fail(opts.vline("numa"), _join(_join(fld, seg_name), "numa"),
                             f"NUMA node must be an integer 0..1023, got {numa!r}")
            if "ip" not in opts:
                pinned = False
            else:
                ip_text, ip_line = opts["ip"], opts.vline("ip")
    elif isinstance(item, str):
        seg_name, ip_text, ip_line = item, None, line
    else:
        doc.fail(line, fld, "expected a network name or a one-key mapping {network: address}, "
                 f"got {_kind(item)}" + (f" with {len(item)} keys" if isinstance(item, dict)
                                         else ""))
    seg = segs.get(seg_name) if isinstance(seg_name, str) else None
    if seg is None:
        doc.fail(line, fld, f"unknown network {seg_name!r} (defined: {', '.join(segs)})")
    if not pinned:
        return _IfaceIn(seg, None, line, fld, numa)
    ip_field = _join(fld, seg_name)
    ip_text = doc.string(ip_text, ip_line, ip_field)
    try:
        ip = ipaddress.IPv4Address(ip_text.strip())
    except ValueError:
        doc.fail(ip_line, ip_field, f"bad IPv4 address {ip_text!r}")
    net = seg.subnet
    if ip not in net:
        doc.fail(ip_line, ip_field, f"address {ip} is outside network {seg.name!r} ({net})")
    if ip in (net.network_address, net.broadcast_address):
        what = "network" if ip == net.network_address else "broadcast"
        doc.fail(ip_line, ip_field, f"address {ip} is the {what} address of {net}")
    return _IfaceIn(seg, ip, ip_line, ip_field, numa)


def _assign_addresses(doc: _Doc, nodes: list[_NodeIn]) -> None:
    """Reserve explicit addresses, then hand out the lowest free host address per segment."""
    taken: dict[ipaddress.IPv4Address, _IfaceIn] = {}
    for node in nodes:
        for iface in node.ifaces:
            if iface.ip is None:
                continue
            if iface.ip in taken:
                first = taken[iface.ip]
                doc.fail(iface.line, iface.field, f"duplicate address {iface.ip}: also given "
                         f"at {first.field} (line {first.line})")
            taken[iface.ip] = iface
    pools: dict[str, Iterator[ipaddress.IPv4Address]] = {}
    for node in nodes:
        for iface in node.ifaces:
            if iface.ip is not None:
                continue
            seg = iface.segment
            pool = pools.setdefault(seg.name, (h for h in seg.subnet.hosts() if h not in taken))
            iface.ip = next(pool, None)
            if iface.ip is None:
                doc.fail(iface.line, iface.field, f"network {seg.name!r} ({seg.subnet}) has "
                         "no free address left")


def _int_in(doc: _Doc, m: _LocDict, key: str, fld: str, lo: int, hi: int) -> int:
    val, line = m[key], m.vline(key)
    if isinstance(val, bool) or not isinstance(val, int) or not lo <= val <= hi:
        doc.fail(line, _join(fld, key), f"expected an integer in {lo}..{hi}, got {val!r}")
    return val


def _parse_routing(doc: _Doc, spec: _LocDict, fld: str, node: _NodeIn) -> None:
    """``routing: true``, ``buffers: {tiny, small, large}``, ``routes: [...]`` (spec §6)."""
    if "routing" in spec:
        if not isinstance(spec["routing"], bool):
            doc.fail(spec.vline("routing"), f"{fld}.routing",
                     f"expected true or false, got {_kind(spec['routing'])}")
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
            node.routes.append((doc.mapping(item, items.lines[i], rfld, ROUTE_KEYS),
                                items.lines[i], rfld))


def _route_plans(doc: _Doc, node: _NodeIn, nodes: list[_NodeIn]) -> tuple[RoutePlan, ...]:
    """Resolve ``gateway:`` (a node name -> its NID on a net both nodes share; or a NID)."""
    own = {i.segment.lnet for i in node.ifaces}
    by_name = {n.name: n for n in nodes}
    out: list[RoutePlan] = []
    seen: set[tuple[str, str]] = set()
    for m, _line, fld in node.routes:
        net_text = doc.string(m["net"], m.vline("net"), f"{fld}.net")
        net = parse_net(net_text)
        if net is None or str(net) == "lo":
            doc.fail(m.vline("net"), f"{fld}.net", f"bad LNet net {net_text!r}")
        if str(net) in own:
            doc.fail(m.vline("net"), f"{fld}.net", f"net {net} is local to node "
                     f"{node.name!r}: a route is for a remote net")
        gw_text = doc.string(m["gateway"], m.vline("gateway"), f"{fld}.gateway")
        gfld, gline = f"{fld}.gateway", m.vline("gateway")
        if "@" in gw_text:
            gw = _nid(doc, gw_text, gline, gfld)
            gw_net = gw.split("@", 1)[1]
        else:
            other = by_name.get(gw_text)
            if other is None or other is node:
                doc.fail(gline, gfld, f"unknown gateway node {gw_text!r} (give a node name "
                         f"or a NID; nodes: {', '.join(by_name)})")
            shared = [i for i in other.ifaces if i.segment.lnet in own]
            if not shared:
                doc.fail(gline, gfld, f"gateway {gw_text!r} shares no net with {node.name!r}")
            gw, gw_net = f"{shared[0].ip}@{shared[0].segment.lnet}", shared[0].segment.lnet
        if gw_net not in own:
            doc.fail(gline, gfld, f"gateway {gw} is not on a net of node {node.name!r} "
                     f"({', '.join(sorted(own))})")
        if gw_net == str(net):
            doc.fail(gline, gfld, f"gateway {gw} is on the route's own net {net}")
        if (str(net), gw) in seen:
            doc.fail(m.line, fld, f"route to {net} through {gw} listed twice")
        seen.add((str(net), gw))
        hop = _int_in(doc, m, "hop", fld, 1, 255) if "hop" in m else None
        prio = _int_in(doc, m, "priority", fld, 0, 2**32 - 1) if "priority" in m else None
        out.append(RoutePlan(str(net), gw, hop, prio))
    return tuple(out)


def _check_peers(doc: _Doc, nodes: list[_NodeIn]) -> None:
    names = [n.name for n in nodes]
    for node in nodes:
        seen: set[str] = set()
        for peer, line, pfield in node.peers:
            if peer == node.name:
                doc.fail(line, pfield, f"node {peer!r} cannot be its own peer")
            if peer not in names:
                doc.fail(line, pfield, f"unknown node {peer!r} (defined: {', '.join(names)})")
            if peer in seen:
                doc.fail(line, pfield, f"peer {peer!r} listed twice")
            seen.add(peer)


# --------------------------------------------------------------------------- public API


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
    node_plans = tuple(_node_plan(doc, n, top, _route_plans(doc, n, nodes)) for n in nodes)
    faults = _parse_faults(doc, data["faults"], data.vline("faults"), node_plans) \
        if "faults" in data else ()
    return Plan(plan_name, source, tuple(segs.values()), node_plans,
                tuple((k, top[k].value) for k in TUNABLES if k in top), faults)


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
                    plan.faults)
    return plan
