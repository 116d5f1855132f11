"""DLC show verbs and their YAML (spec §9), on one module-scoped default topology.

These tests only read state, so they share one testbed (one bring-up for the module).
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, lnet_error, local_nis, peer_nis, stats

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]


@pytest.fixture(scope="module")
def c1(module_topology: Any) -> Any:
    return module_topology.node("c1")


@pytest.mark.requirement("cfg-010", "cfg-015", "cfg-040", "cfg-045", "cfg-055")
def test_net_show_groups_nis_under_their_net(c1: Any) -> None:
    """Real lnetctl `net show` lists each net once (`net type`) with its NIs under
    `local NI(s)`, each NI with its NID and exactly one interface (spec §9.2,
    cfg-055 hierarchy, cfg-040 one device per NI)."""
    view = c1.yaml("net show")
    nets = [n["net type"] for n in view["net"]]
    assert nets == ["lo", "tcp"]  # each net once, lo first as in the kernel's net list
    tcp = view["net"][1]["local NI(s)"]
    assert [ni["nid"] for ni in tcp] == list(C1_NIDS)
    assert [ni["interfaces"] for ni in tcp] == [{0: "eth0"}, {0: "eth1"}]
    assert all(ni["status"] == "up" for ni in tcp)


@pytest.mark.requirement("dbg-035", "dbg-095", "dbg-010", "dbg-015", "dbg-020",
                         "hlth-cfg-yaml")
def test_verbosity_levels_add_blocks(c1: Any) -> None:
    """`-v` adds blocks as real lnetctl does: none at 0, statistics and tunables at 1,
    per-message-type stats and `health stats` at 2-3, `udsp info` from 4 up, and nothing
    more above that (spec §9.2, §7.4)."""
    plain, v1, v3, v9 = (local_nis(c1, v) if v else {
        ni["nid"]: ni for net in c1.yaml("net show")["net"] for ni in net["local NI(s)"]}
        for v in (0, 1, 3, 9))
    ni0, ni1, ni3 = plain[C1_NIDS[0]], v1[C1_NIDS[0]], v3[C1_NIDS[0]]
    assert "statistics" not in ni0 and "tunables" not in ni0
    assert {"statistics", "tunables", "CPT"} <= ni1.keys() and "health stats" not in ni1
    assert {"sent_stats", "received_stats", "dropped_stats", "health stats"} <= ni3.keys()
    # dbg-035: tx/rx/timeout counters, credits, state and CPTs per NI
    assert {"send_count", "recv_count", "drop_count"} <= ni3["statistics"].keys()
    assert {"peer_credits", "credits"} <= ni3["tunables"].keys()
    assert ni3["health stats"]["health value"] == 1000 and "timeouts" in ni3["health stats"]
    assert v9.keys() == v3.keys()
    assert v9[C1_NIDS[0]].keys() == ni3.keys() | {"udsp info"}
    assert "udsp info" not in ni3


@pytest.mark.requirement("cfg-035")
def test_ni_on_all_cpts_by_default(c1: Any) -> None:
    """With no CPT given in `net add`, LNet binds the NI to all CPTs (cfg-035); an emulated
    node has one CPT, so every NI shows `CPT: "[0]"` and `dev cpt: -1`."""
    for nid, ni in local_nis(c1, 1).items():
        assert ni["CPT"] == "[0]", nid
        assert ni["dev cpt"] == -1, nid


@pytest.mark.requirement("dbg-040")
def test_net_show_one_net(c1: Any) -> None:
    """`net show --net tcp` returns that net alone; an unknown net is -ENOENT (spec §9.2)."""
    view = c1.yaml("net show --net tcp")
    assert [n["net type"] for n in view["net"]] == ["tcp"]
    res = c1.lnetctl("net show --net tcp9")
    assert res.rc != 0 and res.out == ""
    assert lnet_error(res)["errno"] == -2


@pytest.mark.requirement("dbg-060", "dbg-065", "dbg-100", "cfg-070")
def test_peer_show_per_peer_ni_credits_and_stats(c1: Any) -> None:
    """`peer show -v 3` shows, per peer NI, tx credits (max/available/min), queued bytes and
    tx/rx counters (dbg-060); `--nid` queries one peer (dbg-065)."""
    pnis = peer_nis(c1)
    assert set(pnis) == set(S1_NIDS)
    for nid, pni in pnis.items():
        assert {"max_ni_tx_credits", "available_tx_credits", "min_tx_credits",
                "tx_q_num_of_buf"} <= pni.keys(), nid
        assert pni["available_tx_credits"] <= pni["max_ni_tx_credits"] == 8
        assert {"send_count", "recv_count"} <= pni["statistics"].keys()
    one = c1.yaml(f"peer show --nid {S1_NIDS[1]}")
    assert [p["primary nid"] for p in one["peer"]] == [S1_NIDS[0]]  # found by a secondary NID
    assert one["peer"][0]["Multi-Rail"] is True


@pytest.mark.requirement("dbg-045", "dbg-005", "dbg-025")
def test_stats_show_has_lnet_and_health_counters(c1: Any) -> None:
    """`stats show` reports the LNet counters (msgs, send/recv/drop counts and lengths) and
    the health counters of spec §9.4 (resend_count, *_timeout_count, ...)."""
    st = stats(c1)
    for key in ("msgs_alloc", "send_count", "recv_count", "drop_count", "resend_count",
                "response_timeout_count", "local_timeout_count", "network_timeout_count",
                "remote_timeout_count", "drop_length"):
        assert isinstance(st[key], int), key


@pytest.mark.requirement("hlth-cfg-dlc", "hlth-cfg-yaml", "cfg-045")
def test_global_show_reflects_topology_tunables(c1: Any) -> None:
    """`global show` lists the tunables with the values the topology set through
    `lnetctl set` (default topology: retry_count 2, transaction_timeout 10, sensitivity 100)."""
    g = c1.yaml("global show")["global"]
    assert (g["retry_count"], g["transaction_timeout"], g["health_sensitivity"]) == (2, 10, 100)
    assert g["lnd_timeout"] == max((10 - 1) // (2 + 1), 1)  # lnet_set_lnd_timeout, spec §0


@pytest.mark.requirement("cfg-060")
def test_lctl_list_nids_matches_net_show(c1: Any) -> None:
    res = c1.lctl("list_nids")
    assert res.rc == 0 and res.out.split() == list(C1_NIDS)
