"""Peer discovery on the real thing: node daemons, socklnd, Mininet (seed 000 dyn-020..045,
bck-025; spec §5).

topologies/discovery.yaml: c1 and s1 with two rails on net ``tcp`` and no static peers.
topologies/compat.yaml: c1, s1 Multi-Rail; s2 non-Multi-Rail; nets ``tcp`` and ``tcp1``.
"""

from __future__ import annotations

from typing import Any

import pytest
from itkit import TOPOLOGIES, pytestmark  # noqa: F401  (the marks)

from testbed.mininet import MininetNode
from testbed.pytest.plugin import wait_for

C1 = ["10.10.0.1@tcp", "10.11.0.1@tcp"]
S1 = ["10.10.0.2@tcp", "10.11.0.2@tcp"]


def peers(node: MininetNode) -> dict[str, dict[str, Any]]:
    """primary nid -> ``peer show -v 3`` entry (empty when there is no peer)."""
    res = node.lnetctl("peer", "show", "-v", "3")
    assert res.rc == 0, res.err
    if not res.out.strip():
        return {}
    import yaml

    return {p["primary nid"]: p for p in yaml.safe_load(res.out)["peer"]}


def nids_of(entry: dict[str, Any]) -> list[str]:
    return [lpni["nid"] for lpni in entry["peer ni"]]


@pytest.mark.requirement("dyn-020", "dyn-025", "dyn-035", "dyn-040", "cfg-085")
def test_discovery_fills_peer_show_after_one_ping(testbed_factory: Any) -> None:
    """dyn-020/025/035/040: without static peers, one ping to s1's primary NID makes c1's
    peer show list both of s1's NIDs, MR, state 273; s1 learnt c1's NIDs from the push."""
    tb = testbed_factory(TOPOLOGIES / "discovery.yaml")
    c1, s1 = tb.node("c1"), tb.node("s1")
    assert peers(c1) == {}
    res = c1.put(S1[0], count=5, size=4096)
    assert res["completed"] == 5 and res["failed"] == 0, res
    view = peers(c1)
    assert nids_of(view[S1[0]]) == S1
    assert view[S1[0]]["Multi-Rail"] is True and view[S1[0]]["peer state"] == 273
    back = wait_for(lambda: peers(s1).get(C1[0]), timeout=10)
    assert nids_of(back) == C1 and back["Multi-Rail"] is True
    # lnetctl discover (blocking) gives the same list (spec §9.3)
    out = c1.lnetctl_yaml("discover", S1[1])
    assert out["discover"][0]["primary nid"] == S1[0]
    assert [x["nid"] for x in out["discover"][0]["peer_ni"]] == S1


@pytest.mark.requirement("dyn-045", "dyn-015")
def test_ni_add_on_s1_is_pushed_to_c1(testbed_factory: Any) -> None:
    """dyn-045, spec §5.1: s1 removes then re-adds its eth1 NI; each change rebuilds its
    ping buffer and pushes it to c1, whose peer show follows without any traffic of c1."""
    tb = testbed_factory(TOPOLOGIES / "discovery.yaml")
    c1, s1 = tb.node("c1"), tb.node("s1")
    res = c1.put(S1[0], count=1)
    assert res["completed"] == 1, res
    assert nids_of(peers(c1)[S1[0]]) == S1
    assert s1.lnetctl("net", "del", "--net", "tcp", "--if", "eth1").rc == 0
    wait_for(lambda: nids_of(peers(c1)[S1[0]]) == S1[:1], timeout=15)
    assert s1.lnetctl("net", "add", "--net", "tcp", "--if", "eth1").rc == 0
    wait_for(lambda: nids_of(peers(c1)[S1[0]]) == S1, timeout=15)


@pytest.mark.requirement("bck-025", "dyn-010")
def test_non_mr_peer_used_only_on_its_nid(testbed_factory: Any) -> None:
    """bck-025, dyn-010: c1 (MR) talks to s2 (non-MR) only on the NID it addresses; s2's
    ping reply has no MULTI_RAIL bit, so c1 keeps s2 as a one-NID non-MR peer."""
    tb = testbed_factory(TOPOLOGIES / "compat.yaml")
    c1, s2 = tb.node("c1"), tb.node("s2")
    s2_tcp, s2_tcp1 = "10.10.0.3@tcp", "10.11.0.3@tcp1"
    ping = c1.lnetctl_yaml("ping", s2_tcp)["ping"][0]
    assert ping["Multi-Rail"] is False
    assert [x["nid"] for x in ping["peer_ni"]] == [s2_tcp, s2_tcp1]
    res = c1.put(s2_tcp, count=20, size=1024)
    assert res["completed"] == 20, res
    view = peers(c1)[s2_tcp]
    assert view["Multi-Rail"] is False and nids_of(view) == [s2_tcp]
    assert view["peer ni"][0]["statistics"]["send_count"] >= 20
    assert s2_tcp1 not in peers(c1)
    # s2 answers and sends, but never discovers: its view of c1 is the NID that reached it
    res = s2.put(C1[0], count=3)
    assert res["completed"] == 3, res
    assert nids_of(peers(s2)[C1[0]]) == [C1[0]]
    assert s2.lnetctl("net", "add", "--net", "tcp", "--if", "eth1").rc != 0  # one NI per net


@pytest.mark.requirement("bck-025")
def test_static_non_mr_peer_is_added_non_mr(testbed_factory: Any, tmp_path: Any) -> None:
    """bck-025: a ``peers:`` entry naming a ``multi_rail: false`` node is added with
    ``peer add --non_mr`` (testbed/plan/verbs.py): ``lnet_add_peer_ni`` would keep a peer
    configured MR even when its ping says otherwise, and the client would spread PUTs over
    s2's second NID. Non-MR, every PUT goes to the NID addressed."""
    topo = tmp_path / "compat-static.yaml"
    topo.write_text((TOPOLOGIES / "compat.yaml").read_text().replace(
        "c1: {interfaces: [lan0, lan1]}", "c1: {interfaces: [lan0, lan1], peers: [s2]}"))
    tb = testbed_factory(topo)
    c1 = tb.node("c1")
    s2_tcp, s2_tcp1 = "10.10.0.3@tcp", "10.11.0.3@tcp1"
    view = peers(c1)[s2_tcp]
    assert view["Multi-Rail"] is False and nids_of(view) == [s2_tcp, s2_tcp1]
    res = c1.put(s2_tcp, count=20, size=1024)
    assert res["completed"] == 20, res
    sends = {x["nid"]: x["statistics"]["send_count"] for x in peers(c1)[s2_tcp]["peer ni"]}
    assert sends[s2_tcp] >= 20 and sends[s2_tcp1] == 0, sends
