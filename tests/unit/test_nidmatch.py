"""Compiled NID lists as nidstrings.c ``cfs_parse_nidlist`` / ``cfs_match_nid`` /
``cfs_print_nidlist`` make them (issue 26: IPv6 addresses and IPv4/IPv6 netmasks), and
``lnetctl debug nidlist`` (``lustre_lnet_debug_nidlist``) printing and matching with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID
from nodes.lnet.nidmatch import match_nid, parse_nidlist, print_nidlist
from testbed.sim import SimTestbed

LIST = ("2001:db8:7::/64@tcp 10.0.0.0/24@tcp 10.1.[0-1].[1-9/4]@tcp *@o2ib 2001:db8::9@tcp1 "
        "[20-30/5]@gni 0@lo")


@pytest.mark.parametrize(("nid", "hit"), [
    ("2001:db8:7::1@tcp", True), ("2001:db8:7:0:ffff::1@tcp", True),
    ("2001:db8:8::1@tcp", False),                     # outside /64
    ("2001:db8:7::1@tcp1", False),                    # other net number
    ("10.0.0.200@tcp", True), ("10.0.1.1@tcp", False),
    ("10.1.1.5@tcp", True), ("10.1.1.6@tcp", False),  # stride 4 from 1
    ("1.2.3.4@o2ib", True), ("::1@o2ib", True),       # nr_all: any address, either size
    ("1.2.3.4@o2ib1", False),
    ("2001:db8::9@tcp1", True), ("2001:db8::8@tcp1", False),
    ("25@gni", True), ("26@gni", False), ("0@lo", True),
])
def test_cfs_match_nid_over_masks_ranges_and_nets(nid: str, hit: bool) -> None:
    """``cfs_match_nid``: LND type and net number first, then ``nr_all``, the netmasks of the
    NID's family (``match_nidmask``), the address ranges (``nf_match_addr``)."""
    assert match_nid(parse_nidlist(LIST), NID.parse(nid)) == hit


@pytest.mark.parametrize(("mask", "nid"), [
    ("10.0.0.0/8@tcp", "a00::1@tcp"), ("0.0.0.0/1@tcp", "::1@tcp"),
    ("::/1@tcp", "10.0.0.1@tcp"), ("::a00:1@tcp", "10.0.0.1@tcp"),
    ("::ffff:10.0.0.1@tcp", "10.0.0.1@tcp"),
])
def test_match_nidmask_never_crosses_families(mask: str, nid: str) -> None:
    """``match_nidmask`` returns 0 for a 4-byte NID against an AF_INET6 mask and for a large
    NID against an AF_INET one."""
    assert not match_nid(parse_nidlist(mask), NID.parse(nid))


def test_an_ipv4_range_tries_a_large_nids_first_four_bytes() -> None:
    """``cfs_match_nid`` hands an address range ``be32_to_cpu(nid_addr[0])``: for a large NID
    its leading 32 bits (2001:db8:: -> 32.1.13.184), as the kernel does; a netmask does not."""
    assert match_nid(parse_nidlist("32.1.13.184@tcp"), NID.parse("2001:db8::1@tcp"))
    assert not match_nid(parse_nidlist("32.1.13.184/32@tcp"), NID.parse("2001:db8::1@tcp"))


def test_a_netmask_on_a_numeric_lnd_parses_and_never_matches() -> None:
    """gni has no ``nf_match_netmask``: ``match_nidmask`` returns 0."""
    nets = parse_nidlist("0.0.0.0/1@gni")
    assert not match_nid(nets, NID.parse("5@gni")) and print_nidlist(nets) == "0.0.0.0/1@gni"


