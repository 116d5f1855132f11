"""Which route carries the traffic, and when a gateway and a route count as alive (seed 001
router and gateway requirements, seed 002 "Route Selection"; spec §2.6, §6.3, §6.4).

``routed-noaarf.yaml``: c1 (tcp) -- r1, r2 (tcp + tcp1) -- s1 (tcp1), avoid_asym_router_failure
off at module load, so a route's own alive flag (``lr_alive``) is what holds it down once its
gateway is back. One testbed per test (they break things); waiting uses ``tb.advance`` (wall
clock on Mininet, virtual time on the sim), so every test runs on both backends.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import advance_until as _until
from lutf.lnet_views import ok, peer_nis

pytestmark = [pytest.mark.mininet, pytest.mark.slow, pytest.mark.topology("routed-noaarf.yaml")]

R1, R2 = "10.10.0.2@tcp", "10.10.0.3@tcp"
R1_FAR = "10.20.0.1@tcp1"
S1 = "10.20.0.3@tcp1"
BURST = 20


def _routes(node: Any) -> dict[str, dict[str, Any]]:
    """gateway -> its route to tcp1 in ``lnetctl route show -v``."""
    view = node.yaml("route show -v") or {"route": []}
    return {r["gateway"]: r for r in view["route"] if r["net"] == "tcp1"}


def _state(node: Any) -> dict[str, str]:
    return {gw: str(r["state"]) for gw, r in _routes(node).items()}


def _routers(node: Any) -> dict[str, str]:
    """primary NID -> ``up``/``down`` from ``lctl get_param -n routers`` (``ref rtr_ref alive
    router`` lines, lnet_debugfs.c ``proc_lnet_routers``)."""
    out = ok(node, "lctl", "get_param -n routers")
    return {w[3]: w[2] for line in out.splitlines()[1:] if len(w := line.split()) == 4}


def _puts_via(node: Any) -> dict[str, int]:
    """PUTs c1 sent to each gateway NI (``peer show -v 3`` ``sent_stats``)."""
    pnis = peer_nis(node)
    return {gw: int(pnis[gw]["sent_stats"]["put"]) for gw in (R1, R2)}


def _burst_via(node: Any) -> dict[str, int]:
    """A burst of PUTs to s1; how many went through each gateway. (One PUT and a second
    first: a route change makes c1 push its ping buffer to the gateways, PUTs too.)"""
    assert node.put(S1, count=1, size=64)["completed"] == 1
    node.testbed.advance(1.0)
    before = _puts_via(node)
    res = node.put(S1, count=BURST, size=1024)
    assert res["completed"] == BURST, res
    return {gw: n - before[gw] for gw, n in _puts_via(node).items()}


def _up(tb: Any) -> Any:
    c1 = tb.node("c1")
    _until(tb, lambda: set(_state(c1).values()) == {"up"}, 20, "c1's routes up")
    return c1


def _router_ping_fails(tb: Any, c1: Any) -> None:
    """c1's checker slowed to one ping a minute, then the REPLY to its next ping of r1 dropped
    on arrival (``lctl net_drop_add``, a receive-side rule: ``lnet_parse`` drops it);
    router_ping_timeout 5 s later the ping has failed (``lnet_router_discovery_complete``
    with an error): r1 is dead to c1, its peer NIs down, its route's ``lr_alive`` down. The
    rule goes; nothing pings r1 for about a minute."""
    ok(c1, "lnetctl", "set alive_router_check_interval 60")
    ok(c1, "lctl", f"net_drop_add -s {R1} -d * -m reply -r 1")
    _until(tb, lambda: _routers(c1)[R1] == "down", 15, "c1's router ping of r1 failed")
    ok(c1, "lctl", "net_drop_del -a")
    assert _state(c1) == {R1: "down", R2: "up"}


@pytest.mark.requirement("rtr-select-hops-priority")
def test_route_with_fewer_hops_carries_every_put(topology: Any) -> None:
    """Seed 002 route selection (lib-move.c ``lnet_find_route_locked``: priority first, then
    ``lr_hops``, an undefined hop count counting as 1): with r2's route at hop 2 every PUT
    goes through r1 (hop 1); with r1's at hop 3 instead, every PUT goes through r2. ``route
    show -v`` shows the hop counts; c1's ``peer show`` counters show where the PUTs went."""
    tb = topology
    c1 = _up(tb)
    ok(c1, "lnetctl", f"route del --net tcp1 --gateway {R2}")
    ok(c1, "lnetctl", f"route add --net tcp1 --gateway {R2} --hop 2")
    _up(tb)
    assert {gw: r["hop"] for gw, r in _routes(c1).items()} == {R1: 1, R2: 2}
    assert _burst_via(c1) == {R1: BURST, R2: 0}
    ok(c1, "lnetctl", f"route del --net tcp1 --gateway {R1}")
    ok(c1, "lnetctl", f"route add --net tcp1 --gateway {R1} --hop 3")
    _up(tb)
    assert {gw: r["hop"] for gw, r in _routes(c1).items()} == {R1: 3, R2: 2}
    assert _burst_via(c1) == {R1: 0, R2: BURST}


