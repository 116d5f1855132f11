"""o2iblnd's tunables from the topology, on Mininet and on the simulator (issue 28): the
network's ``tunables:``/``lnd tunables:`` reach each node's o2ib NI, ``lnetctl net show -v``
prints them under ``lnd tunables:`` in ``lustre_o2iblnd_show_tun``'s order (liblnetconfig_lnd.c),
``lnetctl net add --peer-credits --credits --conns-per-peer`` likewise,
and bulk and small PUTs complete over the negotiated queue depth (32)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.mininet, pytest.mark.topology("o2ib_tun.yaml")]

S1 = "10.53.0.2@o2ib"
ORDER = ["peercredits_hiw", "map_on_demand", "concurrent_sends", "fmr_pool_size",
         "fmr_flush_trigger", "fmr_cache", "ntx", "conns_per_peer", "timeout", "tos"]


def _ni(node: Any, net: str) -> dict[str, Any]:
    return node.lnetctl_yaml(f"net show -v 3 --net {net}")["net"][0]["local NI(s)"][0]


def test_topology_tunables_shown_and_used(topology: Any) -> None:
    c1 = topology.node("c1")
    ni = _ni(c1, "o2ib")
    assert (ni["tunables"]["peer_credits"], ni["tunables"]["credits"]) == (32, 512)
    lnd = ni["lnd tunables"]
    assert list(lnd) == ORDER
    assert (lnd["peercredits_hiw"], lnd["concurrent_sends"], lnd["conns_per_peer"]) == \
        (16, 64, 2)
    assert c1.put(S1, count=64, size=1 << 20)["completed"] == 64
    assert c1.put(S1, count=500, size=8)["completed"] == 500
    assert _ni(c1, "o2ib")["statistics"]["send_count"] >= 564


def test_lnetctl_net_add_o2ib_tunables(topology: Any) -> None:
    """The net again by hand (deleted first: it exists already), with lnetctl's
    flags; kiblnd_tunables_setup: hiw = peer_credits / 2."""
    c1 = topology.node("c1")
    assert c1.lnetctl("net del --net o2ib").rc == 0
    res = c1.lnetctl("net add --net o2ib --if ib0 --peer-credits 64 --credits 1024 "
                     "--conns-per-peer 3")
    assert res.rc == 0, res
    lnd = _ni(c1, "o2ib")["lnd tunables"]
    assert (lnd["peercredits_hiw"], lnd["concurrent_sends"], lnd["conns_per_peer"]) == \
        (32, 64, 3)
    assert c1.put(S1, count=16, size=1 << 20)["completed"] == 16
