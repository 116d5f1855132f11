"""sanity-lnet.sh test 227: router peer health with discovery disabled, at lustre-release
c881f8ebcb. After do_basic_rtr_test with two remote peers, the first stops LNet; two pings to
it from this host fail, and the router counts the GETs it dropped for that peer NI
(``dropped_stats`` of ``peer show -v 2``). Nodes: ``routed-dd2p.yaml`` (the module options at
load)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.routers import LOCAL_NET, Routed
from lutf.suite_sanity.sanity import REMOTE_NET, fails, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed-dd2p.yaml")]


def test_sanity_227_router_peer_health_discovery_disabled(module_topology: Any) -> None:
    tb = module_topology
    t = Routed(tb)
    p2 = tb.node("p2")
    run(p2, "lnet unconfigure")
    run(p2, "lnet configure")
    run(p2, f"net add --net {REMOTE_NET} --if eth0")
    run(p2, f"route add --net {LOCAL_NET} --gateway {t.rnids['r'][1]}")
    t.basic()
    run(t.l, f"ping {p2.lctl('list_nids').out.split()[0]}")
    run(p2, f"ping {t.lnid}")
    run(t.p, "lnet unconfigure")
    fails(t.l, f"ping {t.pnid}")
    fails(t.l, f"ping {t.pnid}")
    doc = yaml.safe_load(tb.node("r").lnetctl(f"peer show -v 2 --nid {t.pnid}").out)
    dropped = sum(int(ni["dropped_stats"]["get"]) for peer in doc["peer"]
                  for ni in peer["peer ni"])
    assert dropped > 0
