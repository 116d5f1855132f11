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


# ------------------------------------------- IPv4 netmasks (CIDR) and family separation
@pytest.mark.parametrize(("text", "yes", "no"), [
    ("10.0.0.0/24@tcp", ["10.0.0.1@tcp", "10.0.0.255@tcp"],
     ["10.0.1.1@tcp", "10.0.0.1@tcp1", "10.0.0.1@o2ib"]),
    ("10.0.0.77/8@tcp[1-2]", ["10.9.9.9@tcp1", "10.0.0.0@tcp2"], ["11.0.0.1@tcp1",
                                                                   "10.0.0.1@tcp"]),
    ("192.168.1.130/25@o2ib", ["192.168.1.128@o2ib", "192.168.1.255@o2ib"],
     ["192.168.1.127@o2ib", "192.168.2.130@o2ib"]),
    ("10.0.0.9/32@tcp", ["10.0.0.9@tcp"], ["10.0.0.8@tcp"]),
    ("1.2.3.4/1@tcp", ["0.0.0.0@tcp", "127.255.255.255@tcp"], ["128.0.0.0@tcp"]),
])
def test_ipv4_netmask_matches_by_prefix(text: str, yes: list[str], no: list[str]) -> None:
    """nidstrings.c ``parse_nidmask`` (``init_ipv4_nidmask``: ``inet_make_mask``) and
    ``libcfs_ip_in_netmask`` on a 4-byte address: the masked address must equal the masked
    base, whatever host bits the base has."""
    r = parse_nidrange(text)
    assert not r.is_net_rule and r.mask is not None and r.mask.family == 4
    assert all(r.matches_nid(NID.parse(n)) for n in yes), text
    assert not any(r.matches_nid(NID.parse(n)) for n in no), text


@pytest.mark.parametrize(("mask", "nid"), [
    ("10.0.0.0/8@tcp", "::ffff:10.0.0.1@tcp"),   # an IPv4-mapped large NID is still large
    ("10.0.0.0/8@tcp", "a00::1@tcp"),           # whose first 32 bits are 10.0.0.0
    ("0.0.0.0/1@tcp", "2001:db8::1@tcp"),
    ("::/1@tcp", "10.0.0.1@tcp"),
    ("::a00:1@tcp", "10.0.0.1@tcp"),             # same low 32 bits, other family
])
def test_a_netmask_never_matches_the_other_family(mask: str, nid: str) -> None:
    """``match_nidmask``: an AF_INET mask only for ``nid_is_nid4``, an AF_INET6 mask only for
    large NIDs; any other pairing returns 0 before ``libcfs_ip_in_netmask`` runs."""
    assert not parse_nidrange(mask).matches_nid(NID.parse(nid))


@pytest.mark.parametrize(("text", "shown"), [
    ("10.0.0.0/24@tcp", "10.0.0.0/24@tcp"),
    ("10.0.0.77/24@tcp1", "10.0.0.77/24@tcp1"),   # print_nidmask: the address as given
    ("010.000.000.001/016@tcp", "10.0.0.1/16@tcp"),
    ("0" * 5000 + "10.0.0.1/8@tcp", "10.0.0.1/8@tcp"),   # bounded: no 5000-digit int
    ("10.0.0.9/32@tcp", "10.0.0.9@tcp"),          # no /32: the family's maximum
    ("10.0.0.0/8@tcp[1-3]", "10.0.0.0/8@tcp[1-3]"),
])
def test_ipv4_netmask_prints_as_print_nidmask(text: str, shown: str) -> None:
    """``print_nidmask``: ``rpc_ntop`` of the base, ``/prefix`` only under 32; what it prints
    parses back to a descriptor matching the same NIDs."""
    r = parse_nidrange(text)
    assert str(r) == shown
    back = parse_nidrange(shown)
    probes = [NID.parse(f"10.0.{b}.{c}@tcp{n}") for b in (0, 1, 200) for c in (0, 1, 9, 77)
              for n in ("", "1")]
    assert [back.matches_nid(p) for p in probes] == [r.matches_nid(p) for p in probes]


@pytest.mark.parametrize(("text", "names"), [
    ("10.0.0.0/33@tcp", "IPv4 prefix length '33' is not in 1-32"),
    ("10.0.0.0/0@tcp", "IPv4 prefix length '0'"),
    ("10.0.0.0/@tcp", "IPv4 prefix length ''"),
    ("10.0.0.0/x@tcp", "IPv4 prefix length 'x'"),
    ("10.0.0/24@tcp", "'10.0.0' is not an IPv4 address"),
    ("10.0.0.256/24@tcp", "'10.0.0.256' is not an IPv4 address"),
    ("10.0.[0-1].0/24@tcp", "an IPv4 netmask takes no '[...]' range"),  # mixed forms
    ("*/24@tcp", "'*' is not an IPv4 address"),
    ("/24@tcp", "'' is not an IPv4 address"),
    ("10.0.0.0]/24@tcp", "'10.0.0.0]' is not an IPv4 address"),
    ("10.0.0.1000/24@tcp", "'10.0.0.1000' is not an IPv4 address"),
    ("10.0.0.-1/24@tcp", "'10.0.0.-1' is not an IPv4 address"),
    ("2001:db8::/64/3@tcp", "IPv6 prefix length '64/3'"),
])
def test_malformed_ipv4_netmasks_name_what_and_where(text: str, names: str) -> None:
    """``parse_prefix_len`` (1..32 for IPv4, digits only) and ``rpc_pton`` refuse these:
    -EINVAL, one line quoting the argument and the faulty part."""
    with pytest.raises(LNetConfigError) as e:
        parse_nidrange(text)
    assert e.value.errno == -22 and "\n" not in e.value.descr
    assert names in e.value.descr and f"'{text}'" in e.value.descr


def test_a_stride_slash_inside_brackets_stays_an_address_range() -> None:
    """``parse_nidrange``: a ``/`` followed by ``]`` is a range stride, not a prefix."""
    r = parse_nidrange("10.0.0.[1-9/4]@tcp")
    assert r.mask is None and str(r) == "10.0.0.[1-9/4]@tcp"
    assert [r.matches_nid(NID.parse(f"10.0.0.{i}@tcp")) for i in (1, 5, 9, 2)] == [
        True, True, True, False]


@given(addr=st.integers(0, (1 << 32) - 1), prefix=st.integers(1, 31),
       probe=st.integers(0, (1 << 32) - 1))
@settings(max_examples=300, deadline=None)
def test_ipv4_netmask_is_a_prefix_compare_and_round_trips(addr: int, prefix: int,
                                                           probe: int) -> None:
    """Any IPv4 address/prefix under 32 prints back to an equal descriptor, and a 4-byte NID
    matches iff its top ``prefix`` bits equal the address's."""
    def dotted(v: int) -> str:
        return ".".join(str((v >> s) & 0xFF) for s in (24, 16, 8, 0))
    r = parse_nidrange(f"{dotted(addr)}/{prefix}@tcp")
    assert parse_nidrange(str(r)) == r
    same = (addr >> (32 - prefix)) == (probe >> (32 - prefix))
    assert r.matches_nid(NID.parse(f"{dotted(probe)}@tcp")) == same


def test_a_huge_octet_is_one_line_not_a_big_number_parse() -> None:
    """5000 significant digits in an octet: -EINVAL at once (no ``int`` of the whole run)."""
    with pytest.raises(LNetConfigError) as e:
        parse_nidrange("10.0.0." + "1" * 5000 + "/8@tcp")
    assert e.value.errno == -22 and "is not an IPv4 address" in e.value.descr
