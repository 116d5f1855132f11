"""sanity-lnet.sh tests 101, 103: ``route add|del`` with a gateway range on the local net
(``IF0_NET.[GW_HOSTNUM-...]``), at lustre-release c881f8ebcb.

``GW_HOSTNUM`` is the node's host number + 1: 10.60.0.2, node ``o`` of single.yaml. sanity-lnet
expects those gateways silent (their peers stay ``Multi-Rail: False``, never discovered), so
``o``'s LNet is unconfigured first: a configured ``o`` answers the router pinger's discovery
and its peer turns Multi-Rail."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import REMOTE_NET, export, gateways, reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]


def _silent_gateways(tb: Any) -> Any:
    """Node ``s`` reinitialised, the gateway addresses silent (``o`` unconfigured)."""
    run(tb.node("o"), "lnet unconfigure")
    s = tb.node("s")
    reinit(s)
    return s


def test_sanity_101_add_route_with_multiple_gw(module_topology: Any) -> None:
    """A gateway range on the local net: five routes and five non-MR gateway peers."""
    s = _silent_gateways(module_topology)
    run(s, "net add --net tcp --if eth0")
    run(s, f"route add --net {REMOTE_NET} --gateway 10.60.0.[2-6]@tcp")
    want = [f"10.60.0.{i}@tcp" for i in range(2, 7)]
    assert sorted(gateways(s)) == want
    peers = {p["primary nid"]: p["Multi-Rail"] for p in export(s)["peer"]}
    assert peers == {nid: False for nid in want}
    routes = yaml.safe_load(run(s, "route show -v").out)["route"]
    assert {(r["net"], r["hop"], r["priority"]) for r in routes} == {(REMOTE_NET, -1, 0)}


def test_sanity_103_delete_route_with_multiple_gw(module_topology: Any) -> None:
    s = _silent_gateways(module_topology)
    run(s, "net add --net tcp --if eth0")
    expected = gateways(s)
    run(s, "route add --net tcp103 --gateway 10.60.0.[2-7/2]@tcp")
    assert len(gateways(s)) == 3
    run(s, "route del --net tcp103 --gateway 10.60.0.[2-7/2]@tcp")
    assert gateways(s) == expected
