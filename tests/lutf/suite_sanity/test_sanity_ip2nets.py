"""sanity-lnet.sh tests 150-162: ``lnetctl import`` of ``ip2nets:`` rules matched against the
node's interface addresses (``handle_net_config_sequence``), at lustre-release c881f8ebcb.

``do_import_test``: reinit, import the rules, ``export --backup`` equals what ``net add`` of
the same interfaces exported. eth0 is 10.60.0.1 and 2001:db8:0:f100::1/64, the fake interface
eth1 10.61.0.1 and 2001:db8:0:f101::1/64 (setup_fakeif's FAKE_IPV6). Tests 158-162 are
sanity-lnet's 150-155 with IPv6 ip-range entries."""

from __future__ import annotations

from typing import Any

import pytest

from lutf.suite_sanity.sanity import export, import_text, reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]
IF0_IP, FAKE_IP = "10.60.0.1", "10.61.0.1"


def _rule(net: str, ifaces: list[str], ranges: list[str]) -> str:
    text = f"  - net-spec: {net}\n"
    if ifaces:
        text += "    interfaces:\n" + "".join(f"        {i}: {n}\n" for i, n in
                                            enumerate(ifaces))
    if ranges:
        text += "    ip-range:\n" + "".join(f'        {i}: "{r}"\n' for i, r in
                                          enumerate(ranges))
    return text


def _expected(s: Any, *adds: str) -> dict[str, Any]:
    reinit(s)
    for add in adds:
        run(s, f"net add {add}")
    return export(s)


def _import_test(s: Any, rules: str, expected: dict[str, Any]) -> None:
    reinit(s)
    res = import_text(s, "ip2nets:\n" + rules)
    assert res.rc == 0, res.err
    assert export(s) == expected


def test_sanity_150_import_of_ip2nets_yaml_sequence(s: Any) -> None:
    expected = _expected(s, "--net tcp --if eth0")
    _import_test(s, _rule("tcp", ["eth0"], [IF0_IP]), expected)


def _multiple_rules_test(s: Any, if0: str, fake: str, tcp2_ranges: list[str]) -> None:
    """sanity-lnet 151 and its IPv6 twin 160: two interfaces by one rule, more rules for the
    same net changing nothing, then a rule for a second net."""
    expected = _expected(s, "--net tcp --if eth0", "--net tcp --if eth1")
    rules = _rule("tcp", ["eth0", "eth1"], [if0, fake])
    _import_test(s, rules, expected)
    rules += _rule("tcp", ["eth0"], []) + _rule("tcp", ["eth1"], [fake])
    _import_test(s, rules, expected)  # more rules for the same net change nothing
    expected = _expected(s, "--net tcp --if eth0", "--net tcp --if eth1",
                         "--net tcp2 --if eth0")
    _import_test(s, rules + _rule("tcp2", ["eth0"], tcp2_ranges), expected)


def test_sanity_151_multiple_ip2nets_rules(s: Any) -> None:
    _multiple_rules_test(s, IF0_IP, FAKE_IP, [])


def test_sanity_152_ip2nets_with_wildcard_ip_patterns(s: Any) -> None:
    expected = _expected(s, "--net tcp --if eth0")
    for pattern in ("10.60.0.*", "10.60.*.*", "10.*.*.*"):
        _import_test(s, _rule("tcp", ["eth0"], [pattern]), expected)
    rules = (_rule("tcp", ["eth0"], ["*.*.*.*"]) + _rule("tcp", ["eth0", "eth1"], [])
             + _rule("tcp", ["eth0", "eth1"], [IF0_IP, FAKE_IP]))
    _import_test(s, rules, expected)  # the match-all rule masks the later ones


def test_sanity_153_ip2nets_with_ip_address_ranges(s: Any) -> None:
    expected = _expected(s, "--net tcp --if eth0")
    _import_test(s, _rule("tcp", ["eth0"], ["10.60.0.[0-5]"]), expected)


def test_sanity_154_ip2nets_with_stepped_ip_address_ranges(s: Any) -> None:
    expected = _expected(s, "--net tcp --if eth0")
    _import_test(s, _rule("tcp", ["eth0"], ["10.60.0.[1-5/2]"]), expected)


def test_sanity_155_ip2nets_import_fails_with_no_matching_rule(s: Any) -> None:
    reinit(s)
    assert import_text(s, "ip2nets:\n" + _rule("tcp", ["eth0"], ["10.20.30.40"])).rc != 0


def test_sanity_156_ip2nets_with_comma_separated_ip_ranges(s: Any) -> None:
    expected = _expected(s, "--net tcp --if eth0")
    _import_test(s, _rule("tcp", ["eth0"], ["10.60.0.[3,5,1,7,9]"]), expected)


def test_sanity_157_ip2nets_import_fails_without_net_spec(s: Any) -> None:
    reinit(s)
    text = "ip2nets:\n  - interfaces:\n        0: eth0\n    ip-range:\n        0: 192.168.1.1\n"
    assert import_text(s, text).rc != 0


# Tests 158-162: the same node in sanity-lnet's "IPv4 mode" on a mixed site (its interface has
# an IPv4 and an IPv6 address, FORCE_LARGE_NID false): ip-range entries are IPv6 addresses or
# networks matched against the interfaces' IPv6 addresses, and the NI each rule adds is the
# interface's IPv4 NID, the one `net add --if` gives.
IF0_IPV6, IF0_PREFIX6, FAKE_IPV6 = "2001:db8:0:f100::1", 64, "2001:db8:0:f101::1"


def test_sanity_158_import_of_ip2nets_with_single_ipv6_address(s: Any) -> None:
    expected = _expected(s, "--net tcp --if eth0")
    _import_test(s, _rule("tcp", ["eth0"], [IF0_IPV6]), expected)


def test_sanity_159_import_of_ip2nets_with_ipv6_128_cidr(s: Any) -> None:
    expected = _expected(s, "--net tcp --if eth0")
    _import_test(s, _rule("tcp", ["eth0"], [f"{IF0_IPV6}/128"]), expected)


def test_sanity_160_multiple_ipv6_ip2nets_rules(s: Any) -> None:
    _multiple_rules_test(s, IF0_IPV6, FAKE_IPV6, [IF0_IPV6])


def test_sanity_161_import_of_ip2nets_with_ipv6_prefix_lengths(s: Any) -> None:
    expected = _expected(s, "--net tcp --if eth0")
    prefix = IF0_PREFIX6
    for _ in range(4):  # /64, /32, /16, /8 of the interface's own address
        _import_test(s, _rule("tcp", ["eth0"], [f"{IF0_IPV6}/{prefix}"]), expected)
        prefix //= 2


def test_sanity_162_ip2nets_import_fails_with_non_matching_ipv6(s: Any) -> None:
    reinit(s)
    res = import_text(s, "ip2nets:\n" + _rule("tcp", ["eth0"], ["2001:db8:dead:beef::1"]))
    assert res.rc != 0
    assert 'descr: "No ip2nets rules applied"' in res.err  # handle_net_config_sequence
    assert list(export(s)) == ["global"]  # nothing configured
