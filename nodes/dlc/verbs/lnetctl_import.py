"""``lnetctl import``: a configuration document -> typed DLC commands (spec §9.4).

Theory of operation: ``import_commands(doc, delete)`` turns the document ``lnetctl export``
writes into the typed commands that configure (or, ``--del``, unconfigure) it, in the order of
spec §9.4 -- net/ip2nets, route, routing, buffers, peer, global, numa, udsp -- checking the
whole document first, so a bad entry creates nothing (sanity-lnet 99b, 265). It follows
lnetctl.c ``jt_import`` and its handlers:

* ``net:`` / ``ip2nets:`` (``handle_net_config_sequence``): each ``local NI(s)`` entry is one
  ``net add``/``net del`` of all its interfaces (450); ``tunables`` < 0 mean the LND default
  (``peer_timeout: -1``, 231); ``CPT`` is a ``cfs_expr_list`` or a list of them and a bad one
  ("Unable to parse CPT '...'") fails the import (265, 266); ``lnd tunables: conns_per_peer``
  and ``tos``; ``ip2nets:`` rules are matched against the node's interfaces when applied
  (``lustre_lnet_resolve_ip2nets_rule``), rules that match nothing are skipped, a second rule
  for a configured net changes nothing, and no rule applying is "No ip2nets rules applied";
* ``peer:``: ``--del`` removes exactly the listed ``peer ni`` NIDs (the primary among them
  removes the peer, no list removes the peer: 18a/18b); ``Multi-Rail`` must be a boolean;
* global keys (``handle_global_parameter``): "invalid key 'K'", "no value specified for key
  'K'", "invalid value 'V' for key 'K'" (27); ``lnd_timeout`` is read-only and skipped;
* ``udsp:`` rules in order, deleted in reverse order.

``import_verbs`` renders the commands as lnetctl argv (the testbed's topology validator and
tests use it). Running them is ``nodes/dlc/verbs/lnetctl_config.py``'s ``_import``.
"""

from __future__ import annotations

import errno as E
from dataclasses import dataclass
from typing import Any

from nodes.dlc import commands as C
from nodes.dlc.ip2nets import Rule, parse_pattern
from nodes.dlc.nidlist import parse_expr_list
from nodes.dlc.tunables import parse_long
from nodes.echo import clip
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID, Net
from nodes.o2ib.kibtx import LNETCTL_KEYS

#: sections in the order they are applied (spec §9.4)
IMPORT_ORDER = ("net", "ip2nets", "route", "routing", "buffers", "peer", "global", "numa",
                "udsp")
#: lnetctl.c ``global_params``: the keys ``handle_global_parameter`` accepts
GLOBAL_PARAMS = ("numa_range", "max_interfaces", "max_intf", "discovery", "drop_asym_route",
                 "retry_count", "transaction_timeout", "health_sensitivity",
                 "recovery_interval", "router_sensitivity", "lnd_timeout",
                 "response_tracking", "recovery_limit", "max_recovery_ping_interval")
#: shown by ``global show`` but not settable
GLOBAL_READ_ONLY = ("lnd_timeout",)
_ALIASES = {"max_intf": "max_interfaces", "range": "numa_range", "enable": "routing",
            "tiny": "tiny_buffers", "small": "small_buffers", "large": "large_buffers"}


class ImportError_(LNetConfigError):
    """A document entry that does not describe configuration (names the entry)."""


@dataclass(frozen=True, slots=True)
class Ip2netsBlock:
    """An ``ip2nets:`` sequence: its rules and the NI settings of each (applied together)."""

    rules: tuple[tuple[Rule, C.NetAdd], ...]
    delete: bool = False


Step = C.Command | Ip2netsBlock


def _bad(text: str) -> ImportError_:
    return ImportError_(-E.EINVAL, text)


