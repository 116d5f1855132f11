"""UDSP netmasks never cross address families (issue 26): on r1 of
topologies/mixed-v4v6-routed.yaml (2001:db8:16::2@tcp6, a large NID, and 10.40.0.1@tcp, a
4-byte one) a rule's IPv6 netmask matches only the large NID and an IPv4 one only the 4-byte
NID, as nidstrings.c ``match_nidmask`` returns 0 for ``nid_is_nid4`` against an AF_INET6 mask
and the reverse. Seen in the NI's ``udsp info`` (``net show -v 4``); on c1 a ``--rte`` IPv6
netmask picks r1 as preferred gateway for s1 (``lnet_udsp_apply_rte_rule_on_lpni``). Both
backends; one module testbed.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import local_nis, ok

pytestmark = [pytest.mark.mininet, pytest.mark.topology("mixed-v4v6-routed"),
              pytest.mark.xdist_group("suite_ipv6_udsp_families")]

R1_V6, R1_V4, S1 = "2001:db8:16::2@tcp6", "10.40.0.1@tcp", "10.40.0.2@tcp"


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def _nid_prio(node: Any) -> dict[str, int]:
    return {nid: ni["udsp info"]["nid priority"] for nid, ni in local_nis(node, 4).items()}


#: (rule's --src, r1's NID priorities it leaves: -1 is untouched)
RULES = (
    ("2001:db8:16::/64@tcp6", {R1_V6: 3, R1_V4: -1}),
    ("::/1@tcp6", {R1_V6: 3, R1_V4: -1}),
    ("0.0.0.0/1@tcp6", {R1_V6: -1, R1_V4: -1}),      # IPv4 mask, the large NID's net
    ("32.1.13.184/32@tcp6", {R1_V6: -1, R1_V4: -1}),  # the large NID's first 32 bits
    ("10.40.0.0/24@tcp", {R1_V6: -1, R1_V4: 3}),
    ("::a28:1@tcp", {R1_V6: -1, R1_V4: -1}),          # 10.40.0.1's bits as an IPv6 address
    ("::ffff:10.40.0.1@tcp", {R1_V6: -1, R1_V4: -1}),
    ("::/1@tcp", {R1_V6: -1, R1_V4: -1}),
)


@pytest.mark.requirement("cfg-115")
@pytest.mark.parametrize(("mask", "prios"), RULES, ids=[m for m, _ in RULES])
def test_a_netmask_sets_only_the_nids_of_its_family(tb: Any, mask: str,
                                                    prios: dict[str, int]) -> None:
    """``udsp add --src MASK --priority 3`` on r1: the NIDs of the mask's family inside it
    get priority 3, none of the other family does; ``udsp show`` prints the rule back."""
    r1 = tb.node("r1")
    try:
        ok(r1, "lnetctl", f"udsp add --src {mask} --priority 3")
        assert _nid_prio(r1) == prios, mask
        (rule,) = yaml.safe_load(ok(r1, "lnetctl", "udsp show"))["udsp"]
        assert rule["src"].split("@")[1] == mask.split("@")[1]
    finally:
        ok(r1, "lnetctl", "udsp del --all")
    assert _nid_prio(r1) == {R1_V6: -1, R1_V4: -1}


@pytest.mark.requirement("cfg-115")
def test_rte_ipv6_netmask_picks_the_large_gateway(tb: Any) -> None:
    """On c1, ``--dst S1 --rte 2001:db8:16::/64@tcp6`` lists r1 (primary NID inside the
    prefix) as s1's preferred gateway; ``--rte 10.40.0.0/24@tcp6`` (IPv4 mask) lists none."""
    c1 = tb.node("c1")
    ok(c1, "lnetctl", f"peer add --prim_nid {S1} --non_mr")
    try:
        for rte, want in (("2001:db8:16::/64@tcp6", {"NID-0": R1_V6}),
                          ("10.40.0.0/24@tcp6", None)):
            ok(c1, "lnetctl", "udsp del --all")
            ok(c1, "lnetctl", f"udsp add --dst {S1} --rte {rte}")
            view = c1.yaml(f"peer show -v 4 --nid {S1}")["peer"][0]["peer ni"][0]
            assert view["udsp info"].get("Preferred gateway NIDs") == want, (rte, view)
    finally:
        ok(c1, "lnetctl", "udsp del --all")
        c1.lnetctl(f"peer del --prim_nid {S1}")


def test_debug_nidlist_matches_each_family_by_its_own_masks(tb: Any) -> None:
    """``lnetctl debug nidlist`` on r1 (``lustre_lnet_debug_nidlist``: ``cfs_parse_nidlist``,
    ``cfs_print_nidlist``, ``cfs_match_nid``): one list with an IPv6 and an IPv4 netmask on
    each net holds r1's large NID by the first and its 4-byte NID by the second only."""
    r1 = tb.node("r1")
    nidlist = "0.0.0.0/1@tcp6 2001:db8:16::/64@tcp6 ::/1@tcp 10.40.0.0/24@tcp"
    for nid, verb in ((R1_V6, "matches"), (R1_V4, "matches"), ("2001:db8:17::2@tcp6",
                                                               "does not match"),
                      ("10.40.1.1@tcp", "does not match")):
        out = ok(r1, "lnetctl", f"debug nidlist '{nidlist}' {nid}")
        assert out == f"nidlist parsed to: {nidlist}\n{nid} {verb} nidlist {nidlist}\n", nid
    for nid in (R1_V6, R1_V4):  # each only through the other family's mask: no match
        crossed = "0.0.0.0/1@tcp6 ::/1@tcp"
        out = ok(r1, "lnetctl", f"debug nidlist '{crossed}' {nid}")
        assert out.endswith(f"{nid} does not match nidlist {crossed}\n"), nid
    res = r1.lnetctl("debug nidlist 2001:db8:16::/129@tcp6")
    assert res.rc != 0 and res.err == "Unable to parse nidlist from: 2001:db8:16::/129@tcp6\n"
