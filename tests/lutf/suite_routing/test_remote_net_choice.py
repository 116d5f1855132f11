"""Which of a routed Multi-Rail peer's nets a PUT goes to (two-remote-nets.yaml; spec §6.3,
§7.2; lib-move.c ``lnet_handle_find_routed_path``).

s1 sits on tcp1 and tcp2, both behind r1; c1 (tcp) discovers it, so s1 is one Multi-Rail
peer with two peer nets. For each PUT to s1 real LNet walks s1's peer nets that have a route
and keeps the best: the healthier net first, then the lower UDSP priority, then the lower
``lpn_seq`` (bumped on each use, so equal nets alternate). What a user sees: where s1
received the PUTs (``net show -v 3`` on s1), with ``udsp add --dst`` and ``peer set --health``
on c1 changing it.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import delta, local_nis, ok

pytestmark = [pytest.mark.mininet, pytest.mark.topology("two-remote-nets.yaml")]

S1_TCP1, S1_TCP2 = "10.41.0.2@tcp1", "10.42.0.2@tcp2"
PUTS = 4


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    c1 = module_topology.node("c1")
    waited = 0.0
    while True:
        routes = (c1.yaml("route show -v") or {}).get("route") or []
        if len(routes) == 2 and all(r["state"] == "up" for r in routes):
            break
        assert waited < 20.0, routes
        module_topology.advance(0.5)
        waited += 0.5
    ok(c1, "lnetctl", f"discover {S1_TCP1}")
    peer = c1.yaml(f"peer show --nid {S1_TCP1}")["peer"][0]
    assert {p["nid"] for p in peer["peer ni"]} == {S1_TCP1, S1_TCP2}, peer
    return module_topology


def _received(tb: Any) -> dict[str, int]:
    c1, s1 = tb.node("c1"), tb.node("s1")
    before = {nid: ni["received_stats"]["put"] for nid, ni in local_nis(s1).items()}
    for _ in range(PUTS):
        assert c1.put(S1_TCP1, count=1, size=1024)["completed"] == 1
    after = {nid: ni["received_stats"]["put"] for nid, ni in local_nis(s1).items()}
    return delta(after, before)


@pytest.mark.requirement("rtr-multi-gw", "snd-030")
def test_equal_remote_nets_take_turns(tb: Any) -> None:
    """Both of s1's nets healthy, no UDSP: ``lpn_seq`` decides, so four PUTs one at a time
    arrive two on s1's tcp1 NI and two on its tcp2 NI."""
    assert _received(tb) == {S1_TCP1: PUTS // 2, S1_TCP2: PUTS // 2}


@pytest.mark.requirement("cfg-110", "hlth-lnt-peer-ni-health")
def test_udsp_priority_then_health_choose_the_remote_net(tb: Any) -> None:
    """``udsp add --dst tcp2 --priority 0`` on c1: every PUT to s1 arrives on tcp2 (the
    remote net's priority, cfg-110); priority on tcp1 instead: all on tcp1. Then s1's tcp1
    NI at health 500 on c1 (``peer set --health``): health comes before priority, so all
    go to tcp2 although tcp1 is preferred."""
    c1 = tb.node("c1")
    try:
        ok(c1, "lnetctl", "udsp add --dst tcp2 --priority 0")
        assert _received(tb) == {S1_TCP1: 0, S1_TCP2: PUTS}
        ok(c1, "lnetctl", "udsp del --all")
        ok(c1, "lnetctl", "udsp add --dst tcp1 --priority 0")
        assert _received(tb) == {S1_TCP1: PUTS, S1_TCP2: 0}
        ok(c1, "lnetctl", f"peer set --nid {S1_TCP1} --health 500")
        assert _received(tb) == {S1_TCP1: 0, S1_TCP2: PUTS}
    finally:
        ok(c1, "lnetctl", "udsp del --all")
        ok(c1, "lnetctl", "peer set --all --health 1000")
