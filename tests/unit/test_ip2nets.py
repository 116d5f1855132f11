"""nodes.dlc.ip2nets: liblnetconfig's ip-range patterns (``lustre_lnet_add_ip_range``) and
interface matching (``lustre_lnet_match_ip_to_intf``), IPv4 and IPv6."""

from __future__ import annotations

import pytest

from nodes.dlc.ip2nets import Rule, ip_matches, parse_pattern, resolve
from nodes.lnet.errors import LNetConfigError

LOCAL = [("eth0", "10.60.0.1"), ("eth1", "10.61.0.1"),
         ("eth0", "2001:db8:0:f100::1"), ("eth1", "2001:db8:0:f101::1")]


@pytest.mark.parametrize(("ip", "pattern", "hit"), [
    ("2001:db8:0:f100::1", "2001:db8:0:f100::1", True),       # no prefix: /128
    ("2001:db8:0:f100::1", "2001:db8:0:f100::2", False),
    ("2001:db8:0:f100::1", "2001:db8:0:f100::1/128", True),
    ("2001:db8:0:f100::1", "2001:db8:0:f100::77/64", True),   # host bits of the pattern masked
    ("2001:db8:0:f100::1", "2001:db8:0:f101::1/64", False),
    ("2001:db8:0:f100::1", "2001:db8:0:f101::1/48", True),
    ("2001:db8:0:f100::1", "2001:db9::/17", True),            # a prefix inside a byte
    ("2001:db8:0:f100::1", "2001:db9::/32", False),
    ("2001:db8:0:f100::1", "10.60.0.*", False),                # families never cross
    ("10.60.0.1", "2001:db8:0:f100::1/1", False),
    ("10.60.0.1", "10.60.0.[1-5/2]", True),
])
def test_ipv6_and_ipv4_patterns_match_their_own_family(ip: str, pattern: str, hit: bool) -> None:
    assert ip_matches(ip, (pattern,)) is hit


@pytest.mark.parametrize("pattern", ["2001:db8::1/0", "2001:db8::1/129", "2001:db8::1/x",
                                     "2001:db8::g", "::1", "fe80::1", "fe80::1/64"])
def test_bad_ipv6_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(LNetConfigError, match="invalid IP pattern"):
        parse_pattern(pattern)


def test_rules_pick_interfaces_by_their_ipv6_addresses() -> None:
    assert resolve(Rule("tcp", ("eth0",), ("2001:db8:0:f100::1",)), LOCAL) == ("eth0",)
    assert resolve(Rule("tcp", (), ("2001:db8:0:f101::/64",)), LOCAL) == ("eth1",)
    assert resolve(Rule("tcp", (), ("2001:db8::/32",)), LOCAL) == ("eth0", "eth1")
    with pytest.raises(LNetConfigError, match="Interface 'eth0' doesn't match an IP pattern"):
        resolve(Rule("tcp", ("eth0",), ("2001:db8:dead:beef::1",)), LOCAL)
    with pytest.raises(LNetConfigError, match="do not match available interfaces"):
        resolve(Rule("tcp", (), ("2001:db8:dead:beef::/64",)), LOCAL)


def test_a_bare_rule_takes_the_first_interface_with_an_ipv4_address() -> None:
    assert resolve(Rule("tcp"), [("eth0", "2001:db8::1"), ("eth1", "10.0.0.1")]) == ("eth1",)
    with pytest.raises(LNetConfigError, match="No UP interfaces"):
        resolve(Rule("tcp"), [("eth0", "2001:db8::1")])