@pytest.mark.requirement("rtr-gw-down-on-fail", "rtr-route-down")
def test_gateway_marked_dead_by_a_failed_ping_stays_dead_when_its_nids_are_said_alive(
        topology: Any) -> None:
    """Real LNet: a failed router ping clears the gateway's own ``lp_alive``
    (``lnet_router_discovery_complete``), and ``lctl get_param routers`` prints
    ``lnet_is_gateway_alive``: ``lp_alive`` and an alive peer NI on every net of the gateway.
    ``lctl set_route NID up`` (``lnet_notify`` from userspace, no reset) marks r1's peer NIs
    up again (``peer show`` ``state: up``) but does not touch ``lp_alive``: r1 stays ``down``
    in ``routers``, its route stays down and every PUT goes through r2."""
    tb = topology
    c1 = _up(tb)
    assert _routers(c1) == {R1: "up", R2: "up"}
    _router_ping_fails(tb, c1)
    for nid in (R1, R1_FAR):
        ok(c1, "lctl", f"set_route {nid} up")
    pnis = peer_nis(c1)
    assert (pnis[R1]["state"], pnis[R1_FAR]["state"]) == ("up", "up")
    for _ in range(2):  # and so it stays while nothing is heard from r1
        assert _routers(c1) == {R1: "down", R2: "up"}
        assert _state(c1) == {R1: "down", R2: "up"}
        tb.advance(2.0)


@pytest.mark.requirement("rtr-gw-down-on-fail", "rtr-mr-lnd-notify", "rtr-gw-up")
def test_route_down_by_a_failed_ping_waits_for_the_next_ping_after_an_lnd_revival(
        topology: Any) -> None:
    """Real LNet (router.c ``lnet_is_route_alive``): a route is alive only if its gateway is
    (``lp_alive``), its local peer NIs are, and its own ``lr_alive``, which only a router
    ping sets (``lnet_router_discovery_ping_reply``). r1's ping fails; r1 restarts, and c1's
    next contact with it brings the socklnd's birth notice with ``reset`` (its incarnation
    changed: ``lnet_notify(ni, nid, alive, reset)``), which revives the gateway and its peer
    NI (``peer show`` up, health 1000). The route through r1 still shows down and a burst of
    PUTs all goes through r2, until c1's checker pings r1 again (a minute after the failed
    ping); then it is up and carries PUTs again."""
    tb = topology
    c1 = _up(tb)
    _router_ping_fails(tb, c1)
    tb.fault.add("restart", node="r1")
    _until(tb, lambda: c1.lnetctl("ping", R1).rc == 0, 30, "r1 answering again")
    pni = peer_nis(c1)[R1]
    assert (pni["state"], pni["health stats"]["health value"]) == ("up", 1000)
    for _ in range(2):  # no traffic: nothing pings r1 before the slowed checker does
        assert _state(c1) == {R1: "down", R2: "up"}
        tb.advance(2.0)
    assert _burst_via(c1) == {R1: 0, R2: BURST}  # unused while its lr_alive is down
    assert _state(c1) == {R1: "down", R2: "up"}
    pings = int(peer_nis(c1)[R1]["sent_stats"]["get"])
    _until(tb, lambda: _state(c1)[R1] == "up", 65, "c1's next router ping of r1")
    assert int(peer_nis(c1)[R1]["sent_stats"]["get"]) > pings  # the ping that brought it up
    via = _burst_via(c1)
    assert via[R1] > 0 and sum(via.values()) == BURST, via
