"""Large (IPv6) NIDs: ``struct lnet_nid`` with a 16-byte address (issue 26 item 8).

Parsing follows nidstrings.c ``libcfs_strnid`` -> ``libcfs_ip_str2addr_size`` (glibc
``inet_pton``: the oracle below is the C library's own, through ``socket.inet_pton``);
printing follows ``libcfs_nidstr_r`` -> ``libcfs_ip_addr2str_size`` -> rpc_ntop, the kernel's
``%pI6c`` (``ip6_compressed_string``). NID lists follow liblnetconfig.c
``unroll_nid_range_scan``: bracket numbers of an IPv6 NID are hex, printed back decimal.
"""

import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.dlc.nidlist import NidListError, expand_nids
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.inet6 import ntop6, pton6
from nodes.lnet.nid import NID, NID_SIZE_IPV6, SOCKLND, Net, nid_from_ip, parse_nid

TCP = Net(SOCKLND, 0)


@pytest.mark.parametrize(("text", "printed", "nid4"), [
    ("2001:db8::1@tcp", "2001:db8::1@tcp", 0x0002_0000_2001_0DB8),
    ("2001:0DB8:0000:0000:0000:0000:0000:0001@tcp1", "2001:db8::1@tcp1", 0x0002_0001_2001_0DB8),
    ("2001:db8::1", "2001:db8::1@tcp", 0x0002_0000_2001_0DB8),  # no @ means @tcp
    ("fd00:10::a@o2ib2", "fd00:10::a@o2ib2", 0x0005_0002_FD00_0010),
    ("1:0:0:1:0:0:0:1@tcp", "1:0:0:1::1@tcp", 0x0002_0000_0001_0000),  # longest run
    ("1:0:0:1:0:0:1:1@tcp", "1::1:0:0:1:1@tcp", 0x0002_0000_0001_0000),  # first on a tie
    ("1:2:3:4:5:6:0:8@tcp", "1:2:3:4:5:6:0:8@tcp", 0x0002_0000_0001_0002),  # one 0 stays
    ("::ffff:10.1.2.3@tcp", "::ffff:10.1.2.3@tcp", 0x0002_0000_0000_0000),  # v4-mapped
    ("::10.1.2.3@tcp", "::a01:203@tcp", 0x0002_0000_0000_0000),  # %pI6c: hex, glibc dotted
    ("fe80::5efe:10.1.2.3@tcp", "fe80::5efe:10.1.2.3@tcp", 0x0002_0000_FE80_0000),  # ISATAP
    ("::@tcp", "::@tcp", 0x0002_0000_0000_0000),
])
def test_large_nid_parse_print(text: str, printed: str, nid4: int) -> None:
    nid = NID.parse(text)
    assert nid.is_large and nid.size == NID_SIZE_IPV6
    assert str(nid) == printed
    assert nid.nid4 == nid4  # lnet_nid_to_nid4: net and nid_addr[0]
    assert NID.parse(printed) == nid


@pytest.mark.parametrize(("bad", "why"), [
    ("2001:db8:::1@tcp", "is not an IPv6 address"),
    ("2001:db8::1::2@tcp", "is not an IPv6 address"),
    ("12345::1@tcp", "is not an IPv6 address"),
    ("1:2:3:4:5:6:7:8:9@tcp", "is not an IPv6 address"),
    ("1:2:3:4:5:6:7:8::@tcp", "is not an IPv6 address"),  # '::' standing for no group
    (":1::2@tcp", "is not an IPv6 address"),
    ("::01.2.3.4@tcp", "is not an IPv6 address"),  # inet_pton4 refuses a leading zero
    ("[2001:db8::1]@tcp", "without []"),
    ("fe80::1%eth0@tcp", "%scope"),
    ("2001:db8::1@gni", "net gni takes no IPv6 address"),
    ("2001:db8::1@lo1", "unknown net"),
    ("2001:db8::1@bogus", "unknown net 'bogus'"),
])
def test_malformed_ipv6_nid_one_clear_line(bad: str, why: str) -> None:
    assert parse_nid(bad) is None
    with pytest.raises(LNetConfigError) as e:
        NID.parse(bad)
    assert e.value.errno == -22 and bad in e.value.descr and why in e.value.descr
    assert "\n" not in e.value.descr


def test_large_and_nid4_with_same_low_bits_differ() -> None:
    """``nid_same`` compares nid_size too: ``::a00:1@tcp`` is not ``10.0.0.1@tcp``."""
    small, large = NID(TCP, 0x0A00_0001), NID(TCP, 0x0A00_0001, NID_SIZE_IPV6)
    assert small != large and len({small, large}) == 2
    assert sorted([large, small]) == [small, large]
    assert str(large) == "::a00:1@tcp"


