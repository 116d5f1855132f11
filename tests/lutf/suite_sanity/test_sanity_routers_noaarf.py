"""sanity-lnet.sh test 224: route and router NI aliveness with avoid_asym_router_failure=0,
at lustre-release c881f8ebcb. Nodes: ``routed-noaarf.yaml`` (the module option at load)."""

from __future__ import annotations

from typing import Any

import pytest

from lutf.suite_sanity.routers import Routed

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed-noaarf.yaml")]


def test_sanity_224_avoid_asym_router_failure_0(module_topology: Any) -> None:
    """``do_aarf_disabled_test``: a route is up as soon as its gateway answers, whatever the
    router's far side; it stays up for the peer when this host stops LNet."""
    Routed(module_topology).aarf_disabled()
