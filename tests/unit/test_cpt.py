"""libcfs CPU partitions and the NID -> CPT hash (nodes/lnet/cpt.py; issue 26 item 10)."""

from __future__ import annotations

import pytest

from nodes.lnet import cpt
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID, Net
from testbed.plan import TopologyError, parse_topology

NET = """\
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
nodes:
  s: {interfaces: [lan0]}
"""


def test_lnet_nid_cpt_hash_sums_the_nid4_bytes() -> None:
    """api-ni.c ``lnet_nid4_cpt_hash``: the pair sums multiplied down are the sum of the
    NID's 8 bytes; 0x00020000 (tcp) adds 2, tcp1 3, o2ib (5) 5."""
    assert cpt.nid_cpt_hash(NID.parse("10.10.0.1@tcp"), 4) == (2 + 10 + 10 + 0 + 1) % 4
    assert cpt.nid_cpt_hash(NID.parse("10.10.0.1@tcp1"), 7) == (3 + 21) % 7
    assert cpt.nid_cpt_hash(NID.parse("192.168.1.255@o2ib"), 3) == (5 + 192 + 168 + 1 + 255) % 3
    assert cpt.nid_cpt_hash(NID.parse("10.10.0.1@tcp"), 1) == 0
    assert cpt.cpt_of_nid(NID.parse("10.10.0.1@tcp"), (5, 7)) == 7  # ni_cpts[hash % 2]


def test_tq_credits_split_and_floor() -> None:
    """``lnet_ni_tq_credits``: credits / ncpts, at least 8 x peer_credits, at most credits."""
    assert cpt.tq_credits(256, 8, 1) == 256
    assert cpt.tq_credits(256, 8, 2) == 128
    assert cpt.tq_credits(256, 8, 8) == 64  # 32 < 8 x 8
    assert cpt.tq_credits(32, 8, 2) == 32  # 64 capped at credits


def test_tables_from_npartitions_and_patterns() -> None:
    assert cpt.table(0, "").ncpts == 1
    t = cpt.table(0, "0[0-1] 1[2,3]")
    assert t.table_text() == "0\t: 0 1\n1\t: 2 3\n"
    assert t.distance_text() == "0\t: 0:10 1:10\n1\t: 0:10 1:10\n"  # one NUMA node
    n = cpt.table(3, "N 0[0] 1[1]")  # the pattern wins
    assert n.ncpts == 2 and n.distance(0, 1) == 20 and n.distance(1, 1) == 10
    for bad in ("0[0] 2[1]", "0[]", "x", "0[0-]", "0[0"):
        with pytest.raises(LNetConfigError) as e:
            cpt.table(0, bad)
        assert "libcfs.cpu_pattern" in e.value.descr and "\n" not in e.value.descr
    with pytest.raises(LNetConfigError):
        cpt.table(cpt.MAX_CPTS + 1, "")


def test_engine_splits_credits_and_refuses_changes_once_configured() -> None:
    eng = LNetEngine()
    eng.set_cpu_param("libcfs.cpu_npartitions", "4")
    eng.configure()
    ni = eng.net_add(Net.parse("tcp"), "eth0", NID.parse("10.10.0.1@tcp"))
    assert ni.cpts == (0, 1, 2, 3) and ni.tx_credits == 4 * 64
    assert {c: q.credits for c, q in ni.tx_queues.items()} == dict.fromkeys(range(4), 64)
    with pytest.raises(LNetConfigError) as e:
        eng.set_cpu_param("libcfs.cpu_npartitions", "2")
    assert e.value.errno == -16  # EBUSY: the module is in use
    with pytest.raises(LNetConfigError):
        eng.net_add(Net.parse("tcp1"), "eth0", NID.parse("10.10.0.1@tcp1"), cpts=(4,))


def test_topology_cpt_params_one_line_errors() -> None:
    plan = parse_topology("global: {libcfs.cpu_npartitions: 2}\n" + NET)
    assert dict(plan.node("s").module_params) == {"libcfs.cpu_npartitions": "2"}
    for bad, where in (("libcfs.cpu_npartitions: -1", "cpu_npartitions"),
                       ("libcfs.cpu_npartitions: two", "cpu_npartitions"),
                       ("libcfs.cpu_pattern: '0[0] 5[1]'", "cpu_pattern")):
        with pytest.raises(TopologyError) as e:
            parse_topology("global: {" + bad + "}\n" + NET)
        text = str(e.value)
        assert where in text and "\n" not in text.strip(), text