def test_nid4_hash_unchanged() -> None:
    """Sets of nid4s iterate as before large NIDs existed (the simulator's event hashes)."""
    nid = NID(TCP, 0x0A00_0001)
    assert hash(nid) == hash(((SOCKLND, 0), 0x0A00_0001))


def test_nid_from_ipv6_interface_address() -> None:
    """socklnd.c ``ksocknal_startup``: an IPv6 interface address gives a large NID."""
    assert nid_from_ip("2001:db8:1::5", TCP) == NID.parse("2001:db8:1::5@tcp")
    with pytest.raises(LNetConfigError, match="bad IP address"):
        nid_from_ip("2001:db8:1:::5", TCP)


@given(st.integers(0, 2**128 - 1))
def test_ntop_pton_round_trip(value: int) -> None:
    assert pton6(ntop6(value)) == value


@given(st.integers(0, 2**128 - 1), st.integers(0, 0xFFFF))
def test_large_nid_round_trip(value: int, num: int) -> None:
    nid = NID(Net(SOCKLND, num), value, NID_SIZE_IPV6)
    assert NID.parse(str(nid)) == nid


def _glibc_prints_alike(value: int) -> bool:
    """glibc ``inet_ntop`` and the kernel's ``%pI6c`` differ only on a dotted IPv4 tail:
    glibc for ``::a.b.c.d`` (IPv4-compatible), the kernel for ISATAP."""
    words = [(value >> (16 * (7 - i))) & 0xFFFF for i in range(8)]
    return words[:6] != [0] * 6 and words[5] != 0x5EFE


@given(st.integers(0, 2**128 - 1).filter(_glibc_prints_alike)
       | st.sampled_from([0, 1, 0xFFFF_0A00_0001, 2**112, 2**128 - 1]).filter(_glibc_prints_alike))
def test_ntop_matches_glibc(value: int) -> None:
    assert ntop6(value) == socket.inet_ntop(socket.AF_INET6, value.to_bytes(16, "big"))


_PIECES = st.sampled_from(["", ":", "::", "0", "1", "db8", "ffff", "FFFF", "12345", "g", "1.2.3.4",
                           "01.2.3.4", "256.1.1.1", ".", "%", "[", "]", " "])


@settings(max_examples=1000)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_pton_accepts_what_glibc_accepts(text: str) -> None:
    try:
        want: int | None = int.from_bytes(socket.inet_pton(socket.AF_INET6, text), "big")
    except OSError:
        want = None
    assert pton6(text) == want


def test_ipv6_nid_range_hex_in_decimal_out() -> None:
    """liblnetconfig.c ``unroll_nid_range_scan``: with a ':' in the NID the bracket numbers
    are read base 16 and printed with ``%u``; ``2001:db8::[a-b]`` is ::10 and ::11."""
    assert list(map(str, expand_nids("2001:db8::[1-3]@tcp"))) == [
        "2001:db8::1@tcp", "2001:db8::2@tcp", "2001:db8::3@tcp"]
    assert list(map(str, expand_nids("2001:db8::[a-b]@tcp1,10.0.0.[1-2]@tcp"))) == [
        "2001:db8::10@tcp1", "2001:db8::11@tcp1", "10.0.0.1@tcp", "10.0.0.2@tcp"]
    assert list(map(str, expand_nids("2001:db8::[0-4/2]@tcp"))) == [
        "2001:db8::@tcp", "2001:db8::2@tcp", "2001:db8::4@tcp"]


@pytest.mark.parametrize(("bad", "why"), [
    ("2001:db8::[3-1]@tcp", "range is wrong order"),
    ("2001:db8::[x]@tcp", "invalid character in range"),
    ("2001:db8:::[1-2]@tcp", "invalid NID in nidstr"),
    ("2001:db8::[1-2]@gni", "invalid NID in nidstr"),
    ("2001:db8::*@tcp", "asterisk not allowed"),
])
def test_malformed_ipv6_nid_range(bad: str, why: str) -> None:
    with pytest.raises(NidListError) as e:
        expand_nids(bad)
    assert why in e.value.descr and "\n" not in e.value.descr


def test_lst_parse_nids_refuses_large_nids() -> None:
    """lst.c ``lst_parse_nids`` -> ``libcfs_str2nid`` (nid4 only): "Invalid nid"."""
    from nodes.selftest.nidlist import parse_nids

    assert parse_nids("2001:db8::1@tcp") == (None, "Invalid nid: 2001:db8::1@tcp")
    nids, err = parse_nids("10.0.0.[1-2]@tcp")
    assert err is None and nids is not None and len(nids) == 2
