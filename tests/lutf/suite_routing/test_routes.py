"""Routes, gateways and routers on topologies/routed.yaml (seed 001, seed 002 rtr-*, spec §6).

c1, c2 (tcp) -- r1, r2 (tcp + tcp1, forwarding) -- s1, s2 (tcp1). Module-scoped testbed: each
test measures counter deltas around its own traffic and restores any route it changes.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import peer_nis, stats

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed")]

R1, R2 = "10.10.0.3@tcp", "10.10.0.4@tcp"
S1 = "10.20.0.3@tcp1"


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    for name in ("c1", "c2", "s1", "s2"):
        _wait_up(module_topology.node(name))
    return module_topology


def _routes(node: Any) -> dict[str, dict[str, Any]]:
    view = node.yaml("route show -v") or {"route": []}
    return {f"{r['net']} {r['gateway']}": r for r in view["route"]}


def _wait_up(node: Any, bound: float = 17.0) -> dict[str, dict[str, Any]]:
    """Poll with ``tb.advance`` (wall clock on Mininet, virtual time on the sim)."""
    waited = 0.0
    while True:
        shown = _routes(node)
        if shown and all(r["state"] == "up" for r in shown.values()):
            return shown
        assert waited < bound, f"routes of {node} not up: {shown}"
        node.testbed.advance(0.25)
        waited += 0.25


@pytest.mark.requirement("rtr-multi-gw", "rtr-peer-route-up")
def test_two_gateways_to_one_net_shown_up(tb: Any) -> None:
    """``route show -v`` (spec §9.3): both routes to tcp1, hop 1, priority 0, up, and
    single-hop once the gateways' pings showed tcp1 NIs (``lr_single_hop``)."""
    shown = _routes(tb.node("c1"))
    assert set(shown) == {f"tcp1 {R1}", f"tcp1 {R2}"}
    for r in shown.values():
        assert (r["hop"], r["priority"], r["state"], r["type"]) == (1, 0, "up", "single-hop")


@pytest.mark.requirement("rtr-gw-up", "rtr-discover-first-use")
def test_gateway_peer_discovered_and_up(tb: Any) -> None:
    """002 "Router Discovery": the gateway peer carries both of the router's NIDs, and its
    peer NIs are ``up`` (spec §9.2: state shown for gateways)."""
    peers = {p["primary nid"]: p for p in tb.node("c1").yaml("peer show")["peer"]}
    gw = peers[R1]
    assert {p["nid"] for p in gw["peer ni"]} == {R1, "10.20.0.1@tcp1"}
    assert {p["state"] for p in gw["peer ni"]} == {"up"}


@pytest.mark.requirement("rtr-select-hops-priority")
def test_priority_steers_all_requests_to_one_router(tb: Any) -> None:
    """Spec §2.6 step 3.2: the route with the lower priority value carries every request."""
    c2, r1, r2 = tb.node("c2"), tb.node("r1"), tb.node("r2")
    assert c2.lnetctl("route", "del", "--net", "tcp1", "--gateway", R2).rc == 0
    assert c2.lnetctl("route", "add", "--net", "tcp1", "--gateway", R2, "--hop", "1",
                      "--priority", "5").rc == 0
    try:
        _wait_up(c2)
        b1, b2 = stats(r1)["route_count"], stats(r2)["route_count"]
        res = c2.put(S1, count=100, size=1024)
        assert res["completed"] == 100, res
        # requests all via r1; s1's ACKs may come back through either router
        assert stats(r1)["route_count"] - b1 >= 100
        assert stats(r2)["route_count"] - b2 <= 100
        assert _routes(c2)[f"tcp1 {R2}"]["priority"] == 5
    finally:
        c2.lnetctl("route", "del", "--net", "tcp1", "--gateway", R2)
        c2.lnetctl("route", "add", "--net", "tcp1", "--gateway", R2, "--hop", "1")


@pytest.mark.requirement("rtr-multi-gw")
def test_route_verbs_refuse_bad_input_with_errno(tb: Any) -> None:
    """Spec §6.1: the kernel's checks with lnetctl's error YAML and exit status."""
    c1 = tb.node("c1")
    cases = [
        (["--net", "tcp1", "--gateway", R1], -17),               # same gateway: -EEXIST
        (["--net", "tcp", "--gateway", R1], -22),                # gateway on the target net
        (["--net", "tcp1", "--gateway", "10.30.0.1@tcp2"], -113),  # gateway net not local
        (["--net", "tcp1", "--gateway", R1, "--hop", "300"], -22),
        # jt_add_route ignores a hop that does not parse (parse_long fails: hop -1), so
        # this is the first case again: the route exists
        (["--net", "tcp1", "--gateway", R1, "--hop", "x"], -17),
    ]
    for argv, errno in cases:
        res = c1.lnetctl("route", "add", *argv)
        assert res.rc == (256 + errno) % 256, (argv, res)
        assert f"errno: {errno}" in res.err and "Traceback" not in res.err, (argv, res.err)
    # yaml_lnet_route refuses a missing --gateway before the kernel: stdout, -EINVAL
    res = c1.lnetctl("route", "add", "--net", "tcp9")
    assert (res.rc, res.out, res.err) == (234, "missing mandatory parameters:'gateway'\n", "")
    assert c1.lnetctl("route", "add", "--net", "tcp7", "--gateway", R1,
                      "--priority", "3").rc == 0
    shown = _routes(c1)[f"tcp7 {R1}"]
    assert (shown["hop"], shown["priority"]) == (-1, 3)
    assert c1.lnetctl("route", "del", "--net", "tcp7", "--gateway", R1).rc == 0
    assert f"tcp7 {R1}" not in _routes(c1)
    res = c1.lnetctl("route", "del", "--net", "tcp7", "--gateway", R1)
    assert res.rc != 0 and "errno: -2" in res.err


