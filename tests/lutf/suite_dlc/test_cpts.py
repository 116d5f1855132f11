"""CPU partitions (issue 26 item 10): libcfs's ``cpu_npartitions``/``cpu_pattern`` per node,
an NI's TX credits split per CPT, and ``lnetctl cpt-of-nid`` naming the CPT the send path
takes credits from, on Mininet and the simulator (nodes/lnet/cpt.py).

Real behaviour followed: api-ni.c ``lnet_ni_tq_credits`` (credits / ncpts, at least 8 x
peer_credits), ``lnet_nid_cpt_hash`` (a 4-byte NID: its 8 bytes summed modulo the count),
``lnet_cpt_of_nid_locked``; lib-move.c ``lnet_post_send_locked`` (the NI credit of the peer
NI's CPT queue); lnet_debugfs.c ``proc_lnet_nis`` (a line per NI and CPT); lib-cpt.c
``cfs_cpt_table_print``/``cfs_cpt_distance_print``; the netlink net show's ``CPT: "[0,1]"``."""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import ok

pytestmark = [pytest.mark.mininet, pytest.mark.topology("cpts.yaml")]

C1, S1 = "10.81.0.1@tcp", "10.81.0.2@tcp"


def _nis(node: Any) -> dict[str, list[tuple[int, int, int]]]:
    """``lctl get_param -n nis``: NID -> (max, tx, min) per CPT line, in order."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for line in ok(node, "lctl", "get_param -n nis").splitlines()[1:]:
        f = line.split()
        out.setdefault(f[0], []).append((int(f[6]), int(f[7]), int(f[8])))
    return out


def test_cpts_per_node_credits_per_cpt_and_cpt_of_nid(topology: Any) -> None:
    c1, s1 = topology.node("c1"), topology.node("s1")
    assert ok(c1, "lctl", "get_param -n cpu_partition_table") == "0\t: 0\n1\t: 1\n"
    dist = "get_param -n cpu_partition_distance"  # one NUMA node; two (SLIT 10/20)
    assert ok(c1, "lctl", dist) == "0\t: 0:10 1:10\n1\t: 0:10 1:10\n"
    assert ok(s1, "lctl", dist) == "0\t: 0:10 1:20\n1\t: 0:20 1:10\n"
    shown = ok(c1, "lnetctl", "net show -v --net tcp")
    assert 'CPT: "[0,1]"' in shown and "credits: 256" in shown, shown
    # lnet_ni_tq_credits: 256 / 2 = 128 per CPT (>= 8 x 8); 0@lo's queues have none
    assert _nis(c1) == {"0@lo": [(0, 0, 0)] * 2, C1: [(128, 128, 128)] * 2}
    # lnet_nid_cpt_hash: bytes of tcp (0x00020000) and of the address, summed, mod 2
    cpt = c1.yaml(f"cpt-of-nid {C1} {S1} 10.81.0.3@tcp 10.81.1.2@tcp")["cpt-of-nid"]
    assert [e["cpt"] for e in cpt] == [0, 1, 0, 0]
    res = c1.put(S1, count=200, size=0)
    assert res["completed"] == 200, res
    (c0, c1q) = _nis(c1)[C1]  # every send to s1 took CPT 1's credits, none CPT 0's
    assert c0 == (128, 128, 128) and c1q[:2] == (128, 128) and c1q[2] < 128, _nis(c1)
    (s0, s1q) = _nis(s1)[S1]  # s1's ACKs to c1 (CPT 0 of its own two)
    assert s0[2] < 128 and s1q == (128, 128, 128), _nis(s1)
    # ksocknal_create_conn: the connection's scheduler is on the peer NID's CPT
    conns = ok(c1, "lctl", "--net tcp conn_list").splitlines()
    assert len(conns) == 3 and all(f" {t}[1]10.81.0.1->" in line
                                   for t, line in zip("OIC", conns, strict=True)), conns


def test_net_add_cpt_restricts_an_ni(topology: Any) -> None:
    """``net add --cpt``: the NI's CPTs; one CPT holds all of ``credits``; a CPT the node
    does not have is refused (``lnet_ni_alloc_w_cpt_array``)."""
    c1 = topology.node("c1")
    ok(c1, "lnetctl", "net add --net tcp1 --if eth0 --cpt [1]")
    shown = c1.yaml("net show -v --net tcp1")["net"][0]["local NI(s)"][0]
    assert shown["CPT"] == "[1]"
    assert _nis(c1)["10.81.0.1@tcp1"] == [(256, 256, 256)]
    assert c1.yaml("cpt-of-nid 10.81.0.2@tcp1")["cpt-of-nid"][0]["cpt"] == 1
    bad = c1.lnetctl("net add --net tcp2 --if eth0 --cpt [3]")
    assert bad.rc != 0 and "Traceback" not in bad.err, bad
