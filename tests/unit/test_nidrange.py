"""NID-range descriptors of UDSP rules (spec §1.1 range syntax, §7.1; cfg-130..140)."""

from __future__ import annotations

import pytest

from nodes.lnet.errors import LNetConfigError
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