@pytest.mark.requirement("rtr-router-last-rx")
def test_routing_show_on_a_router(tb: Any) -> None:
    """Spec §9.3 ``routing show``: the three pools with the topology's buffer counts,
    ``enable: 1``; a node that never routed prints nothing."""
    doc = tb.node("r1").yaml("routing show")
    pools = doc["routing"][0]["cpt[0]"]
    assert {k: (v["npages"], v["nbuffers"]) for k, v in pools.items()} == {
        "tiny": (0, 512), "small": (1, 4096), "large": (256, 256)}
    assert doc["routing"][1] == {"enable": 1}
    assert doc["buffers"] == {"tiny": 512, "small": 4096, "large": 256}
    assert tb.node("c1").lnetctl("routing", "show").out == ""


C2 = "10.10.0.2@tcp"


def _puts_from(router: Any, nid: str) -> int:
    return int(peer_nis(router, nid)[nid]["received_stats"]["put"])


def _del_error(node: Any, net: str, gateway: str) -> tuple[int, str]:
    res = node.lnetctl("route", "del", "--net", net, "--gateway", gateway)
    assert res.rc == 254, res
    (entry,) = yaml.safe_load(res.err)["del"]
    return entry["route"]["errno"], entry["route"]["descr"]


@pytest.mark.requirement("rtr-multi-gw")
def test_route_del_names_what_is_missing_and_keeps_the_gateways_other_routes(tb: Any) -> None:
    """Real LNet ``lnet_del_route(net, gw)``: a route is deleted from its own remote net's
    list only, so a gateway's routes to other nets stay; nothing to delete is -ENOENT. c1
    gets a second route through r1 (tcp7): ``route del`` with an unknown gateway names it,
    a net without routes says so, neither changes ``route show``; deleting tcp7 via r1
    leaves tcp1 via r1 (and r2) in place."""
    c1 = tb.node("c1")
    before = set(_routes(c1))
    assert c1.lnetctl("route", "add", "--net", "tcp7", "--gateway", R1).rc == 0
    try:
        assert _del_error(c1, "tcp1", "10.10.0.99@tcp") == (
            -2, "no route through 10.10.0.99@tcp")
        assert _del_error(c1, "tcp8", R1) == (
            -2, "cannot delete route: No such file or directory")
        assert set(_routes(c1)) == before | {f"tcp7 {R1}"}
        assert c1.lnetctl("route", "del", "--net", "tcp7", "--gateway", R1).rc == 0
        assert set(_routes(c1)) == before == {f"tcp1 {R1}", f"tcp1 {R2}"}
    finally:
        c1.lnetctl("route", "del", "--net", "tcp7", "--gateway", R1)


@pytest.mark.requirement("cfg-095", "rtr-select-hops-priority")
def test_udsp_router_rule_sends_a_peer_s_requests_through_its_gateway(tb: Any) -> None:
    """Real LNet: a ``--dst NID --rte GW`` rule gives the peer NI a preferred-gateway list
    (udsp.c ``lnet_udsp_apply_rte_list_on_lpni``; ``udsp info`` "Preferred gateway NIDs" in
    ``peer show -v 4``), and ``lnet_find_route_locked`` takes a route through a preferred
    gateway over the others. On c2: ``--dst <s1> --rte <r2's tcp NIDs>``, 100 PUTs to s1:
    r2 received all 100 from c2 (``peer show -v 3`` on r2: c2's ``received_stats``), r1
    none (s1's ACKs may come back through either). Deleting the rule clears the list."""
    c2, r1, r2 = tb.node("c2"), tb.node("r1"), tb.node("r2")
    assert c2.put(S1, count=1, size=1024)["completed"] == 1  # s1 is a peer of c2
    try:
        assert c2.lnetctl("udsp", "add", "--dst", S1, "--rte", "10.10.0.[4]@tcp").rc == 0
        info = c2.yaml(f"peer show -v 4 --nid {S1}")["peer"][0]["peer ni"][0]["udsp info"]
        assert info["Preferred gateway NIDs"] == {"NID-0": R2}
        before = [_puts_from(r, C2) for r in (r1, r2)]
        res = c2.put(S1, count=100, size=1024)
        assert res["completed"] == 100, res
        assert [_puts_from(r, C2) - b for r, b in zip((r1, r2), before, strict=True)] == [
            0, 100]
    finally:
        assert c2.lnetctl("udsp", "del", "--all").rc == 0
    info = c2.yaml(f"peer show -v 4 --nid {S1}")["peer"][0]["peer ni"][0]["udsp info"]
    assert "Preferred gateway NIDs" not in info
