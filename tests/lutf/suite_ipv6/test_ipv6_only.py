"""Large (IPv6) NIDs on an IPv6-only testbed (issue 26 item 8; sanity-lnet's
FORCE_LARGE_NID mode: ``lnetctl lnet configure --all --large`` on an IPv6-only host).

topologies/ipv6.yaml: c1 and s1, two IPv6-only rails on net ``tcp`` (2001:db8:6::/64,
2001:db8:7::/64), no static peers, so a peer holding both of s1's NIDs can only come from
discovery reading the ping buffer's large-address entries (api-ni.c
``lnet_ping_target_install_locked``: LNET_PING_FEAT_LARGE_ADDR, PRIMARY_LARGE). On Mininet the
socklnd binds and connects AF_INET6 and speaks KSOCK_PROTO_V4 (``ksocknal_create_conn``
picks V4 for an AF_INET6 peer address). Both backends; one module testbed.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import advance_until, local_nis, ok, peer_nis

pytestmark = [pytest.mark.mininet, pytest.mark.topology("ipv6"),
              pytest.mark.xdist_group("suite_ipv6")]

C1 = ("2001:db8:6::1@tcp", "2001:db8:7::1@tcp")
S1 = ("2001:db8:6::2@tcp", "2001:db8:7::2@tcp")


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def test_net_show_and_list_nids_print_large_nids(tb: Any) -> None:
    """``net add --if ethN`` on an IPv6-only interface with LNet ``--large``: the NI is the
    interface's IPv6 address (socklnd.c ``ksocknal_startup``), printed as the kernel prints
    it, unquoted in lnetctl's YAML."""
    c1 = tb.node("c1")
    assert list(local_nis(c1)) == list(C1)
    assert "nid: 2001:db8:6::1@tcp\n" in ok(c1, "lnetctl", "net show")
    assert ok(c1, "lctl", "list_nids").split() == list(C1)


def test_ping_and_discover_list_every_large_nid(tb: Any) -> None:
    """A ping's reply buffer carries s1's NIDs as large entries; ``lnetctl ping`` and
    ``discover`` list both, Multi-Rail; ``lctl ping`` prints ``12345-NID`` per entry."""
    c1 = tb.node("c1")
    for verb in ("ping", "discover"):
        view = c1.yaml(f"{verb} {S1[0]}")[verb][0]
        assert view["primary nid"] == S1[0] and view["Multi-Rail"] is True
        assert [p["nid"] for p in view["peer_ni"]] == list(S1)
    assert ok(c1, "lctl", f"ping {S1[1]}").split() == ["12345-0@lo", *(f"12345-{n}" for n in S1)]


def test_traffic_spreads_over_both_ipv6_rails(tb: Any) -> None:
    """PUTs to s1's primary NID use both rails once discovery has merged s1's second large
    NID (Multi-Rail selection over large NIDs, spec §2)."""
    c1 = tb.node("c1")
    res = c1.put(S1[0], count=32, size=4096)
    assert res["completed"] == 32, res
    sent = {nid: int(p["statistics"]["send_count"]) for nid, p in peer_nis(c1, S1[0]).items()}
    assert set(sent) == set(S1) and all(n > 0 for n in sent.values()), sent


def test_peer_show_of_passive_side(tb: Any) -> None:
    """s1 learns both of c1's large NIDs from c1's push (discovery's PUT of its buffer)."""
    tb.node("c1").put(S1[1], count=1)
    view = tb.node("s1").yaml(f"peer show --nid {C1[0]}")["peer"][0]
    assert view["primary nid"] == C1[0]
    assert [p["nid"] for p in view["peer ni"]] == list(C1)


def test_malformed_ipv6_nid_one_clear_line(tb: Any) -> None:
    """A malformed IPv6 NID: lnetctl's own words (liblnetconfig.c
    ``lustre_lnet_parse_nid_range``: "invalid NID in nidstr", errno -22), lctl's naming the
    NID (``libcfs_strnid`` failing in jt_ptl_ping); the node stays up."""
    c1 = tb.node("c1")
    res = c1.lnetctl("ping 2001:db8:6:::2@tcp")
    assert res.rc != 0 and "errno: -22" in res.err
    assert 'descr: "Unable to parse nidlist: invalid NID in nidstr"' in res.err
    res = c1.lctl("ping [2001:db8:6::2]@tcp")
    assert res.rc != 0 and "[2001:db8:6::2]@tcp" in res.err, res
    assert len(res.err.strip().splitlines()) == 1
    assert ok(c1, "lctl", "list_nids").split() == list(C1)


def test_lst_refuses_large_nids_as_real_lst(tb: Any) -> None:
    """lst.c ``lst_parse_nids`` reads NIDs with ``libcfs_str2nid``, the nid4 parser: an IPv6
    NID is LNET_NID_ANY there, so ``add_group`` adds the group, prints "Invalid nid" and
    "Ignore invalid id list", then, no node added, deletes the group (jt_lst_add_group)."""
    def lst(*argv: str) -> Any:
        return tb.node("c1").exec(["env", "LST_SESSION=4242", "lst", *argv])

    assert lst("new_session", "v6").rc == 0
    try:
        res = lst("add_group", "g", S1[0])
        assert res.err == (f"Invalid nid: {S1[0]}\nIgnore invalid id list {S1[0]}\n"
                           "No nodes added successfully, deleting group g\n"), res
        assert res.out == "Group is deleted\n"
    finally:
        lst("end_session")


def test_partition_cuts_ipv6_traffic(tb: Any) -> None:
    """A partition between c1 and s1 on an IPv6-only testbed: on Mininet its DROP rules are
    ip6tables rules on s1's IPv6 addresses (iptables would let every packet through); the
    simulator drops by NID. A ping across fails meanwhile and works once it is deleted."""
    c1 = tb.node("c1")
    f = tb.fault.partition(a=["c1"], b=["s1"])
    try:
        res = c1.lctl(f"ping {S1[0]} 2")
        assert res.rc != 0 and "failed to ping" in res.out, res
    finally:
        tb.fault.delete(f["id"])
    advance_until(tb, lambda: c1.lctl(f"ping {S1[0]}").rc == 0, 30, "ping after the partition")