def _seq(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise _bad(f"{where}: expected a list")
    return value


def _key(entry: Any, key: str, where: str) -> Any:
    if not isinstance(entry, dict) or entry.get(key) is None:
        raise _bad(f"{where}: missing '{key}'")
    return entry[key]


def _s(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _long(key: str, value: Any) -> int:
    """``yaml_lnet_extract_long`` on a scalar."""
    if value is None or _s(value) == "":
        raise _bad(f"no value specified for key '{key}'")
    if isinstance(value, bool) or (n := parse_long(_s(value))) is None:
        raise _bad(f"invalid value '{clip(_s(value))}' for key '{key}'")
    return n


def _values(mapping: Any, where: str) -> tuple[str, ...]:
    """``interfaces:``/``ip-range:``/``nids:`` maps (``0: eth0``) or lists."""
    if isinstance(mapping, dict):
        return tuple(_s(v) for v in mapping.values() if v is not None)
    if isinstance(mapping, list):
        return tuple(_s(v) for v in mapping if v is not None)
    raise _bad(f"{where}: expected a mapping")


def _cpt(value: Any, where: str) -> str | None:
    """``handle_cpt_sequence``: a scalar expression list or a sequence of items."""
    if value is None:
        return None
    text = _s(value) if not isinstance(value, list) else "[" + ",".join(_s(v) for v in value) + "]"
    try:
        parse_expr_list(text)
    except LNetConfigError:
        raise _bad(f"{where}: Unable to parse CPT '{clip(_s(value))}'") from None
    return text


def _tunables(ni: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    kw = dict(base)
    tun = ni.get("tunables")
    if isinstance(tun, dict):
        for key in ("peer_timeout", "peer_credits", "peer_buffer_credits", "credits"):
            if key in tun:
                kw[key] = _long(key, tun[key])
    lnd = ni.get("lnd tunables")
    if isinstance(lnd, dict):
        for key in ("conns_per_peer", "tos"):
            if key in lnd:
                kw[key] = _long(key, lnd[key])
        o2ib = tuple(f"{k}={_long(k, v)}" for k, v in lnd.items() if k in LNETCTL_KEYS
                     and k != "conns_per_peer")  # o2ib nets only (_net_steps)
        if o2ib:
            kw["lnd_tunables"] = o2ib
    return kw


def _net_steps(entries: Any, delete: bool) -> list[Step]:
    steps: list[Step] = []
    for i, net in enumerate(_seq(entries, "net")):
        name = _s(_key(net, "net type", f"net[{i}]"))
        try:
            typed = Net.parse(name)
        except LNetConfigError:
            raise _bad(f"net[{i}]: Invalid network ID '{clip(_s(name))}'") from None
        if name == "lo":
            continue
        nis = net.get("local NI(s)") or []
        if delete and not nis:
            steps.append(C.NetDel(net=typed))
        base = _tunables(net, {})  # tunables set directly in the net apply to its NIs
        for j, ni in enumerate(_seq(nis, f"net[{i}].local NI(s)")):
            where = f"net[{i}].local NI(s)[{j}]"
            if not isinstance(ni, dict):
                raise _bad(f"{where}: expected a mapping")
            ifaces = _values(ni.get("interfaces") or {}, where)
            if not ifaces:
                raise _bad(f"{where}: no interfaces")
            if delete:
                steps.append(C.NetDel(net=typed, interfaces=ifaces))
                continue
            kw = _tunables(ni, base)
            if not name.startswith("o2ib"):  # lnetctl ignores o2iblnd's keys elsewhere
                kw.pop("lnd_tunables", None)
            cpt = _cpt(ni.get("CPT"), where)
            try:
                steps.append(C.NetAdd(net=typed, interfaces=ifaces, cpt=cpt, **kw))
            except C.CommandError as e:
                raise _bad(f"{where}: {str(e).split(': ', 2)[-1]}") from None
    return steps


def _ip2nets_steps(entries: Any, delete: bool) -> list[Step]:
    rules: list[tuple[Rule, C.NetAdd]] = []
    for i, rule in enumerate(_seq(entries, "ip2nets")):
        if not isinstance(rule, dict) or "net-spec" not in rule:
            first = next(iter(rule), "") if isinstance(rule, dict) else rule
            raise _bad(f"Malformed input. Expect 'net-spec' found '{clip(_s(first))}'")
        if "local NI(s)" in rule:
            raise _bad("local NI(s)' not valid for ip2nets")
        net = _s(rule["net-spec"])
        try:
            typed = Net.parse(net)
        except LNetConfigError:
            raise _bad(f"Invalid network ID '{clip(_s(net))}'") from None
        ifaces = _values(rule.get("interfaces") or {}, f"ip2nets[{i}].interfaces")
        ranges = _values(rule.get("ip-range") or {}, f"ip2nets[{i}].ip-range")
        for text in ranges:
            parse_pattern(text)
        spec = net + (f"({','.join(ifaces)})" if ifaces else "")
        add = C.NetAdd(net=typed, ip2net=" ".join([spec, *ranges]),
                       cpt=_cpt(rule.get("CPT"), f"ip2nets[{i}]"), **_tunables(rule, {}))
        rules.append((Rule(net, ifaces, ranges), add))
    return [Ip2netsBlock(tuple(rules), delete)] if rules else []


def _route_steps(entries: Any, delete: bool) -> list[Step]:
    steps: list[Step] = []
    for i, r in enumerate(_seq(entries, "route")):
        net_s, gw_s = _s(_key(r, "net", f"route[{i}]")), _s(_key(r, "gateway", f"route[{i}]"))
        verb = (C.RouteDel if delete else C.RouteAdd).verb
        try:
            net = C.parse_net_field(verb, "net", net_s)
            gw = C.parse_nid_field(verb, "gateways", gw_s)
            if delete:
                steps.append(C.RouteDel(net=net, gateways=(gw,)))
            else:
                hop = _long("hop", r["hop"]) if r.get("hop") is not None else -1
                prio = _long("priority", r["priority"]) if r.get("priority") is not None else -1
                steps.append(C.RouteAdd(net=net, gateways=(gw,), hop=hop, priority=prio))
        except C.CommandError as e:
            raise _bad(f"route[{i}]: {str(e).split(': ', 2)[-1]}") from None
    return steps


def _peer_steps(entries: Any, delete: bool) -> list[Step]:
    steps: list[Step] = []
    for i, p in enumerate(_seq(entries, "peer")):
        prim_s = _s(_key(p, "primary nid", f"peer[{i}]"))
        verb = (C.PeerDel if delete else C.PeerAdd).verb
        mr = p.get("Multi-Rail", True)
        if not isinstance(mr, bool):
            raise _bad(f"peer[{i}]: invalid MR flag param '{clip(_s(mr))}'")
        listed_s = [_s(n.get("nid")) for n in _seq(p.get("peer ni") or [], f"peer[{i}].peer ni")
                    if isinstance(n, dict) and n.get("nid") is not None]
        try:
            prim = C.parse_nid_field(verb, "prim_nid", prim_s)
            listed = [C.parse_nid_field(verb, "nids", n) for n in listed_s]
            if delete:
                steps.append(C.PeerDel(prim_nid=prim, nids=tuple(listed)))
                continue
            state = p.get("peer state")
            lock = isinstance(state, int) and bool(state & 0x100000)  # LNET_PEER_LOCK_PRIMARY
            steps.append(C.PeerAdd(prim_nid=prim, nids=tuple(n for n in listed if n != prim),
                                   non_mr=not mr, lock_prim=lock))
        except C.CommandError as e:
            raise _bad(f"peer[{i}]: {str(e).split(': ', 2)[-1]}") from None
    return steps


def _global_steps(entries: Any, section: str) -> list[Step]:
    items: list[tuple[Any, Any]]
    if isinstance(entries, dict):
        items = list(entries.items())
    elif isinstance(entries, list) and section == "routing":  # full export: routing list
        items = [kv for e in entries if isinstance(e, dict) for kv in e.items()
                 if kv[0] == "enable"]
    else:
        raise _bad(f"{section}: expected a mapping")
    steps: list[Step] = []
    for key, value in items:
        if section == "global" and key not in GLOBAL_PARAMS:
            raise _bad(f"invalid key '{clip(_s(key))}'")
        name = _ALIASES.get(str(key), str(key))
        if name in GLOBAL_READ_ONLY:
            continue
        try:
            steps.append(C.SetTunable(name=name, value=_long(str(key), value)))
        except C.CommandError:
            raise _bad(f"invalid key '{clip(_s(key))}'") from None
    return steps


def _udsp_steps(entries: Any, delete: bool) -> list[Step]:
    items = list(enumerate(_seq(entries, "udsp")))
    steps: list[Step] = []
    for i, rule in (reversed(items) if delete else items):
        if not isinstance(rule, dict):
            raise _bad(f"udsp[{i}]: expected a mapping")
        if delete:
            steps.append(C.UdspDel(idx=_long("idx", _key(rule, "idx", f"udsp[{i}]"))))
            continue
        action = rule.get("action")
        prio = action.get("priority") if isinstance(action, dict) else None
        steps.append(C.UdspAdd(**{k: _s(rule[k]) for k in ("src", "dst", "rte")
                                  if rule.get(k) is not None},
                               priority=-1 if prio is None else _long("priority", prio),
                               idx=-1 if rule.get("idx") is None else _long("idx", rule["idx"])))
    return steps


def import_commands(doc: Any, delete: bool = False) -> list[Step]:
    """The commands a document stands for, in application order (spec §9.4).

    Raises:
        ImportError_: the document is not an lnetctl configuration (names the entry).
    """
    if doc is None:
        return []
    if not isinstance(doc, dict):
        raise _bad("the file is not a YAML mapping of lnetctl sections")
    for key in doc:
        if key not in IMPORT_ORDER:
            raise _bad(f"invalid key '{clip(_s(key))}'")
    steps: list[Step] = []
    for key in (reversed(IMPORT_ORDER) if delete else IMPORT_ORDER):
        value = doc.get(key)
        if value is None:
            continue
        if key == "net":
            steps += _net_steps(value, delete)
        elif key == "ip2nets":
            steps += _ip2nets_steps(value, delete)
        elif key == "route":
            steps += _route_steps(value, delete)
        elif key == "peer":
            steps += _peer_steps(value, delete)
        elif key == "udsp":
            steps += _udsp_steps(value, delete)
        elif not delete:  # routing, buffers, global, numa: nothing to delete
            steps += _global_steps(value, key)
    return steps


def import_verbs(doc: Any, delete: bool = False) -> list[list[str]]:
    """``import_commands`` as lnetctl argv (an ip2nets block as its ``--ip2net`` rules).

    Raises:
        ImportError_: as ``import_commands``.
    """
    out: list[list[str]] = []
    for step in import_commands(doc, delete):
        if isinstance(step, Ip2netsBlock):
            out += [add.argv() for _rule, add in step.rules]
        else:
            out.append(step.argv())
    return out


def nids_of(section: Any) -> list[str]:
    """``import --exec``: the NIDs of a ``ping:``/``discover:`` entry: ``nids: {0: NID}``
    (lnetctl.c ``cmd_mappings``, LNET_CMD_PING) or the export's ``- primary nid: NID``."""
    out: list[str] = []
    items = section if isinstance(section, list) else [section]
    for item in items:
        if isinstance(item, dict):
            if "nids" in item:
                out += list(_values(item["nids"], "nids"))
            elif item.get("primary nid") is not None:
                out.append(_s(item["primary nid"]))
        elif item is not None:
            out.append(_s(item))
    for nid in out:
        try:
            NID.parse(nid)
        except LNetConfigError:
            raise _bad(f"cannot parse NID '{clip(_s(nid))}'") from None
    return out
