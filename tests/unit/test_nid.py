"""NID and net syntax as real LNet parses and prints it (spec §1.1, nidstrings.c)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import LO_NID, NID, SOCKLND, Net, parse_net, parse_nid


@pytest.mark.parametrize(("text", "printed", "nid4"), [
    ("10.0.0.1@tcp", "10.0.0.1@tcp", 0x0002_0000_0A00_0001),
    ("10.0.0.1@tcp0", "10.0.0.1@tcp", 0x0002_0000_0A00_0001),
    ("1.2.3.4@tcp1", "1.2.3.4@tcp1", 0x0002_0001_0102_0304),
    ("192.168.1.10@o2ib", "192.168.1.10@o2ib", 0x0005_0000_C0A8_010A),
    ("192.168.1.10@o2ib3", "192.168.1.10@o2ib3", 0x0005_0003_C0A8_010A),
    ("0@lo", "0@lo", 0x0009_0000_0000_0000),
    ("5@gni3", "5@gni3", 0x000D_0003_0000_0005),
    ("10.0.0.1", "10.0.0.1@tcp", 0x0002_0000_0A00_0001),  # no @ means @tcp
])
def test_parse_print(text: str, printed: str, nid4: int) -> None:
    nid = NID.parse(text)
    assert str(nid) == printed
    assert nid.nid4 == nid4
    assert NID.from_nid4(nid4) == nid


@pytest.mark.parametrize("bad", ["1.2.3@tcp", "1.2.3.4@foo", "0@lo1", "x@gni", "1.2.3.256@tcp",
                                 "1.2.3.4@tcp65536", "a.b.c.d@tcp", "@tcp", "1.2.3.4@"])
def test_rejects(bad: str) -> None:
    assert parse_nid(bad) is None
    with pytest.raises(LNetConfigError) as e:
        NID.parse(bad)
    assert e.value.errno == -22 and bad in e.value.descr


def test_net_names() -> None:
    assert Net.parse("tcp") == Net(SOCKLND, 0) == Net.parse("tcp0")
    assert str(Net.parse("tcp7")) == "tcp7"
    assert parse_net("lo1") is None and parse_net("ib0") is None
    assert str(LO_NID) == "0@lo"


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF_FFFF), st.sampled_from([2, 5]))
def test_round_trip_ip_nets(num: int, addr: int, lnd: int) -> None:
    nid = NID(Net(lnd, num), addr)
    assert NID.parse(str(nid)) == nid
    assert NID.from_nid4(nid.nid4) == nid
