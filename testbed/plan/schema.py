"""The schema's key tables and the top-level sections: ``global:`` and ``networks:``.

Theory of operation: every mapping of a topology is closed; the ``*_KEYS`` tables here are
the single source of allowed keys (key -> required?). ``TUNABLES`` are the ``lnetctl set``
tunables in the order a backend applies them, with the ranges of the one table.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from nodes.dlc.modparams import MAX_NOB, parse_networks, parse_routes
from nodes.echo import shown
from nodes.lnd.modparams import LND_PARAMS, lnd_param_value
from nodes.lnet import cpt
from nodes.lnet.cpt import CPT_PARAMS
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import Net, parse_net
from nodes.lnet.tunables import MODULE_PARAMS, RANGES, STRING_MODULE_PARAMS, module_param_value
from nodes.o2ib.kibtx import LNETCTL_KEYS, O2ibTunables, TunableError
from testbed.plan.model import SegmentPlan
from testbed.plan.yamlload import Doc, LocDict, join_field, kind_name

#: Most nodes a topology may have, per backend (issue 11 item 10): Mininet runs a daemon,
#: a namespace and a veth per interface per node (1,000 nodes is ~8 GB of daemons on this
#: box, issue 34); the simulator holds every engine in one process (10,000 nodes come up in seconds,
#: benchmarks/sim_scale.py). Refused at validation, before any node is read.
MAX_NODES: dict[str, int] = {"mininet": 1_000, "sim": 10_000}

#: `lnetctl set` tunables -> inclusive range, in the order a backend should apply them
#: (retry_count before transaction_timeout: with LNet's default timeout of 150 s that order
#: fails only for retry counts above it; the reverse fails for any timeout <= 2). The ranges
#: are the engine's one table (``nodes.lnet.tunables.RANGES``, what the kernel accepts);
#: ``max_interfaces`` below 16 is raised to the default by LNet itself.
TUNABLES: dict[str, tuple[int, int]] = {name: RANGES[name] for name in (
    "numa_range", "max_interfaces", "discovery", "drop_asym_route", "retry_count",
    "transaction_timeout", "health_sensitivity", "recovery_interval", "router_sensitivity",
    "response_tracking", "recovery_limit", "max_recovery_ping_interval", "routing",
    "tiny_buffers", "small_buffers", "large_buffers")}
#: Allowed keys per mapping -> required?
TOP_KEYS: dict[str, bool] = {"name": False, "global": False, "networks": True, "nodes": True,
                             "faults": False, "hosts": False}
#: one host of ``hosts:`` (testbed/plan/hosts.py): SSH target, port, identity, underlay address
HOST_KEYS: dict[str, bool] = {"ssh": False, "port": False, "key": False, "address": False}
NETWORK_KEYS: dict[str, bool] = {"lnet": True, "subnet": False, "subnet6": False,
                                 "tunables": False, "lnd tunables": False}
#: a network's ``tunables:`` (lnetctl net add's) -> range
NET_TUNABLES: dict[str, tuple[int, int]] = {"peer_timeout": (0, 2**31 - 1), "peer_credits": (
    1, 255), "peer_buffer_credits": (0, 2**31 - 1), "credits": (1, 2**31 - 1)}
NODE_KEYS: dict[str, bool] = {"interfaces": True, "global": False, "peers": False,
                              "udsp": False, "lnet": False, "routing": False,
                              "buffers": False, "routes": False, "multi_rail": False,
                              "host": False}
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


@dataclass
class Tunable:
    value: int
    line: int
    field: str


def parse_global(doc: Doc, value: Any, line: int, field: str) -> dict[str, Tunable]:
    """``lnetctl set`` tunables and module parameters: LNet's (spec §0,
    tunables.MODULE_PARAMS) and the socket side's (``ksocklnd.sock_timeout``,
    ``accept_port_bulk``: nodes/lnd/modparams.py LND_PARAMS)."""
    m = doc.mapping(value, line, field, dict.fromkeys(
        [*TUNABLES, *MODULE_PARAMS, *STRING_MODULE_PARAMS, *LND_PARAMS, *CPT_PARAMS], False))
    out: dict[str, Tunable] = {}
    for key, val in m.items():
        if key in STRING_MODULE_PARAMS:
            with doc.each():
                out[key] = _string_param(doc, m, key, val, field)
        elif key in CPT_PARAMS:  # libcfs's CPU partitions (nodes/lnet/cpt.py), checked whole
            with doc.each():
                out[key] = Tunable(val, m.vline(key), join_field(field, key))
        elif key in TUNABLES or key in MODULE_PARAMS or key in LND_PARAMS:
            with doc.each():
                out[key] = _tunable(doc, m, key, val, field)
    return out


def _string_param(doc: Doc, m: LocDict, key: str, val: Any, field: str) -> Tunable:
    """``networks``/``ip2nets``/``routes`` (``options lnet networks=...``): a string the
    kernel's parser takes (nodes/dlc/modparams.py; ``ip2nets`` is matched against the
    node's addresses only when ``lnet configure --all`` runs, as ``lnet_parse_ip2nets``)."""
    vline, vfield = m.vline(key), join_field(field, key)
    if not isinstance(val, str):
        doc.fail(vline, vfield, f"expected a string (as 'options lnet {key}=...'), got "
                                f"{kind_name(val)}")
    if len(val) > MAX_NOB:
        doc.fail(vline, vfield, f"longer than the kernel's {MAX_NOB} characters")
    try:
        if key == "networks":
            parse_networks(val)
        elif key == "routes":
            parse_routes(val)
    except LNetConfigError as e:
        doc.fail(vline, vfield, e.descr)
    return Tunable(val, vline, vfield)  # type: ignore[arg-type]


