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
(config.c ``lnet_parse_ip2nets``).

IPv6 patterns (``lustre_lnet_add_ip_range``: a ``:`` in the text) are one address with an
optional ``/prefix`` of 1-128 (none: /128), matched by netmask against the interface's IPv6
addresses (``lustre_lnet_match_ipv6_netmask``); an IPv4 pattern never matches an IPv6 address and
the reverse. The rule picks interfaces only: the NI is then added by interface name, as
``lustre_lnet_ioctl_config_ni`` does, so it gets the interface's IPv4 NID.
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


Pattern = tuple[tuple[RangeExpr, ...], ...] | ipaddress.IPv6Network


def parse_pattern(text: str) -> Pattern:
    """``lustre_lnet_add_ip_range``: four expression lists (``cfs_ip_addr_parse``), or an IPv6
    network for a text with a ``:`` (``libcfs_ip_str2addr_size``: not loopback, not link-local).

    Raises:
        LNetConfigError: -EINVAL (LUSTRE_CFG_RC_BAD_PARAM), naming the pattern.
    """
    if ":" in text:
        return _parse_ipv6(text)
    parts = text.strip().split(".")
    if len(parts) != 4:
        raise LNetConfigError(-EINVAL, f"invalid IP pattern '{clip(text)}'")
    try:
        return tuple(parse_expr_list(p, 0, 255) for p in parts)
    except LNetConfigError:
        raise LNetConfigError(-EINVAL, f"invalid IP pattern '{clip(text)}'") from None


def _parse_ipv6(text: str) -> ipaddress.IPv6Network:
    addr, slash, prefix = text.strip().partition("/")
    bad = LNetConfigError(-EINVAL, f"invalid IP pattern '{clip(text)}'")
    if slash and not (prefix.isdigit() and 1 <= int(prefix) <= 128):
        raise bad
    try:
        ip = ipaddress.IPv6Address(addr)
    except ValueError:
        raise bad from None
    if ip.is_loopback or ip.is_link_local:
        raise bad
    return ipaddress.IPv6Network((ip, int(prefix) if slash else 128), strict=False)


def ip_matches(ip: str, patterns: tuple[str, ...]) -> bool:
    """``ip_addr_in_range``: an address (IPv4 or IPv6) in any pattern of its family."""
    if ":" in ip:
        try:
            ip6 = ipaddress.IPv6Address(ip.split("%", 1)[0])
        except ValueError:
            return False
        return any(isinstance(pat, ipaddress.IPv6Network) and ip6 in pat
                   for pat in map(parse_pattern, patterns))
    try:
        octets = ipaddress.IPv4Address(ip).packed
    except ValueError:
        return False
    for text in patterns:
        pat = parse_pattern(text)
        if isinstance(pat, ipaddress.IPv6Network):
            continue
        if all(any(r.lo <= o <= r.hi and (o - r.lo) % r.stride == 0 for r in exprs)
               for o, exprs in zip(octets, pat, strict=True)):
            return True
    return False


def resolve(rule: Rule, local: list[tuple[str, str]]) -> tuple[str, ...]:
    """The interfaces ``rule`` configures among ``local`` (name, address: each IPv4 and IPv6
    address of each interface, as ``getifaddrs``), in order.

    Raises:
        LNetConfigError: -ENOMSG (LUSTRE_CFG_RC_NO_MATCH) with liblnetconfig's reason.
    """
    for text in rule.ranges:
        parse_pattern(text)  # a malformed pattern is an error, not a mismatch
    if not rule.interfaces and not rule.ranges:
        for name, ip in local:
            if ":" not in ip:  # the first interface with an AF_INET address
                return (name,)
        raise LNetConfigError(-42, "No UP interfaces were found")
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
