"""sanity-lnet.sh tests 221 (routes with discovery disabled come up and carry traffic) and 223
(avoid_asym_router_failure=1, the default, with discovery disabled), at lustre-release
c881f8ebcb. Nodes: ``routed-dd.yaml`` (lnet_peer_discovery_disabled=1 at
module load on every node)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.routers import Routed

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed-dd.yaml")]


def test_sanity_221_routes_with_discovery_disabled(module_topology: Any) -> None:
    """``do_basic_rtr_test``: routes up on both sides, pings through the router."""
    t = Routed(module_topology)
    assert yaml.safe_load(t.l.lnetctl("global show").out)["global"]["discovery"] == 0
    t.basic()


def test_sanity_223_avoid_asym_router_failure_1_discovery_disabled(module_topology: Any
                                                                   ) -> None:
    Routed(module_topology).aarf_enabled()