def _tunable(doc: Doc, m: LocDict, key: str, val: Any, field: str) -> Tunable:
    """One ``global:`` key: a module parameter or an ``lnetctl set`` tunable in range."""
    if key in MODULE_PARAMS or key in LND_PARAMS:
        check = module_param_value if key in MODULE_PARAMS else lnd_param_value
        try:
            check(key, val if not isinstance(val, bool) else "bool")
        except LNetConfigError as e:
            doc.fail(m.vline(key), join_field(field, key), e.descr)
        return Tunable(val, m.vline(key), join_field(field, key))
    lo, hi = TUNABLES[key]
    vline, vfield = m.vline(key), join_field(field, key)
    if isinstance(val, bool) or not isinstance(val, int):
        doc.fail(vline, vfield, f"expected an integer in {lo}..{hi}, got {kind_name(val)}")
    if not lo <= val <= hi:
        doc.fail(vline, vfield, f"{key} must be in {lo}..{hi}, got {val}")
    return Tunable(val, vline, vfield)


def merge_tunables(doc: Doc, top: dict[str, Tunable],
                    own: dict[str, Tunable]) -> tuple[tuple[str, int], ...]:
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


def module_params_of(doc: Doc, top: dict[str, Tunable],
                   own: dict[str, Tunable]) -> tuple[tuple[str, str], ...]:
    merged = {**top, **own}
    for key in CPT_PARAMS:  # libcfs's CPU partitions: what the daemon would refuse
        given = merged.get(key)
        if given is None:
            continue
        value = given.value
        if key == CPT_PARAMS[0] and (isinstance(value, bool) or not isinstance(value, int)):
            doc.fail(given.line, given.field, f"expected an integer in 0..{cpt.MAX_CPTS}, got "
                                              f"{kind_name(value)}")
        try:
            cpt.table(value if key == CPT_PARAMS[0] else 0,
                      str(value) if key == CPT_PARAMS[1] else "")
        except LNetConfigError as e:
            doc.fail(given.line, given.field, e.descr)
    keys = [*MODULE_PARAMS, *STRING_MODULE_PARAMS, *LND_PARAMS, *CPT_PARAMS]
    return tuple((k, str(merged[k].value)) for k in keys if k in merged)


