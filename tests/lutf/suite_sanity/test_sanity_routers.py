"""sanity-lnet.sh tests 222 (route and router NI aliveness with avoid_asym_router_failure=1,
the default) and 50 (routing and buffers by import), at lustre-release c881f8ebcb. Nodes:
``routed.yaml``."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import advance_until
from lutf.suite_sanity.routers import Routed
from lutf.suite_sanity.sanity import export, import_text, reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed.yaml")]


def test_sanity_222_avoid_asym_router_failure_1(module_topology: Any) -> None:
    """``do_aarf_enabled_test``: a route comes up only when both router NIs are up."""
    Routed(module_topology).aarf_enabled()


def test_sanity_50_enable_disable_routing_via_yaml_import(module_topology: Any) -> None:
    """``routing: enable`` and ``buffers:`` imported; the module's *_router_buffers (16, 8,
    4 in routed.yaml) are what export shows, plus the CPT count when set by import."""
    node = module_topology.node("l")
    reinit(node)

    def enabled() -> int:
        shown = yaml.safe_load(node.lnetctl("routing show").out or "{}") or {}
        return int(any(i.get("enable") == 1 for i in shown.get("routing", [])
                       if isinstance(i, dict)))

    assert import_text(node, "routing:\n    enable: 1\n").rc == 0
    sizes = export(node)["buffers"]
    advance_until(module_topology, lambda: enabled() == 1, 10, "routing enabled")
    assert import_text(node, "routing:\n    enable: 0\n").rc == 0
    advance_until(module_topology, lambda: enabled() == 0, 10, "routing disabled")
    ncpt = len(node.lctl("get_param -n cpu_partition_table").out.splitlines())
    want = {k: v + ncpt for k, v in sizes.items()}
    text = "routing:\n    enable: 1\nbuffers:\n" + "".join(f"    {k}: {v}\n" for k, v in
                                                          want.items())
    assert import_text(node, text).rc == 0
    assert export(node)["buffers"] == want
    run(node, "set routing 0")
