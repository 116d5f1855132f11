"""ip2nets: choose local NIs by matching interface addresses against IP patterns.

Theory of operation: an ip2nets rule names a net, optionally interfaces, and IP patterns of four
``cfs_expr_list``s (``10.0.0.*``, ``192.168.[1-2].[1-254/2]``). ``resolve`` is
``lustre_lnet_match_ip_to_intf`` (liblnetconfig.c), called for each rule of an imported
``ip2nets:`` sequence (``handle_net_config_sequence``) and for ``net add --ip2net``:

* no interfaces and no patterns: the first interface that is up with an IPv4 address;
* patterns but no interfaces: every interface with an address in a pattern;
* interfaces: each must exist, be up, and (if there are patterns) have an address in one;
  otherwise the rule does not match ("No interface matching 'X'", "Interface 'X' doesn't match
  an IP pattern", "IP pattern(s) do not match available interfaces").

``parse_legacy`` reads the kernel's string form (``net[(if,...)] pattern [pattern...]``,
rules separated by ``;``), the form ``--ip2net`` and the ``ip2nets`` module parameter take
(config.c ``lnet_parse_ip2nets``). IPv6 patterns never match here: the testbed's NIDs are IPv4
(docs/sanity-lnet.md gap E9).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from nodes.dlc.nidlist import RangeExpr, parse_expr_list
from nodes.echo import clip
from nodes.lnet.errors import EINVAL, LNetConfigError


@dataclass(frozen=True, slots=True)
class Rule:
    """One ip2nets rule: ``net`` (``net-spec``), ``interfaces``, ``ranges`` (``ip-range``)."""

    net: str
    interfaces: tuple[str, ...] = ()
    ranges: tuple[str, ...] = ()


def parse_pattern(text: str) -> tuple[tuple[RangeExpr, ...], ...] | None:
    """``cfs_ip_addr_parse``: four expression lists, or None for an IPv6 pattern.

    Raises:
        LNetConfigError: not four dot-separated expression lists.
    """
    if ":" in text:
        return None
    parts = text.strip().split(".")
    if len(parts) != 4:
        raise LNetConfigError(-EINVAL, f"invalid IP pattern '{clip(text)}'")
    try:
        return tuple(parse_expr_list(p, 0, 255) for p in parts)
    except LNetConfigError:
        raise LNetConfigError(-EINVAL, f"invalid IP pattern '{clip(text)}'") from None


def ip_matches(ip: str, patterns: tuple[str, ...]) -> bool:
    """``ip_addr_in_range``: an IPv4 address in any of the patterns."""
    try:
        octets = ipaddress.IPv4Address(ip).packed
    except ValueError:
        return False
    for text in patterns:
        pat = parse_pattern(text)
        if pat is not None and all(any(r.lo <= o <= r.hi and (o - r.lo) % r.stride == 0
                                       for r in exprs)
                                   for o, exprs in zip(octets, pat, strict=True)):
            return True
    return False


def resolve(rule: Rule, local: list[tuple[str, str]]) -> tuple[str, ...]:
    """The interfaces ``rule`` configures among ``local`` (name, IPv4), in order.

    Raises:
        LNetConfigError: -ENOMSG (LUSTRE_CFG_RC_NO_MATCH) with liblnetconfig's reason.
    """
    for text in rule.ranges:
        parse_pattern(text)  # a malformed pattern is an error, not a mismatch
    if not rule.interfaces and not rule.ranges:
        if not local:
            raise LNetConfigError(-42, "No UP interfaces were found")
        return (local[0][0],)
    if not rule.interfaces:
        found = tuple(dict.fromkeys(n for n, ip in local if ip_matches(ip, rule.ranges)))
        if not found:
            raise LNetConfigError(-42, "IP pattern(s) do not match available interfaces")
        return found
    for name in rule.interfaces:
        ips = [ip for n, ip in local if n == name]
        if not ips:
            raise LNetConfigError(-42, f"No interface matching '{clip(name)}'")
        if rule.ranges and not any(ip_matches(ip, rule.ranges) for ip in ips):
            raise LNetConfigError(-42, f"Interface '{clip(name)}' doesn't match an IP pattern")
    return rule.interfaces


_RULE = re.compile(r"^\s*([A-Za-z0-9]+)\s*(?:\(([^)]*)\))?\s*(.*)$")


def parse_legacy(text: str) -> list[Rule]:
    """``net[(if,...)] pattern [pattern ...][; ...]`` (``#`` starts a comment).

    Raises:
        LNetConfigError: -EINVAL naming the bad rule.
    """
    rules = []
    for raw in re.split(r"[;\n]", text):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _RULE.match(line)
        if m is None:
            raise LNetConfigError(-EINVAL, f"invalid ip2nets rule '{clip(line)}'")
        ifaces = tuple(x.strip() for x in (m.group(2) or "").split(",") if x.strip())
        ranges = tuple(m.group(3).split())
        for pat in ranges:
            parse_pattern(pat)
        rules.append(Rule(m.group(1), ifaces, ranges))
    if not rules:
        raise LNetConfigError(-EINVAL, "empty ip2nets")
    return rules