def parse_segments(doc: Doc, value: Any, line: int) -> dict[str, SegmentPlan]:
    m = doc.mapping(value, line, "networks")
    if not m:
        doc.fail(line, "networks", "at least one network is required")
    out: dict[str, SegmentPlan] = {}
    for seg_name, body in m.items():
        with doc.each(str(seg_name)):
            out[seg_name] = _parse_network(doc, m, seg_name, body, out)
    return out


def _parse_network(doc: Doc, m: LocDict, seg_name: Any, body: Any,
                   out: dict[str, SegmentPlan]) -> SegmentPlan:
    """One network (segment): its LNet net and its subnet, not overlapping the others."""
    fld = join_field("networks", seg_name)
    doc.name(seg_name, m.key_lines[seg_name], fld, "network")
    spec = doc.mapping(body, m.vline(seg_name), fld, NETWORK_KEYS)
    lnet = doc.string(spec["lnet"], spec.vline("lnet"), f"{fld}.lnet")
    net = parse_net(lnet)
    if net is None or not net.ip_addressed:
        doc.fail(spec.vline("lnet"), f"{fld}.lnet", f"bad LNet net {shown(lnet)} (expected an "
                 "IP-addressed net such as tcp, tcp1, o2ib2)")
    if "subnet" not in spec:
        if "subnet6" not in spec:
            doc.fail(m.vline(seg_name), f"{fld}.subnet", "missing key 'subnet' (an IPv4 "
                     "network; or 'subnet6' alone for an IPv6-only network)")
        return _ipv6_only(doc, spec, fld, seg_name, net, out)
    subnet = _parse_subnet(doc, spec, f"{fld}.subnet")
    for other in out.values():
        if subnet.overlaps(other.subnet):
            doc.fail(spec.vline("subnet"), f"{fld}.subnet", f"subnet {subnet} overlaps "
                     f"network {shown(other.name)} ({other.subnet})")
    subnet6 = _parse_subnet6(doc, spec, f"{fld}.subnet6", subnet, out) if "subnet6" in spec \
        else None
    tun, lnd = _net_tunables(doc, spec, fld, str(net))
    return SegmentPlan(seg_name, net, subnet, subnet6, tunables=tun, lnd_tunables=lnd)


def _net_tunables(doc: Doc, spec: LocDict, fld: str, net: str
                  ) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    """A network's ``tunables:`` and ``lnd tunables:`` (lnetctl's YAML for ``net add``):
    integers, in range; an o2ib net's lnd tunables as ``kiblnd_tunables_setup`` takes them
    (nodes/o2ib/kibtx.py), another net's only conns_per_peer and tos (the socklnd's)."""
    out: list[tuple[tuple[str, int], ...]] = []
    for key in ("tunables", "lnd tunables"):
        if key not in spec:
            out.append(())
            continue
        m = doc.mapping(spec[key], spec.vline(key), f"{fld}.{key}")
        o2ib = key == "lnd tunables" and net.startswith("o2ib")
        known = (NET_TUNABLES if key == "tunables" else
                 dict.fromkeys([*LNETCTL_KEYS, "tos"], (-1, 2**20)) if o2ib else
                 {"conns_per_peer": (0, 127), "tos": (-1, 255)})
        items = []
        for k, v in m.items():
            where = join_field(f"{fld}.{key}", k)
            if k not in known:
                doc.fail(m.key_lines[k], where, f"unknown key {shown(k)} (known: "
                         f"{', '.join(known)})")
            lo, hi = known[k]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                doc.fail(m.vline(k), where, f"expected an integer in {lo}..{hi}, got "
                         f"{v if isinstance(v, int) else kind_name(v)}")
            items.append((str(k), v))
        if o2ib:
            try:
                O2ibTunables.for_ni(8, 256, dict(items))
            except TunableError as e:
                doc.fail(spec.vline(key), f"{fld}.{key}", str(e))
        out.append(tuple(items))
    return out[0], out[1]