@pytest.mark.parametrize(("text", "shown"), [
    (LIST, "2001:db8:7::/64@tcp 10.0.0.0/24@tcp 10.1.[0-1].[1-9/4]@tcp *@o2ib "
           "2001:db8::9@tcp1 [20-30/5]@gni 0@lo"),
    # one nidrange per net, in order of first appearance: masks, then address ranges
    ("10.0.0.1@tcp  2001:0db8::1@tcp 10.9.0.0/16@tcp 1.1.1.1@tcp2 10.0.0.2@tcp",
     "2001:db8::1@tcp 10.9.0.0/16@tcp 10.0.0.1@tcp 10.0.0.2@tcp 1.1.1.1@tcp2"),
    ("10.0.0.9/32@tcp0x10 2001:db8::1/128@tcp010", "10.0.0.9@tcp16 2001:db8::1@tcp8"),
    ("10.0.0.1@tcp *@tcp", "*@tcp"),
    ("10.0.0.[1,3-5]@tcp", "10.0.0.[1,3-5]@tcp"),
    ("10.0.0.1@tcp4294967295", "10.0.0.1@tcp4294967295"),  # kstrtouint's largest
])
def test_cfs_print_nidlist_groups_by_net(text: str, shown: str) -> None:
    """``cfs_print_nidlist``: per ``struct nidrange`` its ``print_nidmask`` forms (no /32,
    no /128) then its address ranges, or ``*@NET``; net numbers read by ``kstrtouint``."""
    assert print_nidlist(parse_nidlist(text)) == shown


@pytest.mark.parametrize(("text", "names"), [
    ("", "empty"), ("   ", "empty"),
    ("tcp", "'tcp' is not ADDRESS-RANGE@NET"),
    ("10.0.0.1@", "'10.0.0.1@' is not ADDRESS-RANGE@NET"),
    ("10.0.0.1@tcp@tcp", "is not ADDRESS-RANGE@NET"),
    ("10.0.0.1@foo", "unknown net type in 'foo'"),
    ("10.0.0.1@tcpx", "bad net number in 'tcpx'"),
    ("10.0.0.1@tcp4294967296", "bad net number"),
    ("10.0.0.1@tcp 10.0.0.0/33@tcp", "IPv4 prefix length '33' is not in 1-32"),
    ("2001:db8::/129@tcp", "IPv6 prefix length '129' is not in 1-128"),
    ("2001:db8:::1@tcp", "'2001:db8:::1' is not an IPv6 address"),
    ("10.0.[0-1].0/24@tcp", "an IPv4 netmask takes no '[...]' range"),
    ("2001:db8::[1-2]@tcp", "an IPv6 netmask takes no '[...]' range"),
    ("10.0.0@tcp", "invalid NID list '10.0.0@tcp': '10.0.0' needs four parts"),
    ("10.0.0.[1-3@tcp", "cannot parse '[1-3'"),
    ("[5-1]@gni", "bad range '5-1'"),
])
def test_bad_nidlists_are_one_einval_line_naming_the_part(text: str, names: str) -> None:
    with pytest.raises(LNetConfigError) as e:
        parse_nidlist(text)
    assert e.value.errno == -22 and "\n" not in e.value.descr
    assert names in e.value.descr and e.value.descr.startswith(f"invalid NID list '{text}'")


TOPO = """
name: nidmatch
networks:
  lan0: {lnet: tcp, subnet: 10.45.0.0/24}
nodes:
  a: {interfaces: [lan0]}
"""


def test_lnetctl_debug_nidlist_prints_and_matches_netmasks(tmp_path: Path) -> None:
    """``lnetctl debug nidlist LIST NID``: "nidlist parsed to:" with ``cfs_print_nidlist``'s
    form, then whether ``cfs_match_nid`` holds NID; an unparsable list: lnetctl's line, -22."""
    topo = tmp_path / "nidmatch.yaml"
    topo.write_text(TOPO)
    tb = SimTestbed.up(topo, seed=2)
    try:
        a = tb.node("a")
        for nid, verb in (("10.45.0.7@tcp", "matches"), ("2001:db8::7@tcp", "matches"),
                          ("10.46.0.7@tcp", "does not match"), ("2001:db9::7@tcp",
                                                                "does not match")):
            res = a.lnetctl("debug", "nidlist", "10.45.0.0/24@tcp 2001:db8::/32@tcp", nid)
            assert (res.rc, res.out) == (0, "nidlist parsed to: 10.45.0.0/24@tcp "
                                            "2001:db8::/32@tcp\n"
                                            f"{nid} {verb} nidlist 10.45.0.0/24@tcp "
                                            "2001:db8::/32@tcp\n"), nid
        res = a.lnetctl("debug", "nidlist", "10.45.0.0/33@tcp")
        assert res.rc != 0 and res.err == "Unable to parse nidlist from: 10.45.0.0/33@tcp\n"
        res = a.lnetctl("debug", "nidlist", "10.45.0.0/24@tcp", "2001:db8:::1@tcp")
        assert res.rc != 0 and res.err == "Invalid nid for matching 2001:db8:::1@tcp\n"
    finally:
        tb.down()
