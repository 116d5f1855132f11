"""A router's local NI status and incoming pings (lib-move.c ``lnet_parse``, issue 26 item 6).

Each test makes c1 a router and lowers an NI's health, so each gets its own testbed.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, local_nis, ok

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]


@pytest.mark.requirement("rtr-router-last-rx")
def test_incoming_ping_sets_router_ni_up_whatever_its_health(topology: Any) -> None:
    """lib-move.c ``lnet_parse``: on a router, a GET on the reserved portal from a non-local
    NID (an lnet or discovery ping) refreshes ``net_last_alive`` and sets the receiving NI
    UP (``lnet_ni_set_status_locked``), whatever its health: an NI that ``net set --health
    0`` marked down is up again after s1 pings it, while its health is still below 1000
    (its recovery pings add +200 at a time)."""
    c1, s1 = topology.node("c1"), topology.node("s1")
    ok(c1, "lnetctl", "set routing 1")
    ok(c1, "lnetctl", f"net set --nid {C1_NIDS[0]} --health 0")
    assert local_nis(c1)[C1_NIDS[0]]["status"] == "down"
    ok(s1, "lnetctl", f"ping {C1_NIDS[0]}")
    ni = local_nis(c1)[C1_NIDS[0]]
    assert ni["status"] == "up", ni["status"]
    assert ni["health stats"]["health value"] < 1000, ni["health stats"]
