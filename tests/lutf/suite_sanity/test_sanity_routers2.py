"""sanity-lnet.sh test 226: two routers, the remote peer's route through one removed, at
lustre-release c881f8ebcb. Nodes: ``routed2.yaml``."""

from __future__ import annotations

from typing import Any

import pytest

from lutf.suite_sanity.routers import LOCAL_NET, Routed
from lutf.suite_sanity.sanity import run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed2.yaml")]


def test_sanity_226_missing_route_for_one_of_two_routers(module_topology: Any) -> None:
    """Round robin over both routers after the peer lost its route through r: the pings
    may fail, nothing may crash (an LBUG on the peer upstream)."""
    t = Routed(module_topology, routers=("r", "r2"))
    t.basic()
    for _ in range(4):
        run(t.l, f"ping {t.pnid}")
    run(t.p, f"route del --net {LOCAL_NET} --gateway {t.rnids['r'][1]}")
    for _ in range(4):
        t.l.lnetctl(f"ping {t.pnid}")
    for node in (t.l, t.p, module_topology.node("r"), module_topology.node("r2")):
        run(node, "net show")  # every node still answers
