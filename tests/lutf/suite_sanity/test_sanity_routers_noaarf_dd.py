"""sanity-lnet.sh test 225: route and router NI aliveness with avoid_asym_router_failure=0 and
discovery disabled, at lustre-release c881f8ebcb. Nodes: ``routed-noaarf-dd.yaml`` (both
module options at load)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.routers import Routed

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed-noaarf-dd.yaml")]


def test_sanity_225_avoid_asym_router_failure_0_discovery_disabled(module_topology: Any
                                                                   ) -> None:
    t = Routed(module_topology)
    assert yaml.safe_load(t.l.lnetctl("global show").out)["global"]["discovery"] == 0
    t.aarf_disabled()
