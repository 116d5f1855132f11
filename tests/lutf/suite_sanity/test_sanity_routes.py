"""sanity-lnet.sh tests 100, 102, 105, 106, 111: ``lnetctl route add|del|show`` and ``lctl
show_route`` on setup_router_test's nodes, at lustre-release c881f8ebcb.

``validate_gateway_nids``: the export lists as many ``gateway:`` entries as expected, each
expected gateway among them, and every NID valid."""

from __future__ import annotations

from typing import Any

import pytest

from lutf.suite_sanity.sanity import REMOTE_NET, export, fails, gateways, reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed.yaml")]
@pytest.fixture(scope="module")
def routed(module_topology: Any) -> Any:
    return module_topology


def _router_nid(tb: Any) -> str:
    """``ROUTER_NIDS[router][0]``: the router's NID on LOCAL_NET."""
    return next(n for n in tb.node("r").nids if n.endswith("@tcp"))


def _setup(tb: Any) -> Any:
    """setup_router_test's configuration of this node: LNet on, LOCAL_NET on eth0."""
    local = tb.node("l")
    reinit(local)
    run(local, "net add --net tcp --if eth0")
    return local


def test_sanity_100_add_route_with_single_gw(routed: Any) -> None:
    local, gw = _setup(routed), _router_nid(routed)
    run(local, f"route add --net {REMOTE_NET} --gateway {gw}")
    assert gateways(local) == [gw]
    route = export(local)["route"][0]
    assert (route["net"], route["hop"], route["priority"]) == (REMOTE_NET, -1, 0)
    assert gw in [p["primary nid"] for p in export(local)["peer"]]


def test_sanity_102_delete_route_with_single_gw(routed: Any) -> None:
    local, gw = _setup(routed), _router_nid(routed)
    expected = gateways(local)
    run(local, f"route add --net {REMOTE_NET} --gateway {gw}")
    run(local, f"route del --net {REMOTE_NET} --gateway {gw}")
    assert gateways(local) == expected == []


def test_sanity_105_adding_duplicate_gw_peer_fails(routed: Any) -> None:
    """peer.c ``lnet_peer_add``: re-creating the route's gateway peer as configured deletes
    it first, and ``lnet_peer_ni_del_locked`` refuses a gateway (E19)."""
    local, gw = _setup(routed), _router_nid(routed)
    run(local, f"route add --net {REMOTE_NET} --gateway {gw}")
    fails(local, f"peer add --prim {gw}")


def test_sanity_106_deleting_gw_peer_fails(routed: Any) -> None:
    local, gw = _setup(routed), _router_nid(routed)
    run(local, f"route add --net {REMOTE_NET} --gateway {gw}")
    fails(local, f"peer del --prim {gw}")


def test_sanity_111_many_routes(routed: Any) -> None:
    """499 routes with the short options ``-n -g``; lnetctl and lctl both count 499."""
    local, gw = _setup(routed), _router_nid(routed)
    for i in range(2, 501):
        run(local, f"route add -n {REMOTE_NET}{i} -g {gw}")
    assert run(local, "route show").out.count("gateway") == 499
    shown = local.lctl("show_route").out.splitlines()
    assert sum(1 for line in shown if "net" in line) == 499