def _ipv6_only(doc: Doc, spec: LocDict, fld: str, seg_name: str, net: Net,
                out: dict[str, SegmentPlan]) -> SegmentPlan:
    """An IPv6-only network: ``subnet6`` alone. Its hosts are numbered in an internal
    ``0.N.0.0`` block (the "this network" range, refused as a ``subnet``), as many as
    subnet6 holds up to 65,534; the interfaces get only their IPv6 address (large NIDs)."""
    line = spec.vline("subnet6")
    text = doc.string(spec["subnet6"], line, f"{fld}.subnet6")
    try:
        host_bits = 128 - ipaddress.IPv6Network(text.strip(), strict=True).prefixlen
    except ValueError:
        host_bits = 16  # _parse_subnet6 names the error
    index = sum(1 for s in out.values() if not s.ipv4) + 1
    if index > 255 or host_bits < 2:
        doc.fail(line, f"{fld}.subnet6", "too many IPv6-only networks (255 at most)"
                 if index > 255 else f"subnet6 {shown(text)} is too small (/126 at most)")
    numbering = ipaddress.IPv4Network(f"0.{index}.0.0/{32 - min(host_bits, 16)}")
    subnet6 = _parse_subnet6(doc, spec, f"{fld}.subnet6", numbering, out)
    return SegmentPlan(seg_name, net, numbering, subnet6, ipv4=False)


def _parse_subnet6(doc: Doc, spec: LocDict, fld: str, subnet: ipaddress.IPv4Network,
                   out: dict[str, SegmentPlan]) -> ipaddress.IPv6Network:
    """A network's IPv6 subnet: each interface's IPv6 address is its IPv4 host offset in it,
    so it must hold as many hosts; not loopback or link-local (``libcfs_ip_str2addr_size``
    refuses those for NIDs), no overlap with another network's."""
    line = spec.vline("subnet6")
    text = doc.string(spec["subnet6"], line, fld)
    try:
        net6 = ipaddress.IPv6Network(text.strip(), strict=True)
    except ValueError:
        doc.fail(line, fld, f"bad subnet6 {shown(text)}: not an IPv6 network like "
                 "2001:db8:10::/64 (host bits clear)")
    if net6.is_loopback or net6.is_link_local:
        doc.fail(line, fld, f"subnet6 {net6} is loopback or link-local")
    if 128 - net6.prefixlen < 32 - subnet.prefixlen:
        doc.fail(line, fld, f"subnet6 {net6} is smaller than subnet {subnet}")
    for other in out.values():
        if other.subnet6 is not None and net6.overlaps(other.subnet6):
            doc.fail(line, fld, f"subnet6 {net6} overlaps network {shown(other.name)} "
                     f"({other.subnet6})")
    return net6


def _parse_subnet(doc: Doc, spec: LocDict, fld: str) -> ipaddress.IPv4Network:
    line = spec.vline("subnet")
    text = doc.string(spec["subnet"], line, fld)
    try:
        subnet = ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        doc.fail(line, fld, f"bad subnet {shown(text)}: not an IPv4 network like 10.10.0.0/24")
    if subnet.prefixlen > MAX_PREFIXLEN:
        doc.fail(line, fld, f"subnet {shown(text)} is too small: prefix must be /{MAX_PREFIXLEN} "
                 "or shorter")
    if subnet.subnet_of(ipaddress.IPv4Network("0.0.0.0/8")):
        doc.fail(line, fld, f"subnet {shown(text)} is in 0.0.0.0/8 (\"this network\": not an "
                 "interface address)")
    if str(subnet.network_address) != text.split("/")[0].strip():
        doc.fail(line, fld, f"bad subnet {shown(text)}: host bits set (did you mean {subnet}?)")
    return subnet
