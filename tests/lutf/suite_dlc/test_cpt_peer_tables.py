"""Per-CPT peer tables (issue 26 item 10): what of them a user sees, on Mininet and the
simulator (cpts.yaml: c1 has two CPTs, libcfs ``cpu_npartitions=2``).

Real behaviour followed: api-ni.c ``lnet_peer_ni_show_start`` lists peers table by table
(``cfs_percpt_for_each`` over ``ln_peer_tables``), a peer in the table of its first NID's CPT
(peer.c ``lnet_peer_alloc``: ``lp_cpt``), appended at that table's tail
(``lnet_peer_attach_peer_ni``); ``lnet_nid_cpt_hash`` of a large NID chains ``hash_32`` over
its address words (``lnetctl cpt-of-nid`` asks it through netlink)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.mininet, pytest.mark.topology("cpts.yaml")]

# lnet_nid4_cpt_hash on c1's 2 CPTs: 2 (tcp) + 10 + 81 + 0 + x, mod 2
ADDED = ("10.81.0.4@tcp", "10.81.0.3@tcp", "10.81.0.9@tcp")  # CPTs 1, 0, 0


def test_peer_show_lists_cpt_0s_table_then_cpt_1s(topology: Any) -> None:
    """Peers added .4, .3, .9: ``peer show`` on c1 lists .3 and .9 (CPT 0, in the order
    added) before .4 (CPT 1); on s1 (two CPTs as well, the same hash) the same order, and
    ``cpt-of-nid`` names the tables."""
    for name in ("c1", "s1"):
        node = topology.node(name)
        for nid in ADDED:
            res = node.lnetctl(f"peer add --prim_nid {nid}")
            assert res.rc == 0, res
        cpts = node.yaml("cpt-of-nid " + " ".join(ADDED))["cpt-of-nid"]
        assert [e["cpt"] for e in cpts] == [1, 0, 0]
        shown = [p["primary nid"] for p in node.yaml("peer show")["peer"]]
        assert [n for n in shown if n in ADDED] == ["10.81.0.3@tcp", "10.81.0.9@tcp",
                                                    "10.81.0.4@tcp"], shown


def test_cpt_of_large_nids_is_the_kernels_hash(topology: Any) -> None:
    """``lnetctl cpt-of-nid`` of large NIDs on c1's two CPTs: ``hash_32`` chained over the
    address words then the net, its top bit (2001:db8:6::1 -> 1, ::2 -> 0, 2001:db8:7::2 ->
    1); the nid4 byte sum would put both 2001:db8:6:: NIDs on CPT 0."""
    nids = ["2001:db8:6::1@tcp", "2001:db8:6::2@tcp", "2001:db8:7::2@tcp"]
    cpts = topology.node("c1").yaml("cpt-of-nid " + " ".join(nids))["cpt-of-nid"]
    assert [(e["nid"], e["cpt"]) for e in cpts] == list(zip(nids, [1, 0, 1], strict=True))
