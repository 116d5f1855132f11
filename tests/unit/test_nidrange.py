"""NID-range descriptors of UDSP rules (spec §1.1 range syntax, §7.1; cfg-130..140)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.lnet.errors import LNetConfigError
from nodes.lnet.inet6 import ntop6
from nodes.lnet.nid import NID, Net
from nodes.lnet.nidrange import parse_nidrange


@pytest.mark.parametrize(("text", "yes", "no"), [
    ("10.1.1.[1-10/2]@tcp", ["10.1.1.1@tcp", "10.1.1.9@tcp"], ["10.1.1.2@tcp", "10.1.1.11@tcp",
                                                              "10.1.1.1@tcp1"]),
    ("*@o2ib", ["1.2.3.4@o2ib", "0.0.0.0@o2ib"], ["1.2.3.4@o2ib1", "1.2.3.4@tcp"]),
    ("10.0.[0-1].*@tcp[1-3]", ["10.0.1.77@tcp2", "10.0.0.1@tcp3"], ["10.0.2.1@tcp1",
                                                                   "10.0.0.1@tcp"]),
    ("[22-25]@gni", ["22@gni", "25@gni"], ["26@gni", "22@gni1"]),
    ("10.0.0.[1,3,5-6]@tcp", ["10.0.0.3@tcp", "10.0.0.6@tcp"], ["10.0.0.4@tcp"]),
])
def test_nid_ranges_match_per_octet_and_net(text: str, yes: list[str], no: list[str]) -> None:
    """spec §1.1: address ranges per octet with strides, ``*``, net-number ranges."""
    r = parse_nidrange(text)
    assert not r.is_net_rule
    assert all(r.matches_nid(NID.parse(n)) for n in yes)
    assert not any(r.matches_nid(NID.parse(n)) for n in no)


def test_net_forms_match_nets_not_nids() -> None:
    """A bare net (``tcp``, ``tcp[1-3]``) is a net rule: tcp means tcp0 only (spec §7.2)."""
    tcp = parse_nidrange("tcp")
    assert tcp.is_net_rule and tcp.matches_net(Net.parse("tcp"))
    assert not tcp.matches_net(Net.parse("tcp1"))
    assert not tcp.matches_nid(NID.parse("1.2.3.4@tcp"))  # cfs_match_nid_net: no address list
    many = parse_nidrange("tcp[1-3]")
    assert [many.matches_net(Net.parse(f"tcp{i}")) for i in range(5)] == [False, True, True,
                                                                          True, False]


@pytest.mark.parametrize("text", ["tcp", "tcp1", "tcp[1-3]", "*@o2ib", "10.1.1.[1-10/2]@tcp",
                                  "[22-25]@gni", "10.0.[0-1].*@tcp[1-3]", "o2ib3"])
def test_show_form_parses_back_equal(text: str) -> None:
    """``udsp show``/export print a form that import parses to the same rule (cfg-170)."""
    r = parse_nidrange(text)
    assert parse_nidrange(str(r)) == r
    assert str(r) == text


@pytest.mark.parametrize("text", ["", "foo", "10.1.1@tcp", "10.1.1.[5-1]@tcp", "10.1.1.256@tcp",
                                  "1.2.3.4@bogus", "1.2.3.[x]@tcp", "lo1", "tcp[1-"])
def test_bad_ranges_are_einval(text: str) -> None:
    with pytest.raises(LNetConfigError) as e:
        parse_nidrange(text)
    assert e.value.errno == -22 and "\n" not in e.value.descr


# -------------------------------------------------------------- IPv6 netmasks (issue 26)
@pytest.mark.parametrize(("text", "yes", "no"), [
    ("2001:db8:7::/64@tcp", ["2001:db8:7::1@tcp", "2001:db8:7:0:ffff::9@tcp"],
     ["2001:db8:6::1@tcp", "2001:db8:7::1@tcp1", "10.0.0.1@tcp"]),
    ("2001:db8::7@tcp[1-2]", ["2001:db8::7@tcp1", "2001:db8::7@tcp2"],
     ["2001:db8::7@tcp", "2001:db8::8@tcp1"]),
    ("2001:db8::80/121@o2ib", ["2001:db8::80@o2ib", "2001:db8::ff@o2ib"],
     ["2001:db8::7f@o2ib", "2001:db8::100@o2ib"]),
])
def test_ipv6_netmask_matches_large_nids_only(text: str, yes: list[str], no: list[str]) -> None:
    """nidstrings.c ``parse_nidmask`` + ``match_nidmask``: an IPv6 address with an optional
    /prefix (none: /128) matches the large NIDs of the net inside it
    (``libcfs_ip_in_netmask``), never a nid4."""
    r = parse_nidrange(text)
    assert not r.is_net_rule
    assert all(r.matches_nid(NID.parse(n)) for n in yes)
    assert not any(r.matches_nid(NID.parse(n)) for n in no)


@pytest.mark.parametrize(("text", "shown"), [
    ("2001:db8:7::/64@tcp", "2001:db8:7::/64@tcp"),
    ("2001:0DB8:0007:0000::0001/128@tcp1", "2001:db8:7::1@tcp1"),
    ("2001:db8::5/120@tcp", "2001:db8::5/120@tcp"),  # print_nidmask: the address as given
])
def test_ipv6_netmask_prints_as_print_nidmask(text: str, shown: str) -> None:
    """``print_nidmask``: the address in %pI6c form, ``/prefix`` only under 128."""
    r = parse_nidrange(text)
    assert str(r) == shown
    assert parse_nidrange(shown) == r


@pytest.mark.parametrize(("text", "names"), [
    ("2001:db8::[1-4]@tcp", "write the range as a prefix"),
    ("2001:db8::/129@tcp", "prefix length '129' is not in 1-128"),
    ("2001:db8::/0@tcp", "prefix length '0'"),
    ("2001:db8::/@tcp", "prefix length ''"),
    ("2001:db8:::1@tcp", "'2001:db8:::1' is not an IPv6 address"),
    ("fe80::1%eth0@tcp", "is not an IPv6 address"),
    ("2001:db8::1@gni", "cannot parse"),
])
def test_malformed_ipv6_ranges_name_what_and_where(text: str, names: str) -> None:
    with pytest.raises(LNetConfigError) as e:
        parse_nidrange(text)
    assert e.value.errno == -22 and "\n" not in e.value.descr
    assert names in e.value.descr and text[:10] in e.value.descr


@given(addr=st.integers(0, (1 << 128) - 1), prefix=st.integers(1, 128),
       probe=st.integers(0, (1 << 128) - 1))
@settings(max_examples=300, deadline=None)
def test_ipv6_netmask_is_a_prefix_compare_and_round_trips(addr: int, prefix: int,
                                                           probe: int) -> None:
    """Any address/prefix prints back to an equal descriptor, and a large NID matches iff
    its top ``prefix`` bits equal the address's."""
    r = parse_nidrange(f"{ntop6(addr)}/{prefix}@tcp")
    assert parse_nidrange(str(r)) == r
    same = (addr >> (128 - prefix)) == (probe >> (128 - prefix))
    assert r.matches_nid(NID.parse(f"{ntop6(probe)}@tcp")) == same
    assert r.matches_nid(NID.parse(f"{ntop6(addr)}@tcp"))
